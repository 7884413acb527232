"""Every value of a composed config resolves, or the command is refused naming the key:
an interpolation that cannot resolve (an unset environment variable, a missing key, an
unknown resolver, a loop, a wrong type) would otherwise raise in the job, as a traceback,
after its run folder and MLflow run exist."""

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ms_exp.config.errors import ConfigError

ALLOWED = (
    "a value that resolves (an interpolation of a key that exists, a set environment "
    "variable or a known resolver, and no loop)"
)


def check_interpolations(cfg: DictConfig) -> Any:
    """The job's config resolved, as plain containers (without Hydra's node, which resolves
    as Hydra runs and the job never reads)."""
    task = without_hydra(cfg)
    try:
        return OmegaConf.to_container(task, resolve=True)
    except RecursionError:
        raise ConfigError(
            "config", "...", ALLOWED, "interpolations that refer to each other in a loop"
        ) from None
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "config"
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(key, _written(task, key), ALLOWED, reason) from None


def _written(cfg: DictConfig, key: str) -> Any:
    """The value as written, before resolution."""
    value: Any = OmegaConf.to_container(cfg, resolve=False)
    try:
        for part in key.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return value


def without_hydra(cfg: DictConfig) -> DictConfig:
    """The job's config, as Hydra's ``run_job`` hands it over: the composed config without
    Hydra's own node (``cfg`` itself when it has none)."""
    if "hydra" not in cfg:
        return cfg
    task = cfg.copy()
    with open_dict(task):
        del task["hydra"]
    return task
