"""A run's saved config (``<run dir>/config.yaml``), read back typed by the schemas by
the ranks, ``ms_exp.eval``, ``ms_exp.ckpt`` and re-runs, without Hydra composing."""

from pathlib import Path
from typing import Iterable, Optional, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ms_exp.config.errors import InvalidConfig, from_composition_error, keyed_errors, show
from ms_exp.config.record import refuse_interpolations
from ms_exp.config.schema import GROUP_SCHEMAS, Config, builtin_targets, group_schema
from ms_exp.config.targets import component_name

RESOLVED_CONFIG = "config.yaml"


def load_run_config(
    path: Path, overrides: Iterable[str] = (), source: Optional[str] = None
) -> DictConfig:
    """A run's saved config typed again by the schemas, so enums and defaults behave as at
    training time; anything the schemas refuse, and any interpolation (it would run when its
    section is built), is a one-line InvalidConfig naming the file and the key (``source``:
    where the file came from, for an interpolation's refusal)."""
    path = Path(path)
    saved = _read(path)
    refuse_interpolations(OmegaConf.to_container(saved, resolve=False), source or str(path))
    try:
        merged = cast(
            DictConfig,
            OmegaConf.merge(  # of a structured DictConfig: one
                OmegaConf.structured(Config), saved, OmegaConf.from_dotlist(list(overrides))
            ),
        )
    except OmegaConfBaseException as error:  # an unknown key or a mistyped override
        raise InvalidConfig(_refusal(path, error, overrides, saved)) from None
    missing = [group for group in GROUP_SCHEMAS if OmegaConf.is_missing(merged, group)]
    if missing:
        raise InvalidConfig(f"{path}: {', '.join(missing)} missing; expected {SAVED}")
    for group, option in choices_from_config(merged).items():
        schema = group_schema(group, merged[group], option)
        if schema is None:  # a user's option has none: its target's signature checks
            continue
        try:
            merged[group] = OmegaConf.merge(OmegaConf.structured(schema), merged[group])
        except OmegaConfBaseException as error:
            raise InvalidConfig(_refusal(path, error, overrides, saved, f"{group}.")) from None
    return merged


# What a run's config.yaml is, as the one-line refusals name it.
SAVED = "the config.yaml that python -m ms_exp.run saves into the run directory"


def _read(path: Path) -> DictConfig:
    """The file as YAML, refused in one line when missing, unreadable, not YAML or empty."""
    if not path.is_file():
        raise InvalidConfig(f"{path}: no such file; expected {SAVED}")
    try:
        saved = OmegaConf.load(path)
    except OSError as error:
        raise InvalidConfig(
            f"{path}: cannot be read ({error.strerror or error}); expected {SAVED}"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InvalidConfig(f"{path}: not YAML ({problem}{where}); expected {SAVED}") from None
    except OmegaConfBaseException as error:
        raise InvalidConfig(f"{path}: {str(error).splitlines()[0]}; expected {SAVED}") from None
    if not isinstance(saved, DictConfig) or not saved:
        raise InvalidConfig(
            f"{path}: {'empty' if not saved else 'not a mapping of keys'}; expected {SAVED}"
        )
    return saved


def _refusal(
    path: Path,
    error: OmegaConfBaseException,
    overrides: Iterable[str],
    saved: DictConfig,
    prefix: str = "",
) -> str:
    """One line for OmegaConf's refusal: the key (under ``prefix`` when a group's schema
    refused it) and its value, from the overrides or else from the file (then named)."""
    overrides = list(overrides)
    chain = keyed_errors(error)  # each once: a key prefixed twice would read model.model.<key>
    for refused in chain if prefix else ():
        refused.full_key = f"{prefix}{refused.full_key}"
    line = from_composition_error(error, overrides, builtin_targets())
    if line is None:
        return f"{path}: {str(error).splitlines()[0]}"
    key = chain[0].full_key
    if key and not any(o.lstrip("+~").partition("=")[0] == key for o in overrides):
        # The key is the file's: show its value there, and name the file.
        if f"{key}=?:" in line:
            line = line.replace(f"{key}=?:", f"{key}={show(OmegaConf.select(saved, key))}:", 1)
        return f"{path}: {line}"
    return line


def choices_from_config(cfg: DictConfig) -> dict:
    """Group choices of a config saved without Hydra's runtime record (a run's config.yaml):
    each group's option is named by its ``name``/``mode`` key; the checkpoint options share
    one schema."""
    return {
        "parallel": cfg.parallel.mode,
        "checkpoint": "integrated",
        "boost": cfg.boost.mode,
        "placement": cfg.placement.mode,
        "dataset": component_name(cfg.dataset),
        "model": component_name(cfg.model),
    }
