"""Checks of the folders a job writes to: they are, or can be created as, writable folders
on a filesystem with room for a run; a run folder that exists already has a record that
reads back and checkpoint folders that are folders."""

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ms_exp.checkpoint.resume import misplaced_checkpoint_folder
from ms_exp.config.errors import ConfigError, InvalidConfig, require
from ms_exp.tracking.run_folder import FolderRefused, read_run_record

# An output folder or store on a filesystem with less free space than this is refused: a
# run writes its config, logs, checkpoints and MLflow rows there, and a disk that fills up
# midway leaves half-written checkpoints and a run that never ends.
MIN_FREE_BYTES = 64 * 1024 * 1024


def output_folder(key: str, value: Any) -> None:
    """A run or sweep folder: named, a path the filesystem takes, writable, and on a
    filesystem with room for a run."""
    require(
        value is not None and str(value).strip() != "",
        key,
        value,
        "a folder path (relative paths are below the working directory)",
    )
    fits_the_filesystem(key, value, Path(value))
    writable_dir(key, value, Path(value))
    enough_free_space(key, value, Path(value))


def existing_ancestor(path: Path) -> Path:
    """``path`` itself or the nearest folder above it that exists."""
    existing = Path(path).expanduser().absolute()
    while not _exists(existing):
        existing = existing.parent
    return existing


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name or path too long for the filesystem: it cannot exist
        return False


# Bytes of a run folder's path kept for what a run writes inside it (checkpoints/merged/
# rank_<r>/<prefix>-<epoch>_<step>.ckpt, ...), and for the job folders below a sweep's.
RUN_FOLDER_ROOM = 200


def fits_the_filesystem(key: str, value: Any, path: Path) -> None:
    """Refuse a folder path with a name longer than its filesystem's NAME_MAX, or longer
    than its PATH_MAX less RUN_FOLDER_ROOM (as an absolute path): the job would fail with
    ENAMETOOLONG as it makes the folder, or as it writes into it."""
    absolute = Path(path).expanduser().absolute()
    existing = existing_ancestor(absolute)
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    longest = max(absolute.parts, key=lambda name: len(os.fsencode(name)))
    require(
        len(os.fsencode(longest)) <= name_max,
        key,
        shortened(value),
        f"a folder path whose names have at most {name_max} bytes each, the limit of the "
        f"filesystem at {existing} ({shortened(longest)} has {len(os.fsencode(longest))})",
    )
    path_max = os.pathconf(existing, "PC_PATH_MAX")
    size = len(os.fsencode(str(absolute)))
    require(
        size <= path_max - RUN_FOLDER_ROOM,
        key,
        shortened(value),
        f"a folder path of at most {path_max - RUN_FOLDER_ROOM} bytes, the PATH_MAX of "
        f"{path_max} at {existing} less {RUN_FOLDER_ROOM} for what a run writes inside "
        f"it (it has {size} as an absolute path)",
    )


def shortened(value: Any) -> str:
    """A value too long to print whole: its start and how it ends."""
    text = str(value)
    return text if len(text) <= 80 else f"{text[:50]}...{text[-20:]}"


def enough_free_space(key: str, value: Any, path: Path) -> None:
    existing = existing_ancestor(path)
    free = shutil.disk_usage(existing).free
    require(
        free >= MIN_FREE_BYTES,
        key,
        value,
        f"a folder on a filesystem with at least {MIN_FREE_BYTES} bytes "
        f"({MIN_FREE_BYTES // 2**20} MiB) free ({existing} has {free} bytes free)",
    )


def writable_dir(key: str, value: Any, path: Path) -> None:
    """Refuse ``path`` unless it is, or can be created as, a folder we can write into: probed
    with a temporary file, as permission bits say nothing for root or on read-only mounts."""
    path = Path(path).expanduser().absolute()
    existing = existing_ancestor(path)
    require(
        existing.is_dir(), key, value, f"a writable folder ({existing} is a file, not a folder)"
    )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise ConfigError(key, value, f"a writable folder ({existing}: {error.strerror})")
    if existing != path and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(key, value, f"a writable folder ({existing} is not writable)")


def existing_run_folder(key: str, value: Any, ranks: int) -> None:
    """A run folder that is there already (a fixed ``hydra.run.dir``, or one that
    ``trainer.resume=auto`` continues in place): its record reads back, and its checkpoint
    folders are folders, checked before Hydra writes into it or its MLflow run exists."""
    folder = Path(value).expanduser()
    try:
        read_run_record(folder)
    except FolderRefused as error:
        raise InvalidConfig(str(error)) from None
    misplaced = misplaced_checkpoint_folder(folder, ranks)
    if misplaced is not None:
        relative = misplaced.relative_to(folder).as_posix()
        raise ConfigError(
            key,
            value,
            f"a run folder whose {relative} is a folder or absent "
            f"({misplaced} is a file, not a folder)",
        )
