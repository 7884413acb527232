"""Run a job's launch plan and stop it: start msrun, mpirun or each rank, copy their output,
wait for them, and on a failure, Ctrl-C or SIGTERM stop every rank so that none trains on
unwatched into the run directory.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from omegaconf import DictConfig

from ms_exp.job.console import LAUNCHER_LOG, LauncherFilter
from ms_exp.job.launch_plan import LaunchPlan, LaunchProcess, launch_plan
from ms_exp.job.rank_failures import death_notice, failure_report
from ms_exp.parallel.launcher_config import MSRUN, RANK_TABLE
from ms_exp.parallel.ranks import WORKER_MODULE, die_with_parent

# How msrun, mpirun and each rank are started: a session of their own, so that every rank
# can be stopped with one signal, and their output read line by line.
_PIPED: Dict[str, Any] = dict(
    start_new_session=True,
    preexec_fn=die_with_parent,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    errors="replace",
    bufsize=1,
)


class WorkersFailed(RuntimeError):
    """A rank ended with an error; the message names the rank and quotes its log."""


def launch(
    parallel_cfg: DictConfig,
    run_dir: Path,
    env: Dict[str, str],
    resume_hint: Callable[[], str] = str,
) -> None:
    """Run the job's launch plan to completion; on Ctrl-C or SIGTERM stop every rank, then
    re-raise. ``env``: variables for every rank on top of the plan's (MLflow's).
    ``resume_hint``: how to go on, asked when a rank was killed (what it saved by then)."""
    plan = launch_plan(parallel_cfg, run_dir)
    grace = parallel_cfg.launcher.join_timeout
    if plan.style == RANK_TABLE:
        _run_each_rank(plan, env, grace, resume_hint)
    else:
        _run_launcher(plan, run_dir, env, grace, resume_hint)


def environment(process: LaunchProcess, env: Mapping[str, str]) -> Dict[str, str]:
    """The launching environment, less what the process unsets, plus ``env`` and its own."""
    full = {key: value for key, value in os.environ.items() if key not in process.unset}
    return {**full, **env, **process.env}


def with_this_interpreter(argv: Tuple[str, ...]) -> List[str]:
    """The command line with the worker's ``python`` replaced by this interpreter."""
    words = list(argv)
    for index in range(len(words) - 2):
        if words[index : index + 3] == ["python", "-m", WORKER_MODULE]:
            words[index] = sys.executable
    return words


def interpreter_path_dir(run_dir: Path) -> Path:
    """A folder whose ``python`` is this interpreter, for msrun's PATH lookup.

    A virtual environment's own bin folder when it has one: a symlink elsewhere would lose
    the environment (Python finds pyvenv.cfg next to the executable it was started as)."""
    own = Path(sys.executable).parent
    candidate = own / "python"
    if candidate.exists() and candidate.resolve() == Path(sys.executable).resolve():
        return own
    folder = Path(run_dir) / ".bin"
    folder.mkdir(exist_ok=True)
    link = folder / "python"
    if not link.exists():
        link.symlink_to(sys.executable)
    return folder


def _run_launcher(
    plan: LaunchPlan,
    run_dir: Path,
    env: Mapping[str, str],
    grace: int,
    resume_hint: Callable[[], str],
) -> None:
    """msrun or mpirun, which start the ranks themselves.

    Their output (their own lines and the ranks' output they copy: msrun's only rank 0's)
    is written whole to the launcher's log in the log folder, read for the pid of a worker
    that died, and, filtered (ms_exp/job/console.py), copied to this process's stdout, so
    it lands in the console and in the run's console.log."""
    (spec,) = plan.processes
    full_env = environment(spec, env)
    if plan.style == MSRUN:
        # msrun runs the `python` on PATH: this interpreter's
        # (docs/design.md#msrun-python-from-path).
        command = [sys.executable, "-m", "mindspore.parallel.cluster.run", *spec.argv[1:]]
        full_env["PATH"] = (
            f"{interpreter_path_dir(run_dir)}{os.pathsep}{os.environ.get('PATH', '')}"
        )
    else:
        command = [
            shutil.which(spec.argv[0]) or spec.argv[0],
            *with_this_interpreter(spec.argv[1:]),
        ]
    plan.logs.mkdir(parents=True, exist_ok=True)
    if plan.style == MSRUN:
        print(
            f"each rank's output is in {plan.logs}/worker_<rank>.log; rank 0's is shown here",
            flush=True,
        )
    process = subprocess.Popen(command, env=full_env, **_PIPED)
    failed_pids: Dict[int, Optional[int]] = {}
    pump = threading.Thread(
        target=_copy_output, args=(process.stdout, failed_pids, plan.logs, plan.style), daemon=True
    )
    pump.start()
    try:
        returncode = process.wait()
    except BaseException:
        stop_ranks(process, plan.logs, grace)
        raise
    finally:
        pump.join(timeout=5)
    if returncode != 0:
        raise WorkersFailed(
            failure_report(plan.logs, returncode, failed_pids, plan.style, resume_hint())
        )


def _run_each_rank(
    plan: LaunchPlan, env: Mapping[str, str], grace: int, resume_hint: Callable[[], str]
) -> None:
    """The rank-table style: this process starts every rank, as the tutorial's script does.

    Each rank's output goes to its own log; rank 0's is also copied to the console. When a
    rank fails the others get ``grace`` seconds to finish, then are stopped."""
    plan.logs.mkdir(parents=True, exist_ok=True)
    ranks: List[subprocess.Popen] = []
    pumps: List[threading.Thread] = []
    try:
        for rank, spec in enumerate(plan.processes):
            process = subprocess.Popen(
                with_this_interpreter(spec.argv), env=environment(spec, env), **_PIPED
            )
            ranks.append(process)
            pump = threading.Thread(
                target=_write_log, args=(process.stdout, spec.log, rank == 0), daemon=True
            )
            pump.start()
            pumps.append(pump)
        failed = _wait_for_ranks(ranks, grace)
    except BaseException:
        _stop_processes(ranks, grace)
        raise
    finally:
        for pump in pumps:
            pump.join(timeout=5)
    if failed is not None:
        raise WorkersFailed(
            failure_report(
                plan.logs, failed.returncode, {failed.pid: failed.returncode}, None, resume_hint()
            )
        )


def _write_log(stream: Iterable[str], log: Path, to_console: bool) -> None:
    shown = LauncherFilter()
    with open(log, "w") as out:
        for line in stream:
            out.write(line)
            out.flush()
            text = shown.shown(line) if to_console else None
            if text is not None:
                sys.stdout.write(text)
    sys.stdout.flush()


def _wait_for_ranks(ranks: List[subprocess.Popen], grace: int) -> Optional[subprocess.Popen]:
    """Wait for every rank; return the first that failed (the rest stopped), or None."""
    failed, deadline = None, None
    while any(rank.poll() is None for rank in ranks):
        if failed is None:
            failed = next((rank for rank in ranks if rank.poll()), None)
            if failed is not None:
                deadline = time.monotonic() + grace
        if deadline is not None and time.monotonic() >= deadline:
            _stop_processes(ranks, grace)
            break
        time.sleep(0.2)
    return failed or next((rank for rank in ranks if rank.returncode), None)


def _stop_processes(ranks: List[subprocess.Popen], grace: int) -> None:
    """SIGTERM to every rank still running (each saves a checkpoint of its step and exits:
    ms_exp/worker.py); after ``grace`` seconds SIGKILL to what is left, children included."""
    for rank in ranks:
        if rank.poll() is None:
            _kill(lambda: rank.send_signal(signal.SIGTERM))
    deadline = time.monotonic() + grace
    while any(rank.poll() is None for rank in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    for rank in ranks:
        if rank.poll() is None:
            _kill(lambda: os.killpg(rank.pid, signal.SIGKILL))
            rank.wait()


def _copy_output(
    stream: Iterable[str], failed_pids: Dict[int, Optional[int]], logs: Path, launcher: str
) -> None:
    """Every line into the launcher's log; to the console what LauncherFilter shows, until
    a rank dies: then one line naming it, and nothing more of the launcher (the other
    ranks', the scheduler's and msrun's own tracebacks of losing it stay in the logs; the
    job's error line says where)."""
    shown = LauncherFilter()
    with open(logs / LAUNCHER_LOG, "a", encoding="utf-8", buffering=1) as everything:
        for line in stream:
            everything.write(line)
            match = _WORKER_DIED.search(line)
            if match and not failed_pids:
                pid, code = int(match.group(1)), match.group(2)
                failed_pids[pid] = int(code) if code is not None else None
                sys.stdout.write(death_notice(logs, pid, failed_pids[pid], launcher) + "\n")
            elif match:
                failed_pids.setdefault(int(match.group(1)), None)
            text = shown.shown(line) if not failed_pids else None
            if text is not None:
                sys.stdout.write(text)
    sys.stdout.flush()


# msrun's own line when it sees a worker end badly (then it kills the other workers), with
# the worker's exit code (negative: the signal that ended it).
_WORKER_DIED = re.compile(r"Worker process (\d+) exit with exception(?:\. Error code: (-?\d+))?")


def stop_ranks(process: subprocess.Popen, logs: Path, grace_seconds: int) -> None:
    """Stop msrun (or mpirun) and every rank it started.

    The ranks first, with SIGTERM: each finishes its step, saves a checkpoint of it and
    exits (ms_exp/worker.py); msrun's own Ctrl-C handler would SIGKILL them mid-step. Then
    SIGINT to msrun, which kills what is left (its scheduler; mpirun: its ranks). Whatever
    is left after the grace periods is killed, the launcher's group and every rank that
    recorded its pid."""
    ranks = _our_workers(logs)
    for pid in ranks:
        _kill(lambda: os.kill(pid, signal.SIGTERM))
    deadline = time.monotonic() + grace_seconds
    while any(Path(f"/proc/{pid}").exists() for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        _kill(lambda: os.killpg(process.pid, signal.SIGKILL))
        process.wait()
    except ProcessLookupError:
        pass
    for pid in _our_workers(logs):
        _kill(lambda: os.kill(pid, signal.SIGKILL))


def _our_workers(logs: Path) -> List[int]:
    """The ranks that recorded their pid and still run."""
    pids = (int(path.read_text().strip() or 0) for path in logs.glob("worker_*.pid"))
    return [pid for pid in pids if pid and _is_our_worker(pid)]


def _kill(action: Callable[[], object]) -> None:
    try:
        action()
    except ProcessLookupError:
        pass


def _is_our_worker(pid: int) -> bool:
    """The pid still belongs to an ms_exp worker (pids are reused once a process ends)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return WORKER_MODULE in cmdline
