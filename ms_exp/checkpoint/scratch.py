"""Temporary folders of the commands (eval's checkpoint copies, a merge's scratch) that do
not outlive a killed command for good: SIGTERM and Ctrl-C unwind the ``with`` block, and
since SIGKILL runs nothing, the folder's name carries its maker's pid and the next command
making one in the same place removes those whose process is gone."""

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from ms_exp.tracking.run_folder import process_exists


@contextmanager
def scratch_folder(prefix: str, parent: Optional[Path] = None) -> Iterator[Path]:
    """A new folder ``<parent>/<prefix><pid>-<random>`` (``parent``: the system's temporary
    folder), removed when the block ends."""
    parent = Path(parent if parent is not None else tempfile.gettempdir())
    remove_abandoned(prefix, parent)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=parent) as path:
        yield Path(path)


def remove_abandoned(prefix: str, parent: Path) -> None:
    for folder in Path(parent).glob(f"{prefix}*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        if folder.is_dir() and pid.isdigit() and not process_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
