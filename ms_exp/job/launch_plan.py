"""Start the ranks of a distributed job: with msrun (MindSpore's own launcher, the
default), mpirun (Open MPI), or one process per rank with a rank table (the Ascend script of
the training-flow tutorial); ``parallel.launcher.style`` chooses.

The process the user started keeps Hydra, the run directory and the MLflow run; every rank
runs ``python -m ms_exp.worker --run-dir <run dir>`` and reads the resolved config the
parent wrote there (DESIGN.md, decision 2). Each style is rendered from config into a
LaunchPlan, the exact commands and environment of the processes it starts; the plan is
printed, saved as the bash script ``<run dir>/launch_command.sh`` (to run again or copy to
a cluster node) and run by ``launch``.
"""
import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

WORKER_MODULE = "ms_exp.worker"
COMMAND_FILE = "launch_command.sh"
# Lines of a failed rank's log shown to the user.
FAILURE_TAIL_LINES = 20
MSRUN, MPIRUN, RANK_TABLE = "msrun", "mpirun", "rank_table"
# MindSpore's mpirun guide: on Ascend, ranks started by mpirun must not see a rank table.
MPIRUN_UNSET = ("RANK_TABLE_FILE",)
# Where the ranks learn who they are: mpirun sets Open MPI's variable, msrun and the
# rank-table script RANK_ID (and DEVICE_ID, which HCCL and ms_exp.context read).
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "RANK_ID")


class WorkersFailed(RuntimeError):
    """A rank ended with an error; the message names the rank and quotes its log."""


def is_distributed(parallel_cfg) -> bool:
    return parallel_cfg.mode != "stand_alone"


def launch_style(parallel_cfg) -> str:
    style = parallel_cfg.launcher.style
    return getattr(style, "value", style)


def log_dir(parallel_cfg, run_dir: Path) -> Path:
    path = Path(parallel_cfg.launcher.log_dir).expanduser()
    return path if path.is_absolute() else Path(run_dir) / path


def worker_argv(run_dir: Path) -> List[str]:
    """One rank's command line; ``python`` is the launching interpreter when ms_exp runs it."""
    return ["python", "-m", WORKER_MODULE, "--run-dir", str(Path(run_dir).resolve())]


@dataclass(frozen=True)
class LaunchProcess:
    """One process a launch starts: its command line as a user types it, the variables it
    adds to the launching environment and those it removes, and the file its output goes to
    (None: the launching process's console, which is copied to the run's console.log)."""

    argv: Tuple[str, ...]
    env: Dict[str, str] = field(default_factory=dict)
    unset: Tuple[str, ...] = ()
    log: Optional[Path] = None

    def shell_line(self, exported: Mapping[str, str] = None) -> str:
        """The bash line that starts it (in the background when it has a log of its own)."""
        words = [f"{key}={shlex.quote(value)}" for key, value in self.env.items()
                 if key not in (exported or {})]
        line = " ".join([*words, shlex.join(self.argv)])
        if self.log is not None:
            line += f" > {shlex.quote(str(self.log))} 2>&1 &"
        return line


@dataclass(frozen=True)
class LaunchPlan:
    """What ``launch`` runs for one style, and what ``launch_command.sh`` says."""

    style: str
    processes: Tuple[LaunchProcess, ...]
    logs: Path  # the ranks' logs (and pid files)
    note: str  # what the saved script is for

    def exported(self) -> Dict[str, str]:
        """Variables every process of a several-process plan sets alike (exported once)."""
        if len(self.processes) < 2:
            return {}
        first, *rest = self.processes
        return {key: value for key, value in first.env.items()
                if all(other.env.get(key) == value for other in rest)}

    def commands(self) -> str:
        """The shell lines that start the processes: printed and tagged on the run."""
        exported = self.exported()
        unset = sorted({name for process in self.processes for name in process.unset})
        lines = [f"unset {' '.join(unset)}"] if unset else []
        if exported:
            lines.append("export " + " ".join(f"{key}={shlex.quote(value)}"
                                              for key, value in exported.items()))
        lines += [process.shell_line(exported) for process in self.processes]
        return "\n".join(lines)

    def script(self) -> str:
        lines = ["#!/usr/bin/env bash",
                 f"# Started by ms_exp (parallel.launcher.style={self.style}); {self.note}."]
        background = any(process.log is not None for process in self.processes)
        if background:
            lines.append(f"mkdir -p {shlex.quote(str(self.logs))}")
        lines.append(self.commands())
        if background:  # wait for every rank; fail if one did
            lines += ["status=0", 'for pid in $(jobs -p); do wait "$pid" || status=$?; done',
                      "exit $status"]
        return "\n".join(lines) + "\n"


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
        *worker_argv(run_dir),
    ]


def msrun_plan(parallel_cfg, run_dir: Path) -> LaunchPlan:
    process = LaunchProcess(("msrun", *msrun_arguments(parallel_cfg, run_dir)))
    return LaunchPlan(MSRUN, (process,), log_dir(parallel_cfg, run_dir),
                      "run it on each node (set --node_rank per node)")


def mpirun_arguments(parallel_cfg, run_dir: Path,
                     as_root: Optional[bool] = None) -> List[str]:
    """mpirun's arguments and the worker command line, as MindSpore's mpirun guide gives
    them: one rank per device, each rank's output in ``<log_dir>/1/rank.<r>/stdout``."""
    if as_root is None:
        as_root = os.geteuid() == 0
    return ["-n", str(parallel_cfg.device_num),
            *(["--allow-run-as-root"] if as_root else []),
            "--output-filename", str(log_dir(parallel_cfg, run_dir).resolve()),
            "--merge-stderr-to-stdout",
            *parallel_cfg.launcher.mpirun_args,
            *worker_argv(run_dir)]


def mpirun_plan(parallel_cfg, run_dir: Path) -> LaunchPlan:
    process = LaunchProcess(("mpirun", *mpirun_arguments(parallel_cfg, run_dir)),
                            unset=MPIRUN_UNSET)
    return LaunchPlan(MPIRUN, (process,), log_dir(parallel_cfg, run_dir).resolve(),
                      f"mpirun starts all {parallel_cfg.device_num} ranks")


def rank_table_plan(parallel_cfg, run_dir: Path) -> LaunchPlan:
    """The training-flow tutorial's Ascend script: one process per rank on this server, all
    with RANK_TABLE_FILE and RANK_SIZE, rank i with DEVICE_ID=START_ID+i and RANK_ID=i."""
    launcher = parallel_cfg.launcher
    table = str(Path(launcher.rank_table_file).expanduser().resolve())
    logs = log_dir(parallel_cfg, run_dir).resolve()
    size = parallel_cfg.device_num
    processes = tuple(
        LaunchProcess(tuple(worker_argv(run_dir)),
                      {"RANK_TABLE_FILE": table, "RANK_SIZE": str(size),
                       "DEVICE_ID": str(launcher.start_device_id + rank),
                       "RANK_ID": str(rank)},
                      log=logs / f"worker_{rank}.log")
        for rank in range(size))
    return LaunchPlan(RANK_TABLE, processes, logs,
                      "one process per rank, as the training-flow tutorial's Ascend script")


PLANS = {MSRUN: msrun_plan, MPIRUN: mpirun_plan, RANK_TABLE: rank_table_plan}


def launch_plan(parallel_cfg, run_dir: Path) -> LaunchPlan:
    return PLANS[launch_style(parallel_cfg)](parallel_cfg, run_dir)


def save_command(parallel_cfg, run_dir: Path) -> str:
    """Write the launch as a bash script a user can run or copy; return its commands."""
    plan = launch_plan(parallel_cfg, run_dir)
    path = Path(run_dir) / COMMAND_FILE
    path.write_text(plan.script())
    path.chmod(0o755)
    return plan.commands()


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
    """Run the job's launch plan to completion; on Ctrl-C or SIGTERM stop every rank, then
    re-raise. ``env``: variables for every rank on top of the plan's (MLflow's)."""
    plan = launch_plan(parallel_cfg, run_dir)
    grace = parallel_cfg.launcher.join_timeout
    if plan.style == RANK_TABLE:
        _run_each_rank(plan, env, grace)
    else:
        _run_launcher(plan, run_dir, env, grace)


def environment(process: LaunchProcess, env: Mapping[str, str]) -> Dict[str, str]:
    """The launching environment, less what the process unsets, plus ``env`` and its own."""
    full = {key: value for key, value in os.environ.items() if key not in process.unset}
    return {**full, **env, **process.env}


def with_this_interpreter(argv: Tuple[str, ...]) -> List[str]:
    """The command line with the worker's ``python`` replaced by this interpreter."""
    argv = list(argv)
    for index in range(len(argv) - 2):
        if argv[index:index + 3] == ["python", "-m", WORKER_MODULE]:
            argv[index] = sys.executable
    return argv


def _run_launcher(plan: LaunchPlan, run_dir: Path, env: Mapping[str, str],
                  grace: int) -> None:
    """msrun or mpirun, which start the ranks themselves.

    Their output (their own lines and the ranks' output they copy) is copied to this
    process's stdout, so it lands in the console and in the run's console.log, and read
    for the pid of a worker that died."""
    (spec,) = plan.processes
    full_env = environment(spec, env)
    if plan.style == MSRUN:
        # msrun runs the `python` on PATH: this interpreter's.
        command = [sys.executable, "-m", "mindspore.parallel.cluster.run", *spec.argv[1:]]
        full_env["PATH"] = f"{interpreter_path_dir(run_dir)}{os.pathsep}" \
                           f"{os.environ.get('PATH', '')}"
    else:
        command = [shutil.which(spec.argv[0]) or spec.argv[0],
                   *with_this_interpreter(spec.argv[1:])]
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
        stop_ranks(process, plan.logs, grace)
        raise
    finally:
        pump.join(timeout=5)
    if returncode != 0:
        raise WorkersFailed(failure_report(plan.logs, returncode, failed_pids, plan.style))


def _run_each_rank(plan: LaunchPlan, env: Mapping[str, str], grace: int) -> None:
    """The rank-table style: this process starts every rank, as the tutorial's script does.

    Each rank's output goes to its own log; rank 0's is also copied to the console. When a
    rank fails the others get ``grace`` seconds to finish, then are stopped."""
    plan.logs.mkdir(parents=True, exist_ok=True)
    ranks: List[subprocess.Popen] = []
    pumps: List[threading.Thread] = []
    try:
        for rank, spec in enumerate(plan.processes):
            process = subprocess.Popen(with_this_interpreter(spec.argv),
                                       env=environment(spec, env), start_new_session=True,
                                       preexec_fn=die_with_parent, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, errors="replace",
                                       bufsize=1)
            ranks.append(process)
            pump = threading.Thread(target=_write_log, args=(process.stdout, spec.log,
                                                             rank == 0), daemon=True)
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
        raise WorkersFailed(failure_report(plan.logs, failed.returncode, [failed.pid], None))


def _write_log(stream, log: Path, to_console: bool) -> None:
    with open(log, "w") as out:
        for line in stream:
            out.write(line)
            out.flush()
            if to_console:
                sys.stdout.write(line)
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


def forget_worker_pid(logs: Path, rank: int) -> None:
    """Remove the pid file of ``rank`` if this process wrote it."""
    path = pid_file(logs, rank)
    if path.is_file() and path.read_text().strip() == str(os.getpid()):
        path.unlink()


def failing_rank_log(logs: Path, failed_pids: List[int]) -> Optional[Tuple[int, Path]]:
    """The rank that failed and its log: one with a Python traceback, else the one whose
    worker the launcher reported dead."""
    ranks = rank_logs(logs)
    for rank, log in ranks.items():
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            return rank, log
    for pid_path in sorted(logs.glob("worker_*.pid")):
        rank = pid_path.stem.rsplit("_", 1)[-1]
        if pid_path.read_text().strip() in {str(pid) for pid in failed_pids} \
                and rank.isdigit() and int(rank) in ranks:
            return int(rank), ranks[int(rank)]
    return None


def failure_report(logs: Path, returncode: int, failed_pids: List[int] = (),
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
