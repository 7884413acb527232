"""One-line config errors: the key, the bad value and what is allowed.

Hydra's own messages are several lines long (with `full_key:` and `object_type=` lines);
users of ms_exp get the same facts on one line, and the same shape for the range and path
checks that ms_exp adds on top of the schema.
"""
import re
from typing import Iterable, Optional

from hydra.errors import MissingConfigException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException


class InvalidConfig(ValueError):
    """Bad input, refused before any work starts; the message is one line."""


class ConfigError(InvalidConfig):
    """A config value that ms_exp refuses: the key, the value and what is allowed."""

    def __init__(self, key: str, value, allowed: str, problem: str = "not allowed"):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={_show(value)}: {problem}; expected {allowed}")


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # as the user writes it on the command line and in YAML
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def one_of(values: Iterable) -> str:
    return "one of " + ", ".join(str(v) for v in values)


def require(condition: bool, key: str, value, allowed: str) -> None:
    if not condition:
        raise ConfigError(key, value, allowed)


def from_composition_error(error: Exception, overrides: Iterable[str]) -> Optional[str]:
    """Turn an exception raised by Hydra's compose into one line, or None if unknown."""
    if isinstance(error, MissingConfigException):
        return _missing_option(error)
    cause = error.__cause__ or error.__context__ or error
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        parent = cause.parent_node
        keys = sorted(k for k in parent.keys() if k != "hydra") if parent is not None else []
        value = _override_value(cause.full_key, overrides)
        return f"{cause.full_key}={value}: unknown key; expected {one_of(keys)}"
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        return value_error(cause.full_key, cause)
    return None


def value_error(key: str, error: OmegaConfBaseException) -> str:
    """OmegaConf's refusal of a value (``error.value`` under ``key``) in one line; also for
    what is typed after composition (each of ``loss.parts``, which Hydra holds untyped so
    that a part can name a ``_target_`` with its own arguments, and can be given in
    pieces: ``+loss.parts.a.weight=2``)."""
    return f"{key}={_show(error.value)}: {_reason(str(error.msg))}"


def _reason(message: str) -> str:
    first = message.splitlines()[0]
    conversion = re.search(r"could not be converted to (\w+)", first)
    if conversion:
        return f"not allowed; expected {_TYPE_NAMES.get(conversion.group(1), conversion.group(1))}"
    if "is not a valid bool" in first:  # OmegaConf's wording for booleans differs
        return f"not allowed; expected {_TYPE_NAMES['Boolean']}"
    choices = re.search(r"expected one of \[(.*)\]", first)
    if choices:
        return f"not allowed; expected one of {choices.group(1)}"
    return first


_TYPE_NAMES = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false",
               "String": "a string"}


def _missing_option(error: MissingConfigException) -> str:
    missing = error.missing_cfg_file or ""
    group, _, option = missing.rpartition("/")
    options = ", ".join(error.options or [])
    if group:
        return f"{group}={option!r}: unknown option; expected one of {options}"
    return str(error).splitlines()[0]


def _override_value(full_key: str, overrides: Iterable[str]) -> str:
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key == full_key:
            return value
    return "?"


def positive(section: str, cfg, *keys: str) -> None:
    for key in keys:
        value = cfg[key]
        require(value >= 1, f"{section}.{key}", value, "an integer >= 1")
