"""Command-line checks shared by ``criteo_convert``, ``criteo_sample`` and
``criteo_records.publish``: one-line usage errors, argparse without its usage block, integer
options and paths that can be created (apart, so none of them imports another command)."""

import argparse
import os
from pathlib import Path
from typing import Any, NoReturn, Optional


class UsageError(ValueError):
    """Bad command-line input, refused before anything is written; the message is one
    line."""


def usage_error(name: str, value: Any, problem: str, allowed: str) -> UsageError:
    """``name=value: problem; expected allowed``, the shape of ms_exp's config errors."""
    shown = repr(value) if isinstance(value, str) else value
    return UsageError(f"{name}={shown}: {problem}; expected {allowed}")


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (no usage block), raised as UsageError."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _integer(name: str, text: str, minimum: int, maximum: Optional[int] = None) -> int:
    allowed = (
        f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    )
    try:
        value = int(text)
    except ValueError:
        raise usage_error(name, text, "not an integer", allowed) from None
    if value < minimum or (maximum is not None and value > maximum):
        raise usage_error(name, value, "not allowed", allowed)
    return value


def check_creatable(name: str, path: Path, kind: str) -> None:
    """Refuse ``path`` unless its nearest existing ancestor is a folder we can write in."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise usage_error(
            name,
            str(path),
            f"cannot be created ({parent} is not a writable folder)",
            f"a {kind} path under a writable folder",
        )
