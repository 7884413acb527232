"""Compose every job of the command line in the launching process, on the search path
``@hydra.main`` will use, and validate it before Hydra creates a run directory and before
MindSpore or MLflow start: bad input costs nothing and leaves nothing behind
(docs/design.md#checked-before-running)."""

import argparse
import copy
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import yaml
from hydra import compose
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.override_parser.types import IntervalSweep, Override
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from ms_exp.boost.options import mute_expected_warning
from ms_exp.config import hydra_internals
from ms_exp.config.errors import ConfigError, InvalidConfig, from_composition_error
from ms_exp.config.schema import builtin_targets, register_schemas
from ms_exp.parallel.checks import concurrent_master_ports
from ms_exp.pool.checks import check_pool
from ms_exp.preflight.components import validate_hydra_callbacks
from ms_exp.preflight.overrides import SWEEP_GRAMMAR, OverrideError, parse_overrides
from ms_exp.preflight.paths import existing_run_folder, output_folder
from ms_exp.preflight.plugins import register_plugins
from ms_exp.preflight.validate import validate
from ms_exp.search.checks import check_optuna_sweep

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Installed from a wheel, the config folder is the package ms_exp.conf (pyproject.toml);
# in a checkout (and an editable install of it) it is conf/ beside the package.
CONF_CANDIDATES = (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf")
CONFIG_NAME = "config"
# Sweeps larger than this are spot-checked: the first this many jobs are composed up front.
MAX_JOBS_CHECKED = 64


class CompositionError(InvalidConfig):
    """Hydra refused the config; the message is one line."""


CONF_DIR = next(
    (folder for folder in CONF_CANDIDATES if (folder / f"{CONFIG_NAME}.yaml").is_file()),
    CONF_CANDIDATES[0],
)


def conf_dir() -> Path:
    if not (CONF_DIR / f"{CONFIG_NAME}.yaml").is_file():
        raise RuntimeError(
            "ms_exp's config folder is missing: none of "
            f"{', '.join(str(c) for c in CONF_CANDIDATES)} holds "
            f"{CONFIG_NAME}.yaml (reinstall ms_exp)"
        )
    return CONF_DIR


@dataclass(frozen=True)
class ConfigSource:
    """Where the command line's config comes from, as Hydra reads it: ``--config-name``,
    ``--config-path`` (None: ms_exp's folder) and ``--config-dir``, and the module or file
    of the ``@hydra.main`` function, against which Hydra reads a relative config path."""

    config_name: str = CONFIG_NAME
    config_path: Optional[str] = None
    config_dir: Optional[str] = None
    calling_file: Optional[str] = None
    calling_module: Optional[str] = "ms_exp.run"

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, task_function: Optional[Callable] = None
    ) -> "ConfigSource":
        """From Hydra's parsed command line (``hydra_internals.args_parser``)."""
        calling_file, calling_module = (
            hydra_internals.calling_module(task_function)
            if task_function is not None
            else (None, "ms_exp.run")
        )
        return cls(
            config_name=args.config_name or CONFIG_NAME,
            config_path=args.config_path,
            config_dir=args.config_dir,
            calling_file=calling_file,
            calling_module=calling_module,
        )

    def search_path(self) -> ConfigSearchPath:
        """Hydra's search path for this command line, built as ``run_hydra`` builds it."""
        config_path = self.config_path if self.config_path is not None else str(conf_dir())
        main_dir = hydra_internals.primary_folder(
            self.calling_file, self.calling_module, config_path
        )
        if main_dir and "://" not in main_dir and not os.path.isdir(main_dir):
            raise ConfigError(
                "--config-path",
                self.config_path,
                "an absolute path to a folder "
                "(Hydra reads a relative one against ms_exp's package folder)",
                f"no such folder {main_dir}",
            )
        if self.config_dir is not None and not os.path.isdir(self.config_dir):
            raise ConfigError(
                "--config-dir", self.config_dir, "a folder of config groups", "no such folder"
            )
        return hydra_internals.search_path(main_dir, self.config_dir)


@contextmanager
def hydra_for(source: ConfigSource) -> Iterator:
    """Hydra initialised on ``source``'s search path for the duration of the block."""
    register_schemas()
    register_plugins()
    with hydra_internals.hydra_on(source.search_path(), task_name="run") as hydra:
        yield hydra


def compose_config(
    overrides: Sequence[str] = (),
    return_hydra_config: bool = False,
    source: Optional[ConfigSource] = None,
) -> DictConfig:
    """Compose like the entrypoint does; raise CompositionError with a one-line message."""
    source = source or ConfigSource()
    with hydra_for(source):
        try:
            return compose(
                source.config_name,
                overrides=list(overrides),
                return_hydra_config=return_hydra_config,
            )
        except (HydraException, OmegaConfBaseException) as error:
            line = from_composition_error(error, overrides, builtin_targets())
            raise CompositionError(line or str(error).splitlines()[0]) from error
        except yaml.YAMLError as error:  # a config file of the user's that is not YAML
            raise CompositionError(_yaml_problem(error)) from None


def _yaml_problem(error: "yaml.YAMLError") -> str:
    """``<file>, line L, column C: not valid YAML (<what the parser found>)``."""
    mark = getattr(error, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a config"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    found = f"{context}: {problem}" if context else problem
    return (
        f"{where}: not valid YAML ({found}); expected YAML: spaces for indentation, each key once"
    )


def group_options(
    groups: Sequence[str], overrides: Sequence[str] = (), source: Optional[ConfigSource] = None
) -> Dict[str, List[str]]:
    """The options of ``groups`` and of every other top-level group (but Hydra's and the
    typed schemas') found on the whole search path, the user's folders included; groups
    with no option are left out."""
    from hydra.core.object_type import ObjectType

    source = source or ConfigSource()
    with hydra_for(source) as hydra:

        def options(group: str, kind: ObjectType = ObjectType.CONFIG) -> List[str]:
            return hydra.config_loader.get_group_options(
                group,
                results_filter=kind,
                config_name=source.config_name,
                overrides=list(overrides),
            )

        others = [g for g in options("", ObjectType.GROUP) if g not in ("hydra", "schema")]
        found = {group: options(group) for group in dict.fromkeys([*groups, *others])}
    return {group: names for group, names in found.items() if names}


def expand_jobs(overrides: Sequence[str], multirun: bool) -> List[List[str]]:
    """The override list of every job a (multi)run command line will start; a search space
    (``interval(a,b)``, which a sampling sweeper such as Optuna draws from) stands for two
    jobs, one at each end."""
    parsed = parse_overrides(overrides, multirun)
    if not multirun:
        return [list(overrides)]
    spaces = search_spaces(parsed)
    return hydra_internals.split_sweep([_ends(o) if o in spaces else o for o in parsed])


def search_spaces(parsed: Sequence[Override]) -> List[Override]:
    return [o for o in parsed if o.is_sweep_override() and not o.is_discrete_sweep()]


def _ends(space: Override) -> Override:
    value = space.value()
    # search_spaces' overrides are interval(a,b) sweeps, which have both ends.
    assert isinstance(value, IntervalSweep) and value.start is not None and value.end is not None
    cast = int if "int" in value.tags else float
    (ends,) = parse_overrides(
        [f"{space.get_key_element()}={cast(value.start)},{cast(value.end)}"], multirun=True
    )
    return ends


@contextmanager
def hydra_config_of(cfg: DictConfig, output_dir: str) -> Iterator[None]:
    """Hydra's record of the job, as a job sees it (``HydraConfig``), while the checks build
    its components: an argument such as ``${hydra:runtime.output_dir}/epochs.log``
    resolves as in the job (a sweep's jobs: to the sweep's folder)."""
    from hydra.core.hydra_config import HydraConfig

    record = copy.deepcopy(cfg)
    with open_dict(record):
        record.hydra.runtime.output_dir = os.path.abspath(output_dir)
    holder = HydraConfig.instance()
    before = holder.cfg
    holder.set_config(record)
    try:
        yield
    finally:
        holder.cfg = before


def preflight(
    overrides: Sequence[str], multirun: bool = False, source: Optional[ConfigSource] = None
) -> List[DictConfig]:
    """Compose and validate every job; return their configs or raise a one-line error."""
    configs: List[DictConfig] = []
    notes: List[str] = []
    parsed = parse_overrides(overrides, multirun)
    spaces = search_spaces(parsed)
    for job in expand_jobs(overrides, multirun)[:MAX_JOBS_CHECKED]:
        cfg = compose_config(job, return_hydra_config=True, source=source)
        if spaces and cfg.hydra.sweeper.get("_target_") == hydra_internals.BASIC_SWEEPER:
            raise OverrideError(
                f"override {spaces[0].input_line!r}: a search space that Hydra's "
                f"basic sweeper cannot list; expected {SWEEP_GRAMMAR}, or "
                f"hydra/sweeper=optuna to sample it"
            )
        check_optuna_sweep(cfg, parsed)
        output = cfg.hydra.sweep.dir if multirun else cfg.hydra.run.dir
        with hydra_config_of(cfg, output):
            validate_hydra_callbacks(cfg.hydra)
            # Before the checks: a boost option's import MindSpore, which reads its log
            # levels once.
            notes += filter(None, [mute_expected_warning(cfg)])
            validate(cfg, cfg.hydra.runtime.choices)
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        output_folder(key, output)
        if not multirun:
            existing_run_folder(key, output, cfg.parallel.device_num)
        configs.append(cfg)
    if multirun:
        concurrent_master_ports(configs)
        check_pool(configs)
    for note in notes:  # said once every job passed its checks
        print(note, flush=True)
    return configs
