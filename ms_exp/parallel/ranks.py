"""A rank's identity and its process, shared by the rank and the process that launches it.

The launcher and each rank must agree on how a rank is started (``python -m ms_exp.worker``),
which variables name its rank and device, and where it records its pid; the launcher stops
and names ranks by these, the rank (ms_exp/worker.py, ms_exp/train/context.py) reads and
sets them. Defined once here, apart from either side's code, the two cannot disagree.
"""

import ctypes
import os
import signal
from pathlib import Path
from typing import List, Mapping, Optional

WORKER_MODULE = "ms_exp.worker"
# Where the ranks learn who they are: mpirun sets Open MPI's variable, msrun and the
# rank-table script RANK_ID (and DEVICE_ID, which HCCL and ms_exp.train.context read).
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "RANK_ID")


def worker_argv(run_dir: Path) -> List[str]:
    """One rank's command line; ``python`` is the launching interpreter when ms_exp runs it."""
    return ["python", "-m", WORKER_MODULE, "--run-dir", str(Path(run_dir).resolve())]


def environment_rank(environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """This rank's id as its launcher set it (before MindSpore's ``init``), or None."""
    for name in RANK_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def environment_device_id(configured: int, environ: Mapping[str, str] = os.environ) -> int:
    """The device of this rank: ``DEVICE_ID`` when a launcher set it (msrun: the local rank;
    the rank-table script: START_ID + rank), as the model zoo's scripts read it; else the
    configured ``trainer.device_id``."""
    value = environ.get("DEVICE_ID", "")
    return int(value) if value.isdigit() else configured


def pid_file(logs: Path, rank: int) -> Path:
    return logs / f"worker_{rank}.pid"


def record_worker_pid(logs: Path, rank: int) -> None:
    """Each rank notes its pid beside its log, so a rank that dies silently is named."""
    logs.mkdir(parents=True, exist_ok=True)
    pid_file(logs, rank).write_text(str(os.getpid()))


def forget_worker_pid(logs: Path, rank: int) -> None:
    """Remove the pid file of ``rank`` if this process wrote it."""
    path = pid_file(logs, rank)
    if path.is_file() and path.read_text().strip() == str(os.getpid()):
        path.unlink()


_PR_SET_PDEATHSIG = 1
_LIBC: Optional[ctypes.CDLL]
try:  # loaded here, not in the forked child, where dlopen could meet a lock held at fork
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies.

    msrun and its ranks run in sessions of their own, so nothing else stops them when the
    launching process is killed outright: they would train on into a run directory a resumed
    job may be writing to. Set by msrun, every rank and msrun's scheduler for themselves. (A
    thread polling the parent would not do: MindSpore's scheduler holds the GIL.)"""
    prctl = getattr(_LIBC, "prctl", None)
    if prctl is None:
        return  # not Linux: the ranks outlive a killed launcher, as before
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # the parent died before we asked
