"""Render the launch of a distributed job as a LaunchPlan: msrun (the default), mpirun, or
one process per rank with a rank table, as ``parallel.launcher.style`` chooses.

Every rank runs ``python -m ms_exp.worker --run-dir <run dir>`` on the config the parent
saved (docs/design.md#one-process-composes). A plan is rendered from config alone, so what
is printed, saved as ``<run dir>/launch_command.sh`` and run (ms_exp/job/supervise.py) are
one and the same.
"""

import os
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from omegaconf import DictConfig, read_write

from ms_exp.parallel.launcher_config import MPIRUN, MSRUN, RANK_TABLE, launch_style, log_dir
from ms_exp.parallel.ranks import worker_argv

COMMAND_FILE = "launch_command.sh"
# MindSpore's mpirun guide: on Ascend, ranks started by mpirun must not see a rank table.
MPIRUN_UNSET = ("RANK_TABLE_FILE",)


@dataclass(frozen=True)
class LaunchProcess:
    """One process a launch starts: its command line as a user types it, the variables it
    adds to the launching environment and those it removes, and the file its output goes to
    (None: the launching process's console, which is copied to the run's console.log)."""

    argv: Tuple[str, ...]
    env: Dict[str, str] = field(default_factory=dict)
    unset: Tuple[str, ...] = ()
    log: Optional[Path] = None

    def shell_line(self, exported: Optional[Mapping[str, str]] = None) -> str:
        """The bash line that starts it (in the background when it has a log of its own)."""
        words = [
            f"{key}={shlex.quote(value)}"
            for key, value in self.env.items()
            if key not in (exported or {})
        ]
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

    def commands(self, remember_pids: bool = False) -> str:
        """The shell lines that start the processes: printed and tagged on the run. With
        ``remember_pids`` each background process's pid is kept in ``pids`` as it starts."""
        # Variables every process of a several-process plan sets alike are exported once.
        first, *rest = self.processes
        exported = {
            key: value
            for key, value in first.env.items()
            if rest and all(other.env.get(key) == value for other in rest)
        }
        unset = sorted({name for process in self.processes for name in process.unset})
        lines = [f"unset {' '.join(unset)}"] if unset else []
        if exported:
            lines.append(
                "export "
                + " ".join(f"{key}={shlex.quote(value)}" for key, value in exported.items())
            )
        for process in self.processes:
            lines.append(process.shell_line(exported))
            if remember_pids and process.log is not None:
                lines.append('pids+=("$!")')
        return "\n".join(lines)

    def script(self) -> str:
        lines = [
            "#!/usr/bin/env bash",
            f"# Started by ms_exp (parallel.launcher.style={self.style}); {self.note}.",
        ]
        background = any(process.log is not None for process in self.processes)
        if background:
            lines += [f"mkdir -p {shlex.quote(str(self.logs))}", "pids=()"]
        lines.append(self.commands(remember_pids=background))
        if background:
            # Wait for every rank by the pid it started with, and fail if one did: `jobs -p`
            # no longer lists a rank that has already exited, so its failure would be lost.
            lines += [
                "status=0",
                'for pid in "${pids[@]}"; do wait "$pid" || status=$?; done',
                "exit $status",
            ]
        return "\n".join(lines) + "\n"


def free_port() -> int:
    """A port nothing listens on now, on any address of this machine (so on the master
    address too, whatever it is), as the operating system hands it out:
    at random from its ephemeral range (Linux: 32768 to 60999 unless set otherwise), so
    jobs choosing at the same moment differ, and clear of the ports from 8118 up where
    MindSpore's CPU ranks listen for each other (docs/guides/distributed.md#ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def master_port(parallel_cfg: DictConfig) -> int:
    """The job's master port: the configured one, or a free one chosen now and kept on
    ``parallel_cfg`` so that what is printed, saved and run use the same."""
    launcher = parallel_cfg.launcher
    if launcher.master_port is None:
        with read_write(launcher):
            launcher.master_port = free_port()
    return launcher.master_port


def msrun_arguments(parallel_cfg: DictConfig, run_dir: Path) -> List[str]:
    """msrun's arguments and the worker command line, without the ``msrun`` itself."""
    launcher = parallel_cfg.launcher
    worker_num = launcher.worker_num or parallel_cfg.device_num
    local_worker_num = launcher.local_worker_num or worker_num
    return [
        f"--worker_num={worker_num}",
        f"--local_worker_num={local_worker_num}",
        f"--master_addr={launcher.master_addr}",
        f"--master_port={master_port(parallel_cfg)}",
        f"--node_rank={launcher.node_rank}",
        f"--log_dir={log_dir(parallel_cfg, run_dir)}",
        "--join=True",
        # With --join msrun copies the ranks' logs to its output: rank 0's alone keeps the
        # console readable (every rank's stays in its worker_<rank>.log).
        "--tail_worker_log=0",
        f"--cluster_time_out={launcher.cluster_time_out}",
        # msrun runs its task with the `python` found on PATH; launch() puts this
        # interpreter first there (docs/design.md#msrun-python-from-path).
        *worker_argv(run_dir),
    ]


def mpirun_arguments(parallel_cfg: DictConfig, run_dir: Path) -> List[str]:
    """mpirun's arguments and the worker command line, as MindSpore's mpirun guide gives
    them: one rank per device, each rank's output in ``<log_dir>/1/rank.<r>/stdout``."""
    return [
        "-n",
        str(parallel_cfg.device_num),
        *(["--allow-run-as-root"] if os.geteuid() == 0 else []),
        "--output-filename",
        str(log_dir(parallel_cfg, run_dir).resolve()),
        "--merge-stderr-to-stdout",
        *parallel_cfg.launcher.mpirun_args,
        *worker_argv(run_dir),
    ]


def launch_plan(parallel_cfg: DictConfig, run_dir: Path) -> LaunchPlan:
    style, logs = launch_style(parallel_cfg), log_dir(parallel_cfg, run_dir)
    if style == MSRUN:
        process = LaunchProcess(("msrun", *msrun_arguments(parallel_cfg, run_dir)))
        return LaunchPlan(MSRUN, (process,), logs, "run it on each node (set --node_rank per node)")
    if style == MPIRUN:
        argv = ("mpirun", *mpirun_arguments(parallel_cfg, run_dir))
        return LaunchPlan(
            MPIRUN,
            (LaunchProcess(argv, unset=MPIRUN_UNSET),),
            logs.resolve(),
            f"mpirun starts all {parallel_cfg.device_num} ranks",
        )
    # The training-flow tutorial's Ascend script: one process per rank on this server, all
    # with RANK_TABLE_FILE and RANK_SIZE, rank i with DEVICE_ID=START_ID+i and RANK_ID=i.
    launcher = parallel_cfg.launcher
    table = str(Path(launcher.rank_table_file).expanduser().resolve())
    size = parallel_cfg.device_num
    processes = tuple(
        LaunchProcess(
            tuple(worker_argv(run_dir)),
            {
                "RANK_TABLE_FILE": table,
                "RANK_SIZE": str(size),
                "DEVICE_ID": str(launcher.start_device_id + rank),
                "RANK_ID": str(rank),
            },
            log=logs.resolve() / f"worker_{rank}.log",
        )
        for rank in range(size)
    )
    return LaunchPlan(
        RANK_TABLE,
        processes,
        logs.resolve(),
        "one process per rank, as the training-flow tutorial's Ascend script",
    )


def save_command(parallel_cfg: DictConfig, run_dir: Path) -> str:
    """Write the launch as a bash script a user can run or copy; return its commands."""
    plan = launch_plan(parallel_cfg, run_dir)
    path = Path(run_dir) / COMMAND_FILE
    path.write_text(plan.script())
    path.chmod(0o755)
    return plan.commands()
