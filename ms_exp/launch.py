"""Start the ranks of a distributed job with msrun, MindSpore's own launcher.

The process the user started keeps Hydra, the run directory and the MLflow run; msrun
starts one ``python -m ms_exp.worker --run-dir <run dir>`` per rank, and every rank reads
the resolved config the parent wrote there (DESIGN.md, decision 2). The command is printed
and saved as ``<run dir>/msrun_command.sh`` so it can be copied to a cluster node.
"""
import os
import shlex
import signal
import subprocess
import sys
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


def launch(parallel_cfg, run_dir: Path, env: Dict[str, str]) -> None:
    """Run msrun to completion; on Ctrl-C or SIGTERM stop every rank, then re-raise."""
    command = [sys.executable, "-m", "mindspore.parallel.cluster.run",
               *msrun_arguments(parallel_cfg, run_dir)]
    full_env = {**os.environ, **env,
                "PATH": f"{interpreter_path_dir(run_dir)}{os.pathsep}{os.environ.get('PATH', '')}"}
    # A session of its own, so that every rank can be stopped with one signal.
    process = subprocess.Popen(command, env=full_env, start_new_session=True)
    try:
        returncode = process.wait()
    except BaseException:
        stop_process_group(process, parallel_cfg.launcher.join_timeout)
        raise
    if returncode != 0:
        raise WorkersFailed(failure_report(log_dir(parallel_cfg, run_dir), returncode))


def stop_process_group(process: subprocess.Popen, grace_seconds: int) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_seconds)
            return
        except subprocess.TimeoutExpired:
            continue


def failing_rank_log(logs: Path) -> Optional[Path]:
    """The worker log that holds a Python traceback or a MindSpore error, if any."""
    for log in sorted(logs.glob("worker_*.log")):
        text = log.read_text(errors="replace")
        if "Traceback (most recent call last)" in text or "Error:" in text:
            return log
    return None


def failure_report(logs: Path, returncode: int) -> str:
    log = failing_rank_log(logs)
    if log is None:
        return f"msrun exited with status {returncode}; worker logs are in {logs}"
    tail = log.read_text(errors="replace").splitlines()[-FAILURE_TAIL_LINES:]
    rank = log.stem.rsplit("_", 1)[-1]
    return (f"rank {rank} failed (msrun exit status {returncode}); last lines of {log}:\n"
            + "\n".join(tail))
