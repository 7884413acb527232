"""Start the ranks of a distributed job with msrun, MindSpore's own launcher.

The process the user started keeps Hydra, the run directory and the MLflow run; msrun
starts one ``python -m ms_exp.worker --run-dir <run dir>`` per rank, and every rank reads
the resolved config the parent wrote there (DESIGN.md, decision 2). The command is printed
and saved as ``<run dir>/msrun_command.sh`` so it can be copied to a cluster node.
"""
import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

WORKER_MODULE = "ms_exp.worker"
COMMAND_FILE = "msrun_command.sh"
# Lines of a failed rank's log shown to the user.
FAILURE_TAIL_LINES = 20


class WorkersFailed(RuntimeError):
    """msrun ended with an error; the message names the rank and quotes its log."""


def is_distributed(parallel_cfg) -> bool:
    return parallel_cfg.mode != "stand_alone"


def log_dir(parallel_cfg, run_dir: Path) -> Path:
    path = Path(parallel_cfg.launcher.log_dir).expanduser()
    return path if path.is_absolute() else Path(run_dir) / path


def msrun_arguments(parallel_cfg, run_dir: Path) -> List[str]:
    """msrun's arguments and the worker command line, without the ``msrun`` itself."""
    launcher = parallel_cfg.launcher
    worker_num = launcher.worker_num or parallel_cfg.device_num
    local_worker_num = launcher.local_worker_num or worker_num
    return [
        f"--worker_num={worker_num}",
        f"--local_worker_num={local_worker_num}",
        f"--master_addr={launcher.master_addr}",
        f"--master_port={launcher.master_port}",
        f"--node_rank={launcher.node_rank}",
        f"--log_dir={log_dir(parallel_cfg, run_dir)}",
        "--join=True",
        f"--cluster_time_out={launcher.cluster_time_out}",
        # msrun runs its task with the `python` found on PATH; launch() puts this
        # interpreter first there.
        "python", "-m", WORKER_MODULE, "--run-dir", str(Path(run_dir).resolve()),
    ]


def save_command(parallel_cfg, run_dir: Path) -> str:
    """Write the msrun line a user can copy to a cluster node; return it."""
    line = shlex.join(["msrun", *msrun_arguments(parallel_cfg, run_dir)])
    path = Path(run_dir) / COMMAND_FILE
    path.write_text("#!/usr/bin/env bash\n# Started by ms_exp; run it on each node "
                    "(set --node_rank per node).\n" + line + "\n")
    return line


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


_PR_SET_PDEATHSIG = 1
try:    # loaded here, not in the forked child, where dlopen could meet a lock held at fork
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies.

    msrun and its ranks run in sessions of their own (so one signal stops them all), so
    nothing else stops them when the launching process is killed outright (SIGKILL, out of
    memory): they would train on into a run directory a resumed job may be writing to. The
    launcher sets this for msrun, every rank and msrun's scheduler for themselves, so a
    SIGKILL of the launcher takes the whole tree; a resumed job then continues from the last
    checkpoint every rank holds. A thread polling the parent would not do: MindSpore's
    scheduler holds the GIL while it waits for the ranks."""
    prctl = getattr(_LIBC, "prctl", None)
    if prctl is None:
        return      # not Linux: the ranks outlive a killed launcher, as before
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGKILL)     # the parent died before we asked


def launch(parallel_cfg, run_dir: Path, env: Dict[str, str]) -> None:
    """Run msrun to completion; on Ctrl-C or SIGTERM stop every rank, then re-raise.

    msrun's output (its own lines and the ranks' logs it tails) is copied to this process's
    stdout, so it lands in the console and in the run's console.log, and read for the
    pid of a worker that died."""
    command = [sys.executable, "-m", "mindspore.parallel.cluster.run",
               *msrun_arguments(parallel_cfg, run_dir)]
    full_env = {**os.environ, **env,
                "PATH": f"{interpreter_path_dir(run_dir)}{os.pathsep}{os.environ.get('PATH', '')}"}
    # A session of its own, so that every rank can be stopped with one signal.
    process = subprocess.Popen(command, env=full_env, start_new_session=True,
                               preexec_fn=die_with_parent,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", bufsize=1)
    failed_pids: List[int] = []
    pump = threading.Thread(target=_copy_output, args=(process.stdout, failed_pids),
                            daemon=True)
    pump.start()
    try:
        returncode = process.wait()
    except BaseException:
        stop_ranks(process, log_dir(parallel_cfg, run_dir), parallel_cfg.launcher.join_timeout)
        raise
    finally:
        pump.join(timeout=5)
    if returncode != 0:
        logs = log_dir(parallel_cfg, run_dir)
        raise WorkersFailed(failure_report(logs, returncode, failed_pids))


def _copy_output(stream, failed_pids: List[int]) -> None:
    for line in stream:
        sys.stdout.write(line)
        match = _WORKER_DIED.search(line)
        if match:
            failed_pids.append(int(match.group(1)))
    sys.stdout.flush()


# msrun's own line when it sees a worker end badly (then it kills the other workers).
_WORKER_DIED = re.compile(r"Worker process (\d+) exit with exception")


def stop_ranks(process: subprocess.Popen, logs: Path, grace_seconds: int) -> None:
    """Stop msrun and every rank it started.

    The ranks first, with SIGTERM: each finishes its step, saves a checkpoint of it and
    exits (ms_exp/worker.py); msrun's own Ctrl-C handler would SIGKILL them mid-step. Then
    SIGINT to msrun, which kills what is left (its scheduler). Whatever is left after the
    grace periods is killed, msrun's group and every rank that recorded its pid."""
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
    return [pid for pid in pids if pid and _is_our_worker(pid, logs)]


def _kill(action) -> None:
    try:
        action()
    except ProcessLookupError:
        pass


def _is_our_worker(pid: int, logs: Path) -> bool:
    """The pid still belongs to an ms_exp worker (pids are reused once a process ends)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return WORKER_MODULE in cmdline


def pid_file(logs: Path, rank: int) -> Path:
    return logs / f"worker_{rank}.pid"


def record_worker_pid(logs: Path, rank: int) -> None:
    """Each rank notes its pid beside its log, so a rank that dies silently is named."""
    logs.mkdir(parents=True, exist_ok=True)
    pid_file(logs, rank).write_text(str(os.getpid()))


def failing_rank_log(logs: Path, failed_pids: List[int]) -> Optional[Path]:
    """The log of the rank that failed: one with a Python traceback, else the one whose
    worker msrun reported dead."""
    for log in sorted(logs.glob("worker_*.log")):
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            return log
    for pid_path in sorted(logs.glob("worker_*.pid")):
        if pid_path.read_text().strip() in {str(pid) for pid in failed_pids}:
            return pid_path.with_suffix(".log")
    return None


def failure_report(logs: Path, returncode: int, failed_pids: List[int] = ()) -> str:
    log = failing_rank_log(logs, list(failed_pids))
    if log is None or not log.is_file():
        return f"msrun exited with status {returncode}; worker logs are in {logs}"
    tail = log.read_text(errors="replace").splitlines()[-FAILURE_TAIL_LINES:]
    rank = log.stem.rsplit("_", 1)[-1]
    return (f"rank {rank} failed (msrun exit status {returncode}); last lines of {log}:\n"
            + "\n".join(tail))
