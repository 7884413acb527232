"""One-line config errors: the key, the bad value and what is allowed, for Hydra's and
OmegaConf's refusals (several lines each) as for ms_exp's own checks."""

import re
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Collection, Iterable, List, Mapping, NoReturn, Optional

from hydra.errors import MissingConfigException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException


class InvalidConfig(ValueError):
    """Bad input, refused before any work starts; the message is one line."""


class ConfigError(InvalidConfig):
    """A config value that ms_exp refuses: the key, the value and what is allowed."""

    def __init__(self, key: str, value: object, allowed: str, problem: str = "not allowed"):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={show(value)}: {problem}; expected {allowed}")


def show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # as the user writes it on the command line and in YAML
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def one_of(values: Iterable) -> str:
    return "one of " + ", ".join(str(v) for v in values)


def require(condition: bool, key: str, value: object, allowed: str) -> None:
    if not condition:
        raise ConfigError(key, value, allowed)


def from_composition_error(
    error: Exception, overrides: Iterable[str], builtin_targets: Collection[str] = ()
) -> Optional[str]:
    """Turn an exception raised by Hydra's compose into one line, or None if unknown.
    ``builtin_targets``: the targets whose every argument is a key of their schema (an
    unknown key beside another target may be one of its arguments, added with +)."""
    if isinstance(error, MissingConfigException):
        return _missing_option(error)
    appended = re.match(r"Could not append to config\. An item is already at '(.+)'", str(error))
    if appended:
        key = appended.group(1)
        value = _override_value(key, overrides)
        return (
            f"+{key}={value}: {key} is already in the config; expected {key}={value} "
            "(+ adds a key the config does not have; ++ adds or sets)"
        )
    keyed = keyed_errors(error)
    if not keyed:
        return None
    cause = keyed[0]
    key = cause.full_key or ""  # not empty: the search above wants one
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        parent = cause.parent_node
        keys = sorted(k for k in parent.keys() if k != "hydra") if parent is not None else []
        value = _override_value(key, overrides)
        line = f"{key}={value}: unknown key; expected {one_of(keys)}"
        target = parent.get("_target_") if parent is not None else None
        # Only for a key typed as an override: a file's key is fixed in the file.
        if isinstance(target, str) and target not in builtin_targets and value != "?":
            line += f"; an argument of {target} is added with +: +{key}={value}"
        return line
    shown = None
    if cause.value is None:  # OmegaConf names no value when merging a node of another kind
        given = _override_value(key, overrides)
        shown = None if given == "?" else given
    return value_error(key, cause, shown)


def keyed_errors(error: BaseException) -> List[OmegaConfBaseException]:
    """OmegaConf's exceptions among ``error``, its cause and its context (where Hydra and a
    merge put OmegaConf's) that name a key, each once."""
    chain = (error.__cause__, error.__context__, error)
    found = {id(e): e for e in chain if isinstance(e, OmegaConfBaseException)}
    return [e for e in found.values() if getattr(e, "full_key", None)]


def value_error(key: str, error: OmegaConfBaseException, shown: Optional[str] = None) -> str:
    """OmegaConf's refusal of a value (``error.value`` under ``key``, or ``shown`` as the
    user typed it) in one line; also for what is typed after composition (loss.parts)."""
    return f"{key}={shown if shown is not None else show(error.value)}: {_reason(str(error.msg))}"


def _reason(message: str) -> str:
    """What is allowed, from OmegaConf's message: every wording it has for a value of the
    wrong kind becomes "not allowed; expected ..."; anything else is its first line."""
    first = message.splitlines()[0]
    conversion = re.search(r"could not be converted to (\w+)", first)
    if conversion:
        return f"not allowed; expected {_TYPE_NAMES.get(conversion.group(1), conversion.group(1))}"
    if "is not a valid bool" in first:  # OmegaConf's wording for booleans differs
        return f"not allowed; expected {_TYPE_NAMES['Boolean']}"
    choices = re.search(r"expected one of \[(.*)\]", first)
    if choices:
        return f"not allowed; expected one of {choices.group(1)}"
    enum = re.search(r"is not a valid input for <enum '(\w+)'>", first)
    if enum:  # OmegaConf names only the class: the values of the schema's Enum of that name
        found = next((e for e in Enum.__subclasses__() if e.__name__ == enum.group(1)), None)
        values = one_of(m.value for m in found) if found is not None else f"a {enum.group(1)}"
        return f"not allowed; expected {values}"
    for pattern, allowed in _KIND_REASONS:
        if re.search(pattern, first):
            return f"not allowed; expected {allowed}"
    return first


# OmegaConf's messages for a value of the wrong kind (a list, a mapping, a section, a single
# value, null) and what each expects instead.
_KIND_REASONS = (
    (
        r"is not a ListConfig, list or tuple|Cannot merge (DictConfig|\w+) with ListConfig",
        "a list in brackets, e.g. [1, 2]",
    ),
    (
        r"Cannot assign \w+ to Dict\[|Cannot merge ListConfig with DictConfig|"
        r"is not a DictConfig, dict",
        "a mapping in braces, e.g. {name: value}",
    ),
    (
        r"is not a subclass of (\w+)",
        "a section of keys, not one value (set a key of it: section.key=value)",
    ),
    (r"is not Optional", "a value (it cannot be null)"),
    (r"Cannot convert '\w+' to string", "a string"),
)


_TYPE_NAMES = {
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
}


def _missing_option(error: MissingConfigException) -> str:
    group, _, option = (error.missing_cfg_file or "").rpartition("/")
    if not group:
        return str(error).splitlines()[0]
    line = f"{group}={option!r}: unknown option; expected one of {', '.join(error.options or [])}"
    # A folder here that holds the option (conf/model/lenet.yaml): the flag that adds it to
    # Hydra's search path.
    found = sorted(p for ext in ("yaml", "yml") for p in Path().glob(f"*/{group}/{option}.{ext}"))
    if found:
        line += f"; {found[0]} is there: add --config-dir {found[0].parts[0]}"
    return line


def _override_value(full_key: str, overrides: Iterable[str]) -> str:
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key == full_key:
            return value
    return "?"


def positive(section: str, cfg: Mapping[str, Any], *keys: str) -> None:
    for key in keys:
        value = cfg[key]
        require(value >= 1, f"{section}.{key}", value, "an integer >= 1")


def end_failed_sweep(line: Optional[str] = None) -> NoReturn:
    """End a sweep with a failed job as Hydra's basic sweeper does: exit status 1 after one
    line (None: said already), with no traceback (each job's log holds its own)."""
    if line is not None:
        print(f"ms_exp: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(1)
