"""A run's saved config (``<run dir>/config.yaml``), read back typed by the schemas.

The launching process saves the resolved config there; the ranks, ``ms_exp.eval``,
``ms_exp.ckpt`` and re-runs read it without Hydra composing anything.
"""
from pathlib import Path
from typing import Iterable

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ms_exp.config.errors import InvalidConfig, from_composition_error
from ms_exp.config.schema import Config, group_schema
from ms_exp.config.targets import component_name

RESOLVED_CONFIG = "config.yaml"


def load_run_config(path: Path, overrides: Iterable[str] = ()) -> DictConfig:
    """A resolved config saved by a run (``<run dir>/config.yaml``), typed again by the
    root schema so enums and defaults behave as at training time."""
    saved = OmegaConf.load(path)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), saved,
                                 OmegaConf.from_dotlist(list(overrides)))
        for group, option in choices_from_config(merged).items():
            schema = group_schema(group, merged[group], option)
            if schema is not None:  # a user's option has none: its target's signature checks
                merged[group] = OmegaConf.merge(OmegaConf.structured(schema), merged[group])
    except OmegaConfBaseException as error:  # an unknown key or a mistyped override
        line = from_composition_error(error, overrides)
        raise InvalidConfig(line or f"{path}: {str(error).splitlines()[0]}") from None
    return merged


def choices_from_config(cfg: DictConfig) -> dict:
    """Group choices of a config saved without Hydra's runtime record (a run's config.yaml):
    each group's option is named by its ``name``/``mode`` key; the checkpoint options share
    one schema."""
    return {"parallel": cfg.parallel.mode, "checkpoint": "integrated", "boost": cfg.boost.mode,
            "placement": cfg.placement.mode, "dataset": component_name(cfg.dataset),
            "model": component_name(cfg.model)}
