"""What text read back from a record may hold: whoever could write a store or a run folder
wrote it, so it is data, never code and never a read of the reader's environment.

A saved config is resolved, so any ``${`` in one read back is refused (``${oc.create:...}``
would build a target the trust check never saw, ``${oc.env:SECRET}`` copy the reader's
secret into the store). Recorded overrides (``--from-run``) may hold a plain ``${key}`` and
the RECORDED_OVERRIDE_RESOLVERS, never another resolver or an override of Hydra itself.
"""

import re
from typing import Any, Dict, Iterable, Iterator, Tuple

from ms_exp.config.errors import ConfigError

# ``${name:``, a resolver's call; a key reference (``${trainer.seed}``) has no colon.
RESOLVER_CALL = re.compile(r"\$\{\s*([A-Za-z_][\w.-]*)\s*:")

# Every resolver registered in an ms_exp process (OmegaConf's, Hydra's, ms_exp's), and
# whether a recorded override may call it: (allowed, why). tests/test_trust_boundary.py
# walks the registered ones, so a new resolver cannot come in undecided.
RECORDED_OVERRIDE_RESOLVERS: Dict[str, Tuple[bool, str]] = {
    "oc.select": (True, "reads another key of the same config, as ${key} does"),
    "oc.deprecated": (True, "reads another key of the same config, as ${key} does"),
    "now": (True, "formats the time of the re-run; reads nothing else and builds nothing"),
    "ms_exp.unique": (True, "a random token; reads nothing and builds nothing"),
    "python_version": (True, "the running Python's version number; builds nothing"),
    "oc.env": (False, "reads the environment of whoever re-runs it, a secret included"),
    "oc.create": (False, "builds config nodes, a _target_ among them, after every check"),
    "oc.decode": (False, "parses text into config nodes, a _target_ among them"),
    "oc.dict.keys": (False, "builds a config node"),
    "oc.dict.values": (False, "builds a config node"),
    "hydra": (False, "reads the re-running machine's Hydra runtime (its folders and paths)"),
}
UNKNOWN_RESOLVER = "ms_exp does not know, so it may run any code"
SAVED_RESOLVED = (
    "a plain value: a job saves its config resolved, so a config read back "
    "resolves nothing (docs/guides/security.md)"
)
PLAIN_OVERRIDES = (
    "overrides of the job's own keys with plain values or ${key} references "
    "(docs/guides/security.md)"
)


def strings_in(node: Any, prefix: str = "") -> Iterator[Tuple[str, str]]:
    """``(key, text)`` of every string of a plain container (YAML as loaded), at any depth."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from strings_in(value, f"{prefix}.{name}" if prefix else str(name))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from strings_in(value, f"{prefix}[{index}]")
    elif isinstance(node, str):
        yield prefix, node


def refuse_interpolations(saved: Any, source: str) -> None:
    """A config read back from ``source``: its first interpolation refused by key."""
    for key, text in strings_in(saved):
        if "${" in text:
            raise ConfigError(
                key,
                _short(text),
                SAVED_RESOLVED,
                problem=f"is an interpolation in a config read back from {source}",
            )


def check_recorded_overrides(overrides: Iterable[str], source: str) -> None:
    """Overrides recorded in ``source``: one of Hydra itself, or a value that calls a
    resolver RECORDED_OVERRIDE_RESOLVERS does not allow, refused by key."""
    for override in overrides:
        key, _, value = str(override).partition("=")
        name = key.lstrip("+~").split("@")[0]
        if name == "hydra" or name.startswith(("hydra.", "hydra/")):
            raise ConfigError(
                name,
                _short(value),
                PLAIN_OVERRIDES + "; a setting of Hydra is yours to name on the command line",
                problem=f"overrides Hydra itself, recorded in {source}",
            )
        for resolver in RESOLVER_CALL.findall(value):
            allowed, why = RECORDED_OVERRIDE_RESOLVERS.get(resolver, (False, UNKNOWN_RESOLVER))
            if not allowed:
                raise ConfigError(
                    name,
                    _short(value),
                    PLAIN_OVERRIDES,
                    problem=f"calls the resolver {resolver}, which {why}, in "
                    f"an override recorded in {source}",
                )


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
