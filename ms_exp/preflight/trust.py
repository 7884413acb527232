"""Which ``_target_`` a config read back from a store may build.

A ``_target_`` is code. A config the user composes is theirs, like a script they run; one
read back from an MLflow store or a run folder (``ms_exp.eval --run-id`` or ``--model``,
``ms_exp.run --from-run``, a logged model) was written by whoever could write there, so it
builds only targets the user trusts: ms_exp's own options', a config folder's the user
names, the user's overrides', and those ``MS_EXP_TRUSTED_TARGETS`` allows. Anything else is
refused in one line naming the key and the target; nothing here imports a target."""

import fnmatch
import functools
import itertools
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, Union

import yaml
from omegaconf import DictConfig

from ms_exp.config.errors import ConfigError
from ms_exp.config.targets import TARGET, targets_in
from ms_exp.preflight.interpolations import without_hydra

# fnmatch patterns, comma-separated: MS_EXP_TRUSTED_TARGETS='my_project.*,mindcv.models.*'
TRUSTED_VARIABLE = "MS_EXP_TRUSTED_TARGETS"


def override_targets(overrides: Sequence[str]) -> Iterator[str]:
    """The targets ``key._target_=value`` overrides name, and those of a whole section
    given as a dict (``+loss.parts={focal:{_target_:...}}``)."""
    for override in overrides:
        key, sep, value = str(override).partition("=")
        if not sep:
            continue
        if key.lstrip("+~").split("@")[0].endswith(TARGET):
            yield value.strip().strip("'\"")
        elif TARGET in value:
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                continue
            yield from (path for _, path in targets_in(parsed) if isinstance(path, str))


@functools.lru_cache(maxsize=None)
def shipped_targets() -> frozenset:
    """The targets ms_exp's own options name: in their schemas, and in its config files
    (Hydra's callbacks)."""
    from ms_exp.config.schema import builtin_targets
    from ms_exp.preflight.compose import conf_dir

    return folder_targets(conf_dir()) | builtin_targets()


def folder_targets(folder: Path) -> frozenset:
    """The targets the YAML files under ``folder`` name (a file that is not YAML names
    none: composing it is refused elsewhere)."""
    found = set()
    for path in sorted(Path(folder).rglob("*.y*ml")):
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        found |= {target for _, target in targets_in(data) if isinstance(target, str)}
    return frozenset(found)


def check_read_back(
    cfg: Any,
    source: str,
    overrides: Sequence[str] = (),
    config_dirs: Iterable[Union[str, Path, None]] = (),
) -> None:
    """The one call of a command that builds a config read back from ``source``: refuse the
    first untrusted ``_target_`` of ``cfg`` (at any depth), in one line naming its key."""
    trusted = set(override_targets(overrides)) | shipped_targets()
    for folder in config_dirs:
        if folder is not None:
            trusted |= folder_targets(Path(folder))
    patterns = [p.strip() for p in os.environ.get(TRUSTED_VARIABLE, "").split(",") if p.strip()]
    built = targets_in(cfg)
    if isinstance(cfg, DictConfig) and "hydra" in cfg:
        # Of Hydra's node only its callbacks: its launcher and sweeper are chosen by group.
        hydra_callbacks = targets_in(cfg.hydra.get("callbacks") or {}, "hydra.callbacks")
        built = itertools.chain(targets_in(without_hydra(cfg)), hydra_callbacks)
    for key, path in built:
        if path is not None and not (
            isinstance(path, str)
            and (path in trusted or any(fnmatch.fnmatchcase(path, p) for p in patterns))
        ):
            raise ConfigError(
                key,
                path,
                f"a target of ms_exp's own options, of a config folder you name "
                f"(--config-dir), of your own overrides, or one {TRUSTED_VARIABLE} "
                f"allows (fnmatch patterns, comma-separated, e.g. "
                f"{TRUSTED_VARIABLE}='my_project.*'); docs/guides/security.md",
                problem=f"is not trusted in a config read back from {source}",
            )
