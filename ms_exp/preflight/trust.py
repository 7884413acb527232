"""Which ``_target_`` a config read back from a store may build.

A ``_target_`` is code: building it imports a module and calls what the config names with
the arguments the config gives. A config the user composes (ms_exp's options, their
``--config-dir``, their command line) is theirs, like a script they run. A config read back
from an MLflow store (``ms_exp.eval --run-id`` or ``--model``, a checkpoint's run directory,
``ms_exp.run --from-run``, a logged model loaded with ``mlflow.pyfunc.load_model``) was
written by whoever could write to that store or folder, so it builds only targets the user
trusts: those of ms_exp's own options, those of a config folder the user names, those the
user's own overrides name, and those ``MS_EXP_TRUSTED_TARGETS`` allows. Anything else is
refused in one line naming the key and the target, before anything is imported.

Nothing here imports a target.
"""

import fnmatch
import functools
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence, Tuple, Union

import yaml
from omegaconf import DictConfig

from ms_exp.config.errors import ConfigError
from ms_exp.config.targets import TARGET, targets_in
from ms_exp.preflight.interpolations import without_hydra

# fnmatch patterns, comma-separated: MS_EXP_TRUSTED_TARGETS='my_project.*,mindcv.models.*'
TRUSTED_VARIABLE = "MS_EXP_TRUSTED_TARGETS"


def _built_targets(cfg):
    """The targets of the job's config, and of Hydra's callbacks when ``cfg`` holds
    Hydra's node (its launcher and sweeper are chosen by group, never by a target)."""
    if not isinstance(cfg, DictConfig) or "hydra" not in cfg:
        yield from targets_in(cfg)
        return
    yield from targets_in(without_hydra(cfg))
    yield from targets_in(cfg.hydra.get("callbacks") or {}, "hydra.callbacks")


def environment_patterns() -> Tuple[str, ...]:
    value = os.environ.get(TRUSTED_VARIABLE, "")
    return tuple(p.strip() for p in value.split(",") if p.strip())


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
    cfg,
    source: str,
    overrides: Sequence[str] = (),
    config_dirs: Iterable[Union[str, Path, None]] = (),
) -> None:
    """The one call of a command that builds a config read back from ``source``: refuse the
    first ``_target_`` of ``cfg`` (at any depth, lists included) that is not trusted, in one
    line naming its key. Its own user trusts ms_exp's targets, those its overrides and the
    YAML files of its config folders name, and those TRUSTED_VARIABLE's patterns match."""
    trusted = set(override_targets(overrides)) | shipped_targets()
    for folder in config_dirs:
        if folder is not None:
            trusted |= folder_targets(Path(folder))
    patterns = environment_patterns()
    for key, path in _built_targets(cfg):
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
