"""Name the rank that failed and quote its log, from the files the ranks leave in the log
folder: the launcher's exit status alone says neither which rank failed nor why.
"""
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ms_exp.parallel.launcher_config import MSRUN

# Lines of a failed rank's log shown to the user.
FAILURE_TAIL_LINES = 20


def rank_logs(logs: Path) -> Dict[int, Path]:
    """Each rank's log: ``worker_<r>.log`` (msrun, rank table) or ``<job>/rank.<r>/stdout``
    (mpirun's ``--output-filename``)."""
    found: Dict[int, Path] = {}
    for log in logs.glob("worker_*.log"):
        rank = log.stem.rsplit("_", 1)[-1]
        if rank.isdigit():
            found[int(rank)] = log
    for log in logs.glob("*/rank.*/stdout"):
        rank = log.parent.name.split(".", 1)[-1]
        if rank.isdigit():
            found.setdefault(int(rank), log)
    return dict(sorted(found.items()))


def failing_rank_log(logs: Path, failed_pids: List[int]) -> Optional[Tuple[int, Path]]:
    """The rank that failed and its log: one with a Python traceback, else the one whose
    worker the launcher reported dead."""
    ranks = rank_logs(logs)
    for rank, log in ranks.items():
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            return rank, log
    for pid_path in sorted(logs.glob("worker_*.pid")):
        suffix = pid_path.stem.rsplit("_", 1)[-1]
        if pid_path.read_text().strip() in {str(pid) for pid in failed_pids} \
                and suffix.isdigit() and int(suffix) in ranks:
            return int(suffix), ranks[int(suffix)]
    return None


def failure_report(logs: Path, returncode: int, failed_pids: Sequence[int] = (),
                   launcher: Optional[str] = MSRUN) -> str:
    """``launcher``: the program whose exit status this is; None, the rank's own."""
    found = failing_rank_log(logs, list(failed_pids))
    status = f"{launcher} exit status" if launcher else "exit status"
    if found is None:
        return (f"{launcher or 'a rank'} exited with status {returncode}; worker logs are "
                f"in {logs}")
    rank, log = found
    tail = log.read_text(errors="replace").splitlines()[-FAILURE_TAIL_LINES:]
    return (f"rank {rank} failed ({status} {returncode}); last lines of {log}:\n"
            + "\n".join(tail))
