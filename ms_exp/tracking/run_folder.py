"""Which run owns a run folder, and which process works in it now.

``run.json`` names the folder's run (config digest, MLflow run, final status); only that run,
resumed, may work there again, and any other command is refused before it writes anything.
A working process holds ``fcntl.flock`` on the folder itself, which the kernel releases
however the process ends (a lock file, deleted mid-run, would let a second process in);
``run.lock`` names the holder, and is locked instead where directories cannot be (NFS).
"""

import fcntl
import json
import os
import shlex
import shutil
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Callable, Dict, NoReturn, Optional, Set

RUN_RECORD = "run.json"
LOCK_FILE = "run.lock"


class FolderRefused(Exception):
    """A run folder that this command may not work in; the message is one line."""


def write_run_record(run_dir: Path, **fields: object) -> None:
    """Update fields of the record (digest, status, run_id: the MLflow run). Written whole
    (a temporary file renamed), so a killed job leaves the previous version."""
    path = Path(run_dir) / RUN_RECORD
    record = {"started": time.time(), **read_run_record(run_dir), **fields, "updated": time.time()}
    remove_leftovers(run_dir)  # what a killed or full-disk job left half-written here
    partial = path.with_suffix(f".{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(record, indent=2))
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)  # a full disk: the previous version stays
        raise


# Temporary names of files written whole then renamed, left by a writer killed in between:
# the run record's (write_run_record) and MindSpore's save_checkpoint's (_exec_save).
RECORD_PARTIAL = "run.*.partial"
CHECKPOINT_TMP = "checkpoints/**/*.tmp"
_cleared: Set[Path] = set()


def remove_leftovers(run_dir: Path) -> None:
    """Remove the half-written files of earlier processes in ``run_dir``, once per process:
    a record's ``.partial`` whose process is gone, and checkpoints' ``.tmp`` where this
    process holds the folder (no other one writes there then)."""
    folder = Path(run_dir).resolve()
    if folder in _cleared:
        return
    _cleared.add(folder)
    for partial in folder.glob(RECORD_PARTIAL):
        pid = partial.name.split(".")[1]
        if pid.isdigit() and not process_exists(int(pid)):
            partial.unlink(missing_ok=True)
    if folder in _held:
        for tmp in folder.glob(CHECKPOINT_TMP):
            tmp.unlink(missing_ok=True)


def read_run_record(run_dir: Path) -> dict:
    """The folder's record; ``{}`` where there is none. A record that is there but cannot
    be read (truncated, empty, not an object) is refused by name: taken as absent, it would
    hand the folder and its checkpoints to the next run."""
    path = Path(run_dir) / RUN_RECORD
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise FolderRefused(
            f"{path}: cannot be read ({error.strerror or error}); it names "
            "the run that owns the folder"
        ) from None
    try:
        record = json.loads(text)
    except ValueError as error:
        record = error
    if not isinstance(record, dict) or not {"digest", "status"} <= set(record):
        why = (
            "empty"
            if not text.strip()
            else "not a run record"
            if not isinstance(record, ValueError)
            else f"not JSON: {record}"
        )
        raise FolderRefused(
            f"{path}: damaged ({why}); it names the run that owns the folder: "
            "choose another folder, or move the file away to start a new run "
            "there"
        )
    return record


_held: Dict[Path, int] = {}  # folder -> the descriptor that holds its lock, kept open


def hold_folder(run_dir: Path, key: str) -> None:
    """Take the folder's lock for this process, or refuse naming the process that holds
    it. ``key`` is what the user wrote that chose the folder (``hydra.run.dir=...``)."""
    folder = Path(run_dir).resolve()
    if folder in _held:
        return
    folder.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = _lock(folder, fcntl.LOCK_EX, os.O_RDWR | os.O_CREAT)
    except BlockingIOError:
        raise FolderRefused(
            f"{key}: {folder} is in use by another ms_exp process "
            f"({_holder(folder)}); wait for it to end, or choose another "
            "folder"
        ) from None
    _held[folder] = descriptor
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.time(),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
    }
    on_folder = stat.S_ISDIR(os.fstat(descriptor).st_mode)
    try:
        # Where the lock is the lock file's, through its descriptor: NFS emulates flock
        # with POSIX locks, which closing another descriptor of the file would drop.
        note = (
            os.open(folder / LOCK_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
            if on_folder
            else descriptor
        )
        try:
            os.ftruncate(note, 0)
            os.pwrite(note, json.dumps(holder).encode(), 0)
        finally:
            if note != descriptor:
                os.close(note)
    except OSError:
        pass  # a full disk: the lock holds all the same, the refusal names less


def folder_in_use(run_dir: Path) -> Optional[bool]:
    """Whether a process works in the folder now (its lock is held); None where the folder
    (or, on a file system without flock on directories, its lock file) is not on this
    machine, so nobody can tell from here."""
    folder = Path(run_dir).resolve()
    if folder in _held:
        return True
    try:
        # Exclusive on the folder as hold_folder takes it: a shared lock would succeed on
        # NFS, where a holder locks the lock file instead.
        descriptor = _lock(folder, fcntl.LOCK_SH, os.O_RDONLY)
    except BlockingIOError:
        return True
    except OSError:
        return None
    os.close(descriptor)
    return False


def _lock(folder: Path, file_operation: int, file_flags: int) -> int:
    """A descriptor that holds the folder's lock: the folder's own (exclusive), or, where
    its file system refuses flock on a directory, ``run.lock``'s (``file_operation``,
    opened with ``file_flags``). BlockingIOError: another process holds it."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return descriptor
    except OSError as error:
        os.close(descriptor)
        if isinstance(error, BlockingIOError):
            raise
    descriptor = os.open(folder / LOCK_FILE, file_flags, 0o644)
    try:
        fcntl.flock(descriptor, file_operation | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def release_folder(run_dir: Path) -> None:
    descriptor = _held.pop(Path(run_dir).resolve(), None)
    if descriptor is not None:
        os.close(descriptor)  # the lock goes with the last descriptor of it


def discard_if_unused(run_dir: Path, hydra_subdir: Optional[str]) -> None:
    """Remove a folder this command was refused in, or left for the folder of the run it
    continued, if it holds nothing but what Hydra and the claim put there (a fresh default
    folder of a ``trainer.resume``): the command leaves nothing behind. A folder with
    anything else is left alone."""
    folder = Path(run_dir)
    ours = {LOCK_FILE, *([hydra_subdir] if hydra_subdir else [])}
    if not folder.is_dir() or {p.name for p in folder.iterdir()} - ours:
        return
    release_folder(folder)
    for name in ours:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    folder.rmdir()


def process_exists(pid: int) -> bool:
    """Whether a process of this machine has that pid (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_all() -> None:
    for folder in list(_held):
        release_folder(folder)


def _holder(folder: Path) -> str:
    """Who holds the folder, as its lock file and record say."""
    try:
        holder = json.loads((folder / LOCK_FILE).read_text())
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict) or not holder.get("pid"):
        # The note deleted or unreadable: the kernel's table still names the pid.
        pid = _locking_pid(folder)
        holder = {"pid": pid, "host": socket.gethostname()} if pid else {}
    parts = []
    if holder.get("pid"):
        parts.append(f"pid {holder['pid']} on {holder.get('host', '?')}")
    if holder.get("since"):
        parts.append("since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["since"])))
    try:
        run_id = read_run_record(folder).get("run_id")
    except FolderRefused:
        run_id = None
    if run_id:
        parts.append(f"MLflow run {run_id}")
    if holder.get("command"):
        parts.append(f"command: {holder['command']}")
    return ", ".join(parts) or "its pid is not recorded"


def _locking_pid(folder: Path) -> Optional[int]:
    """The pid that /proc/locks (Linux) gives for a flock on the folder, if any."""
    try:
        found = os.stat(folder)
        inode = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()  # 1: FLOCK ADVISORY WRITE <pid> <dev:inode> 0 EOF
            if fields[1:2] == ["FLOCK"] and inode in fields:
                return int(fields[fields.index(inode) - 1])
    except (OSError, ValueError):
        pass
    return None


def check_owner(run_dir: Path, key: str, resume: Optional[str], digest: Callable[[], str]) -> None:
    """Refuse a folder that holds another run's record. A command with ``trainer.resume``
    may work in it: ``auto`` only where the record is an unfinished run of this config, an
    explicit run id, folder or checkpoint whatever it holds. ``digest`` gives this
    command's config digest, asked for only where a record is there to compare."""
    record = read_run_record(run_dir)
    if not record or (resume is not None and resume != "auto"):
        return
    if resume != "auto":
        refuse_foreign(run_dir, key, record, "")
    if record.get("status") != "FINISHED" and record.get("digest") == digest():
        return
    why = " (trainer.resume=auto continues only an unfinished run of this config)"
    refuse_foreign(run_dir, key, record, why)


def refuse_foreign(run_dir: Path, key: str, record: dict, why: str) -> NoReturn:
    """The one-line refusal of a folder that belongs to the run of ``record``."""
    folder = Path(run_dir).resolve()
    run = f"run {record['run_id']}" if record.get("run_id") else "a run"
    raise FolderRefused(
        f"{key}: {folder} belongs to {run} ({record.get('status', '?')}) of an earlier "
        f"command{why}; choose a new folder, or continue that run with "
        f"trainer.resume={shlex.quote(str(folder))}"
    )
