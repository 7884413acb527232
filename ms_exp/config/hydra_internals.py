"""The one door to Hydra's private API (``hydra._internal``, ``hydra.initialize``'s global
state): composing and checking every job before ``@hydra.main`` runs it
(docs/design.md#checked-before-running) needs what ``run_hydra`` does, which has no public
API. Checked with hydra-core 1.3.8; this module is what to port to Hydra 1.4."""

import copy
import os
import pathlib
from contextlib import contextmanager
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from hydra import version
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.core_plugins.importlib_resources_config_source import (
    ImportlibResourcesConfigSource,
)
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
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.sweeper import Sweeper
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

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
    """A Hydra instance on ``path`` for the block (composing on ``_Repository``), Hydra's
    global state put back after."""
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    version.setbase("1.3")
    try:
        hydra = Hydra.create_main_hydra2(task_name=task_name, config_search_path=path)
        # ConfigLoaderImpl's, which the abstract ConfigLoader does not declare.
        hydra.config_loader.repository = _Repository(path)  # type: ignore[attr-defined]
        yield hydra
    finally:
        restore_gh_from_backup(backup)


# Read config files: path -> ((inode, size, mtime, ctime), header, config).
_PARSED: Dict[
    str, Tuple[Tuple[int, ...], Dict[str, Optional[str]], Union[DictConfig, ListConfig]]
] = {}


def _load(
    path: str, open_file: Callable[[], IO[str]]
) -> Tuple[Dict[str, Optional[str]], Union[DictConfig, ListConfig]]:
    """A config file's header and a copy of its config, as Hydra's sources read them, but
    parsed once per version of the file (a copy costs half what parsing does)."""
    stat = os.stat(path)
    stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if path not in _PARSED or _PARSED[path][0] != stamp:
        with open_file() as f:
            header = ConfigSource._get_header_dict(f.read(512))
            f.seek(0)
            _PARSED[path] = (stamp, header, OmegaConf.load(f))
    _, header, config = _PARSED[path]
    return dict(header), copy.deepcopy(config)


class _Files(FileConfigSource):
    def load_config(self, config_path: str) -> ConfigResult:
        name = self._normalize_file_name(config_path)
        full_path = os.path.realpath(os.path.join(self.path, name))
        if not os.path.exists(full_path):
            raise ConfigLoadError(f"Config not found : {full_path}")
        header, config = _load(full_path, lambda: open(full_path, encoding="utf-8"))
        return ConfigResult(self.provider, f"file://{self.path}", config, header)


class _Package(ImportlibResourcesConfigSource):
    def _read_config(self, res: Any) -> ConfigResult:
        if not isinstance(res, pathlib.Path):  # in a zip: no file to stat
            return super()._read_config(res)
        header, config = _load(str(res), lambda: res.open(encoding="utf-8"))
        return ConfigResult(self.provider, f"pkg://{self.path}", config, header)


class _Repository(ConfigRepository):
    """Hydra's repository of config sources, cheaper per compose with the same result: files
    parse once per version (``_load``), and Hydra's copy per compose copies only the list."""

    def initialize_sources(self, config_search_path: ConfigSearchPath) -> None:
        super().initialize_sources(config_search_path)
        cached = {"file": _Files, "pkg": _Package}
        self.sources = [
            cached[s.scheme()](s.provider, f"{s.scheme()}://{s.path}")
            if s.scheme() in cached
            else s
            for s in self.sources
        ]

    def __deepcopy__(self, memo: Dict[int, Any]) -> "_Repository":
        # Hydra's CachingConfigRepository deep-copies it so that hydra.searchpath's new
        # sources (initialize_sources) leave this one as it is: copying the list does that,
        # a source holding no state of its own. A deep copy would also copy the ConfigStore
        # (every schema: a fifth of a compose), a singleton that composing does not change.
        clone = copy.copy(self)
        clone.sources = list(self.sources)
        return clone


@contextmanager
def composed_already(config_name: str, overrides: Sequence[str], cfg: DictConfig) -> Iterator[None]:
    """For the block, Hydra's two loads of a single run's config get ``cfg``, which the
    preflight composed from the same search path (``ConfigSource.search_path``) and
    overrides, instead of composing it twice more: ``run_hydra`` loads it to read its
    ``hydra.mode`` (``Hydra.get_mode``), then, with ``hydra.mode=RUN`` added where the
    config sets no mode, to run it (``Hydra.run``); Hydra 1.3 takes no composed config.
    That override is applied to a copy as composing applies it. Any other load composes."""
    original = ConfigLoaderImpl.load_configuration
    run, run_overrides = cfg, list(overrides)
    if cfg.hydra.mode is None:
        run_overrides.append("hydra.mode=RUN")
        run = copy.deepcopy(cfg)
        with read_write(run.hydra), open_dict(run.hydra):
            run.hydra.mode = RunMode.RUN
            run.hydra.overrides.hydra.append("hydra.mode=RUN")
    served: Dict[Tuple[Optional[str], RunMode, Tuple[str, ...]], DictConfig] = {
        (config_name, RunMode.MULTIRUN, tuple(overrides)): cfg,  # get_mode reads hydra.mode
        (config_name, RunMode.RUN, tuple(run_overrides)): run,
    }

    def load_configuration(  # Hydra passes each argument by name
        self: ConfigLoaderImpl,
        config_name: Optional[str],
        overrides: List[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        composed = served.pop((config_name, run_mode, tuple(overrides)), None)
        if composed is not None:
            return composed
        return original(
            self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides
        )

    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.load_configuration = original  # type: ignore[method-assign]


KEPT_SWEEP_CONFIGS = 64


@contextmanager
def sweep_jobs_composed_once() -> Iterator[None]:
    """For the block, a sweeper's check of a batch (``validate_batch_is_legal``, which composes
    every job of it and drops the configs) keeps what it composed, and a launcher in this
    process (basic, pool) that loads the same job gets that config instead of composing it
    again: one composition less per job, before the job starts. Configs a launcher elsewhere
    (submitit) never asks for go with the next batch's check; only a batch's first
    ``KEPT_SWEEP_CONFIGS`` are kept, so that a grid of thousands of jobs does not hold
    thousands of configs. Patched on Hydra's ``Sweeper``: its plugin scan loads
    BasicSweeper's module again, a class of its own."""
    original_load, original_check = (
        ConfigLoaderImpl.load_sweep_config,
        Sweeper.validate_batch_is_legal,
    )
    checked: Dict[Tuple[int, Tuple[str, ...]], DictConfig] = {}
    checking = False

    def load_sweep_config(
        self: ConfigLoaderImpl, master_config: DictConfig, sweep_overrides: List[str]
    ) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        composed = checked.pop(key, None)
        if composed is None:
            composed = original_load(self, master_config, sweep_overrides)
            if checking and len(checked) < KEPT_SWEEP_CONFIGS:
                checked[key] = composed
        return composed

    def validate_batch_is_legal(self: Sweeper, batch: Sequence[Sequence[str]]) -> None:
        nonlocal checking
        checked.clear()
        checking = True
        try:
            original_check(self, batch)
        finally:
            checking = False

    ConfigLoaderImpl.load_sweep_config = load_sweep_config  # type: ignore[method-assign]
    Sweeper.validate_batch_is_legal = validate_batch_is_legal  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.load_sweep_config = original_load  # type: ignore[method-assign]
        Sweeper.validate_batch_is_legal = original_check  # type: ignore[method-assign]


def split_sweep(overrides: Sequence) -> List[List[str]]:
    """Every job's overrides of a sweep, in the basic sweeper's order (``overrides``: Hydra's
    parsed Override objects)."""
    batches = BasicSweeper.split_arguments(list(overrides), max_batch_size=None)
    return [job for batch in batches for job in batch]
