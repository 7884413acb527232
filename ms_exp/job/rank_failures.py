"""Name the rank that failed and quote its log, from the files the ranks leave in the log
folder: the launcher's exit status alone says neither which rank failed nor why.

A rank killed by a signal left no traceback: it is named in one line with the signal,
where the logs are, and how to go on.
"""

import signal
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from ms_exp.job.console import LAUNCHER_LOG
from ms_exp.parallel.launcher_config import MSRUN

# Lines of a failed rank's log shown to the user.
FAILURE_TAIL_LINES = 20


def rank_of_pid(logs: Path, pid: int) -> Optional[int]:
    """The rank whose ``worker_<r>.pid`` records ``pid``."""
    for pid_path in sorted(logs.glob("worker_*.pid")):
        rank = pid_path.stem.rsplit("_", 1)[-1]
        try:
            recorded = pid_path.read_text().strip()
        except OSError:
            continue
        if recorded == str(pid) and rank.isdigit():
            return int(rank)
    return None


def signal_name(exit_code: Optional[int]) -> Optional[str]:
    """``SIGKILL`` for the exit code of a process a signal ended (negative, as Python's
    subprocess reports it), else None."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def failing_rank_log(logs: Path, codes: Mapping[int, Optional[int]]) -> Optional[Tuple[int, Path]]:
    """The rank that failed and its log: the first the launcher reported killed by a signal
    (the tracebacks of the others came after, from losing it), else one with a Python
    traceback, else the one whose worker the launcher reported dead."""
    # Each rank's log: worker_<r>.log (msrun, rank table) or <job>/rank.<r>/stdout (mpirun's
    # --output-filename).
    found: Dict[int, Path] = {}
    for log in logs.glob("worker_*.log"):
        number = log.stem.rsplit("_", 1)[-1]
        if number.isdigit():
            found[int(number)] = log
    for log in logs.glob("*/rank.*/stdout"):
        number = log.parent.name.split(".", 1)[-1]
        if number.isdigit():
            found.setdefault(int(number), log)
    ranks = dict(sorted(found.items()))
    for pid, code in codes.items():
        rank = rank_of_pid(logs, pid)
        if signal_name(code) and rank in ranks:
            return rank, ranks[rank]
    for rank, log in ranks.items():
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            return rank, log
    for pid in codes:
        rank = rank_of_pid(logs, pid)
        if rank in ranks:
            return rank, ranks[rank]
    return None


def failure_report(
    logs: Path,
    returncode: int,
    failed_pids: Optional[Mapping[int, Optional[int]]] = None,
    launcher: Optional[str] = MSRUN,
    resume_hint: str = "",
) -> str:
    """``launcher``: the program whose exit status this is; None, the rank's own.
    ``failed_pids``: the ranks' pids the launcher reported dead, with their exit codes
    where known. ``resume_hint``: how to go on, said after a rank killed by a signal."""
    codes = dict(failed_pids or {})
    found = failing_rank_log(logs, codes)
    status = f"{launcher} exit status" if launcher else "exit status"
    if found is None:
        return f"{launcher or 'a rank'} exited with status {returncode}; worker logs are in {logs}"
    rank, log = found
    pid = next((p for p in codes if rank_of_pid(logs, p) == rank), None)
    killed_by = signal_name(codes.get(pid) if pid is not None else None)
    if killed_by:
        others = (
            f", {launcher}'s and its scheduler's in {logs / LAUNCHER_LOG}"
            if launcher == MSRUN
            else ""
        )
        then = f"; {resume_hint}" if resume_hint else ""
        return (
            f"rank {rank} (pid {pid}) was killed by {killed_by} ({status} {returncode}); "
            f"its output is in {log}{others}{then}"
        )
    tail = log.read_text(errors="replace").splitlines()[-FAILURE_TAIL_LINES:]
    return f"rank {rank} failed ({status} {returncode}); last lines of {log}:\n" + "\n".join(tail)


def death_notice(logs: Path, pid: int, exit_code: Optional[int], launcher: str) -> str:
    """The line shown when the launcher reports a rank dead, before it has stopped the
    others (msrun then waits for its scheduler to give up on the rank)."""
    rank = rank_of_pid(logs, pid)
    who = f"rank {rank} (pid {pid})" if rank is not None else f"a rank (pid {pid})"
    killed_by = signal_name(exit_code)
    how = f"was killed by {killed_by}" if killed_by else f"exited with status {exit_code}"
    return f"ms_exp: {who} {how}; {launcher} is stopping the other ranks"
