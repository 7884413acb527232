"""Compose the config in the launching process, the way ``@hydra.main`` will.

The launching process composes and validates every job of the command line before Hydra
creates a run directory and before MindSpore or MLflow start, so bad input costs nothing
and leaves nothing behind (DESIGN.md, decision 1).
"""
from pathlib import Path
from typing import List, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from ms_exp.config.errors import ConfigError, InvalidConfig, from_composition_error
from ms_exp.config.schema import register_schemas
from ms_exp.preflight.parallel import concurrent_master_ports
from ms_exp.preflight.paths import output_folder
from ms_exp.preflight.validate import validate

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
CONFIG_NAME = "config"
# Sweeps larger than this are spot-checked: the first this many jobs are composed up front.
MAX_JOBS_CHECKED = 64


class CompositionError(InvalidConfig):
    """Hydra refused the config; the message is one line."""


def conf_dir() -> Path:
    if not (CONF_DIR / f"{CONFIG_NAME}.yaml").is_file():
        raise RuntimeError(f"ms_exp's config folder is missing: {CONF_DIR} "
                           "(install from a clone with `pip install -e .`)")
    return CONF_DIR


def compose_config(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME,
                   return_hydra_config: bool = False) -> DictConfig:
    """Compose like the entrypoint does; raise CompositionError with a one-line message."""
    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name="run"):
        try:
            return compose(config_name, overrides=list(overrides),
                           return_hydra_config=return_hydra_config)
        except (HydraException, OmegaConfBaseException) as error:
            line = from_composition_error(error, overrides)
            raise CompositionError(line or str(error).splitlines()[0]) from error


def expand_jobs(overrides: Sequence[str], multirun: bool) -> List[List[str]]:
    """The override list of every job a (multi)run command line will start."""
    if not multirun:
        return [list(overrides)]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [job for batch in batches for job in batch]


def preflight(overrides: Sequence[str], multirun: bool = False,
              config_name: Optional[str] = None) -> List[DictConfig]:
    """Compose and validate every job; return their configs or raise a one-line error."""
    configs = []
    for job in expand_jobs(overrides, multirun)[:MAX_JOBS_CHECKED]:
        cfg = compose_config(job, config_name or CONFIG_NAME, return_hydra_config=True)
        validate(cfg, cfg.hydra.runtime.choices)
        output = cfg.hydra.sweep.dir if multirun else cfg.hydra.run.dir
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        output_folder(key, output)
        configs.append(cfg)
    if multirun:
        concurrent_master_ports(configs)
    return configs


__all__ = ["CompositionError", "ConfigError", "compose_config", "preflight"]
