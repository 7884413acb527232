"""The one door to Hydra's private API: everything ms_exp takes from ``hydra._internal`` and
from the global-state helpers of ``hydra.initialize``.

ms_exp composes and checks every job of a command line before ``@hydra.main`` runs it
(docs/design.md#checked-before-running), so it needs what ``hydra._internal.utils.run_hydra``
does before a job starts, and Hydra has no public API for it: the command-line parser, the
config search path, a ``Hydra`` instance on it (the global one saved and put back, so
composing never disturbs the ``@hydra.main`` that follows), the basic sweeper's expansion of
a sweep into jobs, and the targets of the basic sweeper and launcher.

Checked with hydra-core 1.3.8, the version the tests run; pyproject.toml pins ``<1.4``.
Hydra 1.4 (in development) moves several of these; this module is what to port.
"""

import os
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence

from hydra import version
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra._internal.utils import (
    compute_search_path_dir,
    create_config_search_path,
    detect_calling_file_or_module_from_task_function,
    get_args_parser,
)
from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.initialize import get_gh_backup, restore_gh_from_backup

# The ``_target_`` of Hydra's own sweeper and launcher in a composed ``hydra`` node.
BASIC_SWEEPER = f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}"
BASIC_LAUNCHER = f"{BasicLauncher.__module__}.{BasicLauncher.__qualname__}"


# Hydra's parser of ``@hydra.main``'s command line; the ``(calling file, calling module)`` of
# a ``@hydra.main`` function, against which Hydra reads a relative ``config_path``; the
# folder (or ``pkg://`` path) of the primary config, as Hydra computes it.
args_parser = get_args_parser
calling_module = detect_calling_file_or_module_from_task_function
primary_folder = compute_search_path_dir


def search_path(primary: Optional[str], config_dir: Optional[str] = None) -> ConfigSearchPath:
    """Hydra's search path: ``primary``'s folder, and ``--config-dir`` before the schemas, as
    ``run_hydra`` orders them."""
    path = create_config_search_path(primary)
    if config_dir is not None:
        path.prepend(
            provider="command-line",
            path=f"file://{os.path.abspath(config_dir)}",
            anchor=SearchPathQuery(provider="schema"),
        )
    return path


@contextmanager
def hydra_on(path: ConfigSearchPath, task_name: str) -> Iterator[Hydra]:
    """A Hydra instance on ``path`` for the block, Hydra's global state put back after."""
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    version.setbase("1.3")
    try:
        yield Hydra.create_main_hydra2(task_name=task_name, config_search_path=path)
    finally:
        restore_gh_from_backup(backup)


def split_sweep(overrides: Sequence) -> List[List[str]]:
    """Every job's overrides of a sweep, in the basic sweeper's order (``overrides``: Hydra's
    parsed Override objects)."""
    batches = BasicSweeper.split_arguments(list(overrides), max_batch_size=None)
    return [job for batch in batches for job in batch]
