"""The command line's overrides, read with Hydra's own override parser before anything is
composed: a grammar mistake (a stray comma, an unclosed ``range(``, a missing ``=``) or a
value list without ``-m`` is one line naming the override and what Hydra's grammar allows,
instead of Hydra's parser traceback."""

import re
from typing import List, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from ms_exp.config.errors import InvalidConfig

VALUE_GRAMMAR = (
    "key=value, +key=value (add a key), ++key=value (add or set), ~key "
    "(remove); quote a value that holds , ( ) [ ] { } or spaces"
)
SWEEP_GRAMMAR = (
    "with -m, key=a,b,c (no empty item), key=range(start,stop[,step]), "
    "key=choice(a,b), key=glob(pattern)"
)


class OverrideError(InvalidConfig):
    """An override Hydra's grammar cannot read; the message is one line."""


def parse_overrides(overrides: Sequence[str], multirun: bool) -> List[Override]:
    """Every override parsed on its own, so the refusal names the one that is wrong."""
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as error:
            allowed = f"{VALUE_GRAMMAR}; {SWEEP_GRAMMAR}" if multirun else VALUE_GRAMMAR
            raise OverrideError(
                f"override {text!r}: {_reason(text, error)}; expected {allowed}"
            ) from None
        if not override.key_or_group:
            raise OverrideError(f"override {text!r}: no key before '='; expected {VALUE_GRAMMAR}")
        if override.is_sweep_override() and not multirun:
            raise OverrideError(
                f"override {text!r}: a list of values is a sweep; add -m (--multirun) to run "
                f"one job per value, or give one list value in brackets: "
                f"{override.key_or_group}=[a,b]"
            )
        parsed.append(override)
    return parsed


def _reason(text: str, error: HydraException) -> str:
    """What is wrong, in words, from the parser's message (its first line after the
    'Error parsing override' one, which only repeats the override)."""
    lines = [
        line
        for line in str(error).splitlines()
        if line and not line.startswith(("Error parsing override", "See https"))
    ]
    detail = lines[0] if lines else "not an override"
    key, equals, value = text.partition("=")
    if not equals:
        return "no '=' (a key alone is only allowed as ~key, to remove it)"
    if value.count("(") != value.count(")") or value.count("[") != value.count("]"):
        return "unbalanced brackets"
    if ",," in value or value.startswith(",") or value.endswith(","):
        return "an empty item in a list of values"
    unexpected = re.match(
        r"(?:mismatched|extraneous) input ('.*?') expecting|"
        r"no viable alternative at input ('.*?')$|"
        r"token recognition error at: ('.*?')$",
        detail,
    )
    if unexpected:
        token = next(group for group in unexpected.groups() if group is not None)
        where = f"in the value of {key.lstrip('+~')}" if key.lstrip("+~") else "here"
        return (
            f"{token} cannot stand unquoted {where} (Hydra's parser: "
            f"{detail.split(' expecting ')[0]})"
        )
    return f"Hydra's parser says: {detail}"
