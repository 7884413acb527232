"""Launch styles (parallel.launcher.style): msrun, mpirun and the Ascend rank-table script of
the training-flow tutorial, each rendered from config into exact commands and environment,
saved as a runnable script, and started by ``launch``.

Fast: the launchers and the interpreter are stand-ins (scripts on PATH that record what
they were given) except in the one real mpirun run, which needs Open MPI's ``mpirun`` and
is skipped without it. The refusals of styles this machine cannot run are in
test_bad_inputs.py.
"""

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import skip_where_missing
from omegaconf import OmegaConf

from ms_exp.job.launch_plan import (
    COMMAND_FILE,
    LaunchProcess,
    launch_plan,
    mpirun_arguments,
    msrun_arguments,
    save_command,
)
from ms_exp.job.rank_failures import failure_report
from ms_exp.job.supervise import WorkersFailed, _copy_output, launch
from ms_exp.parallel.ranks import environment_device_id, environment_rank
from ms_exp.preflight.compose import compose_config, preflight

DP = "parallel=data"
MPIRUN = ("parallel.launcher.style=mpirun",)
RANK_TABLE = ("parallel.launcher.style=rank_table", "trainer.device_target=Ascend")


def write_rank_table(path: Path, devices: int) -> Path:
    """A rank table in MindSpore's format (hccl_<n>p_*.json), one server."""
    path.write_text(
        json.dumps(
            {
                "version": "1.0",
                "server_count": "1",
                "status": "completed",
                "server_list": [
                    {
                        "server_id": "10.0.0.1",
                        "device": [
                            {
                                "device_id": str(i),
                                "device_ip": f"192.168.100.{i + 1}",
                                "rank_id": str(i),
                            }
                            for i in range(devices)
                        ],
                    }
                ],
            }
        )
    )
    return path


def stand_in(folder: Path, name: str, body: str) -> Path:
    """An executable shell script ``folder/name``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# A rank: prints what it was started with; the rank named by FAIL_RANK fails with a
# traceback, the others then wait to be stopped (or HOLD seconds).
FAKE_RANK = """echo "argv=$*"
echo "RANK_TABLE_FILE=$RANK_TABLE_FILE RANK_SIZE=$RANK_SIZE" \
  "DEVICE_ID=$DEVICE_ID RANK_ID=$RANK_ID"
echo "MLFLOW_RUN_ID=$MLFLOW_RUN_ID"
if [ -n "$FAIL_RANK" ]; then
  if [ "$FAIL_RANK" = "$RANK_ID" ]; then
    echo "Traceback (most recent call last):"; echo "RuntimeError: rank $RANK_ID broke"; exit 3
  fi
  exec sleep "${HOLD:-60}"
fi
"""


# --- rendering ---------------------------------------------------------------------------


def test_msrun_is_the_default_and_renders_the_msrun_line(tmp_path):
    cfg = compose_config([DP])
    plan = launch_plan(cfg.parallel, tmp_path)
    assert plan.style == "msrun"
    port = cfg.parallel.launcher.master_port  # chosen free by the first rendering
    line = (
        "msrun",
        "--worker_num=2",
        "--local_worker_num=2",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        "--node_rank=-1",
        f"--log_dir={tmp_path}/log_output",
        "--join=True",
        "--tail_worker_log=0",
        "--cluster_time_out=600",
        "python",
        "-m",
        "ms_exp.worker",
        "--run-dir",
        str(tmp_path),
    )
    assert plan.processes == (LaunchProcess(line),)
    assert list(line[1:]) == msrun_arguments(cfg.parallel, tmp_path)
    assert save_command(cfg.parallel, tmp_path) == " ".join(line)
    assert (tmp_path / COMMAND_FILE).read_text() == (
        "#!/usr/bin/env bash\n"
        "# Started by ms_exp (parallel.launcher.style=msrun); run it on each node (set "
        "--node_rank per node).\n" + " ".join(line) + "\n"
    )
    assert os.access(tmp_path / COMMAND_FILE, os.X_OK)


@pytest.mark.parametrize("as_root", [True, False], ids=["root", "user"])
def test_mpirun_renders_mindspores_mpirun_line(as_root, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0 if as_root else 1000)
    cfg = compose_config([DP, *MPIRUN, "parallel.launcher.mpirun_args=[--bind-to,none]"])
    plan = launch_plan(cfg.parallel, tmp_path)
    line = (
        "mpirun",
        "-n",
        "2",
        *(["--allow-run-as-root"] if as_root else []),
        "--output-filename",
        f"{tmp_path}/log_output",
        "--merge-stderr-to-stdout",
        "--bind-to",
        "none",
        "python",
        "-m",
        "ms_exp.worker",
        "--run-dir",
        str(tmp_path),
    )
    # MindSpore's guide: ranks started by mpirun must not see a rank table.
    assert plan.processes == (LaunchProcess(line, unset=("RANK_TABLE_FILE",)),)
    assert plan.logs == tmp_path / "log_output"
    assert save_command(cfg.parallel, tmp_path) == "unset RANK_TABLE_FILE\n" + " ".join(line)
    assert (tmp_path / COMMAND_FILE).read_text() == (
        "#!/usr/bin/env bash\n"
        "# Started by ms_exp (parallel.launcher.style=mpirun); mpirun starts all 2 ranks.\n"
        "unset RANK_TABLE_FILE\n" + " ".join(line) + "\n"
    )


def test_rank_table_renders_the_tutorials_script_one_process_per_rank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative rank table is made absolute
    write_rank_table(tmp_path / "hccl_4p.json", 4)
    cfg = compose_config(
        [
            DP,
            "parallel.device_num=4",
            *RANK_TABLE,
            "parallel.launcher.rank_table_file=hccl_4p.json",
            "parallel.launcher.start_device_id=4",
        ]
    )
    run = tmp_path / "run"
    plan = launch_plan(cfg.parallel, run)
    worker = ("python", "-m", "ms_exp.worker", "--run-dir", str(run))
    table = str(tmp_path / "hccl_4p.json")
    assert plan.processes == tuple(
        LaunchProcess(
            worker,
            {
                "RANK_TABLE_FILE": table,
                "RANK_SIZE": "4",
                "DEVICE_ID": str(4 + rank),
                "RANK_ID": str(rank),
            },
            log=run / "log_output" / f"worker_{rank}.log",
        )
        for rank in range(4)
    )
    run.mkdir()
    starts = [
        f"DEVICE_ID={4 + rank} RANK_ID={rank} python -m ms_exp.worker --run-dir {run} "
        f"> {run}/log_output/worker_{rank}.log 2>&1 &"
        for rank in range(4)
    ]
    export = f"export RANK_TABLE_FILE={table} RANK_SIZE=4"
    assert save_command(cfg.parallel, run) == "\n".join([export, *starts])
    assert (run / COMMAND_FILE).read_text() == "\n".join(
        [
            "#!/usr/bin/env bash",
            "# Started by ms_exp (parallel.launcher.style=rank_table); one process per rank, as "
            "the training-flow tutorial's Ascend script.",
            f"mkdir -p {run}/log_output",
            "pids=()",
            export,
            *(line for start in starts for line in (start, 'pids+=("$!")')),
            "status=0",
            'for pid in "${pids[@]}"; do wait "$pid" || status=$?; done',
            "exit $status",
        ]
    ) + "\n"


def test_the_saved_script_fails_when_a_rank_failed_before_it_waited(tmp_path):
    """A rank that exits at once is no longer in `jobs -p` when the script waits: the script
    waits on the pids it started instead, so the failure is its exit status."""
    from ms_exp.job.launch_plan import LaunchPlan

    ranks = tuple(
        LaunchProcess(("bash", "-c", command), {}, log=tmp_path / f"{rank}.log")
        for rank, command in enumerate(("exit 3", "sleep 0.5"))
    )
    script = tmp_path / "launch.sh"
    script.write_text(LaunchPlan("rank_table", ranks, tmp_path, "two ranks").script())
    assert subprocess.run(["bash", str(script)]).returncode == 3


def test_rendered_values_are_quoted_for_bash(tmp_path):
    process = LaunchProcess(
        ("python", "-c", "print('a b')"),
        {"RANK_TABLE_FILE": "/a b/t.json"},
        log=tmp_path / "x y.log",
    )
    assert shlex.split(process.shell_line()) == [
        "RANK_TABLE_FILE=/a b/t.json",
        "python",
        "-c",
        "print('a b')",
        ">",
        f"{tmp_path}/x y.log",
        "2>&1",
        "&",
    ]


# --- the saved scripts run ---------------------------------------------------------------


@pytest.mark.distributed
def test_saved_rank_table_script_starts_every_rank_with_its_environment(tmp_path):
    write_rank_table(tmp_path / "hccl_2p.json", 2)
    cfg = compose_config(
        [
            DP,
            *RANK_TABLE,
            f"parallel.launcher.rank_table_file={tmp_path}/hccl_2p.json",
            "parallel.launcher.start_device_id=6",
        ]
    )
    save_command(cfg.parallel, tmp_path)
    stand_in(tmp_path / "bin", "python", FAKE_RANK)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    for name in ("FAIL_RANK", "HOLD"):
        env.pop(name, None)
    script = str(tmp_path / COMMAND_FILE)
    subprocess.run(["bash", script], env=env, check=True, timeout=30)
    for rank in (0, 1):
        log = (tmp_path / "log_output" / f"worker_{rank}.log").read_text().splitlines()
        assert log[:2] == [
            f"argv=-m ms_exp.worker --run-dir {tmp_path}",
            f"RANK_TABLE_FILE={tmp_path}/hccl_2p.json RANK_SIZE=2 "
            f"DEVICE_ID={6 + rank} RANK_ID={rank}",
        ]
    # A rank that fails fails the script (the other one is left to its fate, as in the
    # tutorial's script; ms_exp's own launch stops it: below).
    failed = subprocess.run(
        ["bash", script], env={**env, "FAIL_RANK": "0", "HOLD": "0"}, timeout=30
    )
    assert failed.returncode == 3


def test_saved_mpirun_script_hands_mpirun_its_arguments_and_no_rank_table(tmp_path):
    cfg = compose_config([DP, *MPIRUN])
    save_command(cfg.parallel, tmp_path)
    stand_in(
        tmp_path / "bin",
        "mpirun",
        'printf "%s\\n" "$@" > "$ARGV_FILE"; echo "RANK_TABLE_FILE=$RANK_TABLE_FILE" '
        '>> "$ARGV_FILE"\n',
    )
    argv_file = tmp_path / "argv"
    subprocess.run(
        ["bash", str(tmp_path / COMMAND_FILE)],
        check=True,
        timeout=30,
        env={
            **os.environ,
            "ARGV_FILE": str(argv_file),
            "RANK_TABLE_FILE": "/x.json",
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        },
    )
    assert argv_file.read_text().splitlines() == [
        *mpirun_arguments(cfg.parallel, tmp_path),
        "RANK_TABLE_FILE=",
    ]


# --- launch() runs the plan --------------------------------------------------------------


@pytest.mark.distributed
def test_launch_starts_each_rank_of_a_rank_table_itself(tmp_path, monkeypatch, capsys):
    write_rank_table(tmp_path / "hccl_2p.json", 2)
    cfg = compose_config(
        [DP, *RANK_TABLE, f"parallel.launcher.rank_table_file={tmp_path}/hccl_2p.json"]
    )
    monkeypatch.delenv("FAIL_RANK", raising=False)
    monkeypatch.setenv("RANK_TABLE_FILE", "/elsewhere.json")  # the plan's wins
    monkeypatch.setattr(sys, "executable", str(stand_in(tmp_path / "bin", "python3", FAKE_RANK)))
    launch(cfg.parallel, tmp_path, {"MLFLOW_RUN_ID": "abc"})
    for rank in (0, 1):
        log = (tmp_path / "log_output" / f"worker_{rank}.log").read_text().splitlines()
        assert log == [
            f"argv=-m ms_exp.worker --run-dir {tmp_path}",
            f"RANK_TABLE_FILE={tmp_path}/hccl_2p.json RANK_SIZE=2 DEVICE_ID={rank} RANK_ID={rank}",
            "MLFLOW_RUN_ID=abc",
        ]
    # Rank 0's output is also on the console (and so in the run's console.log).
    assert "DEVICE_ID=0 RANK_ID=0" in capsys.readouterr().out


@pytest.mark.distributed
def test_a_failed_rank_table_rank_stops_the_others_and_is_named(tmp_path, monkeypatch):
    write_rank_table(tmp_path / "hccl_2p.json", 2)
    cfg = compose_config(
        [
            DP,
            *RANK_TABLE,
            "parallel.launcher.join_timeout=1",
            f"parallel.launcher.rank_table_file={tmp_path}/hccl_2p.json",
        ]
    )
    monkeypatch.setattr(sys, "executable", str(stand_in(tmp_path / "bin", "python3", FAKE_RANK)))
    started = time.monotonic()
    with pytest.raises(WorkersFailed) as failed:
        launch(cfg.parallel, tmp_path, {"FAIL_RANK": "1"})
    assert time.monotonic() - started < 15  # rank 0 (sleeping 60 s) was stopped
    log = tmp_path / "log_output" / "worker_1.log"
    assert str(failed.value).startswith(f"rank 1 failed (exit status 3); last lines of {log}:\n")
    assert str(failed.value).endswith("RuntimeError: rank 1 broke")


# Marked distributed as the rank-table launches above: its stand-in mpirun is handed
# "python -m ms_exp.worker", which conftest's lane guard takes for a job start.
@pytest.mark.distributed
def test_launch_runs_mpirun_with_this_interpreter_and_no_rank_table(tmp_path, monkeypatch):
    cfg = compose_config([DP, *MPIRUN])
    argv_file = tmp_path / "argv"
    stand_in(
        tmp_path / "bin",
        "mpirun",
        'printf "%s\\n" "$@" > "$ARGV_FILE"\n'
        'echo "RANK_TABLE_FILE=$RANK_TABLE_FILE MLFLOW_RUN_ID=$MLFLOW_RUN_ID" '
        '>> "$ARGV_FILE"\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RANK_TABLE_FILE", "/x.json")
    launch(cfg.parallel, tmp_path, {"ARGV_FILE": str(argv_file), "MLFLOW_RUN_ID": "abc"})
    expected = [
        sys.executable if arg == "python" else arg
        for arg in mpirun_arguments(cfg.parallel, tmp_path)
    ]
    assert argv_file.read_text().splitlines() == [*expected, "RANK_TABLE_FILE= MLFLOW_RUN_ID=abc"]


def test_failure_report_finds_the_rank_in_mpiruns_log_layout(tmp_path):
    for rank in (0, 1):
        log = tmp_path / "1" / f"rank.{rank}" / "stdout"
        log.parent.mkdir(parents=True)
        log.write_text(
            "training\n" if rank == 0 else "Traceback (most recent call last):\nValueError: bad\n"
        )
    assert failure_report(tmp_path, 1, launcher="mpirun") == (
        f"rank 1 failed (mpirun exit status 1); last lines of {tmp_path}/1/rank.1/stdout:\n"
        "Traceback (most recent call last):\nValueError: bad"
    )


# msrun's output when rank 1 (pid 101) is killed with SIGKILL, as measured with MindSpore
# 2.10 (abridged): rank 0's last lines, then msrun's own and its scheduler's tracebacks.
MSRUN_AFTER_A_KILL = """epoch: 1 step: 22, loss is 2.2871897220611572
[WARNING] DISTRIBUTED(5843,7f8,python):2026-11-26-03:23:50.502.564 [mindspore/ccsrc/cluster/\
rpc/core/communicator/tcp_client.cc:346] EventCallbackInner] Client connected end of file! \
Peer Worker ip: 127.0.0.1, port: 8374
[ERROR] ME(5807:1405,MainProcess):2026-11-26-03:23:51.172.000 [mindspore/parallel/cluster/\
process_entity/_api.py:365] Worker process 101 exit with exception. Error code: -9.
[WARNING] ME(5807:1405,MainProcess):2026-11-26-03:23:51.172.000 [mindspore/parallel/cluster/\
process_entity/_api.py:370] There's worker exits with exception, kill all other workers.
[ERROR] ME(5807:1405,MainProcess):2026-11-26-03:24:21.648.000 [mindspore/parallel/cluster/\
process_entity/_api.py:385] Scheduler process 100 exit with exception.
Traceback (most recent call last):
  File "/work/ms_exp/worker.py", line 111, in <module>
RuntimeError: The total number of timed out node is 1.
Traceback (most recent call last):
  File "mindspore/parallel/cluster/run.py", line 265, in <module>
RuntimeError: Distributed job exited with exception.
"""


def test_a_rank_killed_by_a_signal_is_named_in_one_line_and_the_rest_stays_in_the_logs(
    tmp_path, capsys
):
    logs = tmp_path / "log_output"
    logs.mkdir()
    for rank, pid in ((0, 102), (1, 101)):
        (logs / f"worker_{rank}.pid").write_text(f"{pid}\n")
    (logs / "worker_1.log").write_text("epoch: 1 step: 22, loss is 2.29\n")
    # Rank 0's own traceback of losing rank 1 does not make it the rank that failed.
    (logs / "worker_0.log").write_text(
        "Traceback (most recent call last):\nRuntimeError: peer lost\n"
    )
    failed = {}
    _copy_output(io.StringIO(MSRUN_AFTER_A_KILL), failed, logs, "msrun")
    assert capsys.readouterr().out == (
        "epoch: 1 step: 22, loss is 2.2871897220611572\n"
        "ms_exp: rank 1 (pid 101) was killed by SIGKILL; msrun is stopping the other ranks\n"
    )
    assert (logs / "launcher.log").read_text() == MSRUN_AFTER_A_KILL
    assert failure_report(logs, 1, failed, "msrun", "continue the run with trainer.resume=/r") == (
        f"rank 1 (pid 101) was killed by SIGKILL (msrun exit status 1); its output is in "
        f"{logs}/worker_1.log, msrun's and its scheduler's in {logs}/launcher.log; "
        "continue the run with trainer.resume=/r"
    )


def test_after_a_kill_the_hint_says_resume_only_when_every_rank_saved_a_checkpoint(tmp_path):
    from ms_exp.job.distributed import resume_hint

    cfg = compose_config(["parallel=data"])
    (tmp_path / "checkpoints/rank_0").mkdir(parents=True)
    (tmp_path / "checkpoints/rank_0/checkpoint-1_5.ckpt").write_bytes(b"")
    assert resume_hint(cfg, tmp_path) == ("not every rank had saved a checkpoint yet: run it again")
    (tmp_path / "checkpoints/rank_1").mkdir()
    (tmp_path / "checkpoints/rank_1/checkpoint-1_5.ckpt").write_bytes(b"")
    assert resume_hint(cfg, tmp_path) == f"continue the run with trainer.resume={tmp_path}"
    assert resume_hint(compose_config(["parallel=data", "checkpoint=none"]), tmp_path) == (
        "run it again (this config saves no checkpoint a run can continue from)"
    )


# --- what the ranks read from their launcher ---------------------------------------------


def test_ranks_honour_the_rank_and_device_their_launcher_set():
    # mpirun's own variable first: a RANK_ID left in the shell must not rename every rank.
    assert environment_rank({"OMPI_COMM_WORLD_RANK": "3", "RANK_ID": "1"}) == 3
    assert environment_rank({"RANK_ID": "1"}) == 1
    assert environment_rank({}) is None
    # DEVICE_ID (msrun: the local rank; rank table: START_ID + rank) over trainer.device_id.
    assert environment_device_id(2, {"DEVICE_ID": "5"}) == 5
    assert environment_device_id(2, {}) == 2


# --- preflight accepts what can run ------------------------------------------------------


def test_preflight_accepts_a_rank_table_on_ascend_and_mpirun_on_gpu(tmp_path, monkeypatch):
    # As on a node that has both (this one has neither: test_first_contact refuses them).
    monkeypatch.setattr(
        "ms_exp.preflight.device.available_targets", lambda: ("CPU", "GPU", "Ascend")
    )
    table = write_rank_table(tmp_path / "hccl_2p.json", 2)
    (cfg,) = preflight(
        [
            DP,
            *RANK_TABLE,
            f"parallel.launcher.rank_table_file={table}",
            f"hydra.run.dir={tmp_path}/out",
        ]
    )
    assert cfg.parallel.launcher.style.value == "rank_table"
    stand_in(tmp_path / "bin", "mpirun", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (cfg,) = preflight([DP, *MPIRUN, "trainer.device_target=GPU", f"hydra.run.dir={tmp_path}/out"])
    assert cfg.parallel.launcher.style.value == "mpirun"
    assert not (tmp_path / "out").exists()


# --- the real thing ----------------------------------------------------------------------


@pytest.mark.distributed
def test_real_mpirun_starts_both_ranks_and_each_refuses_cpu_before_mindspore_fails_to_join(
    tmp_path,
):
    """Why style=mpirun on CPU is refused (measured with MindSpore 2.10): under Open MPI's
    mpirun, MindSpore's own ``init()`` on CPU fails on its device side; a config.yaml that
    asks for it anyway reaches both ranks, and each refuses it in one line before MindSpore
    starts. .ci/run installs openmpi-bin, so CI runs this; elsewhere it needs mpirun."""
    if shutil.which("mpirun") is None:
        skip_where_missing("Open MPI's mpirun is not on PATH (apt-get install openmpi-bin)")
    as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    join = "import mindspore as ms; ms.set_device('CPU'); ms.communication.init()"
    bare = subprocess.run(
        ["mpirun", *as_root, "-n", "2", sys.executable, "-c", join],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bare.returncode != 0
    device_side = "Failed to initialize communication library on device side"
    assert (bare.stdout + bare.stderr).count(device_side) == 2  # once per rank

    run = tmp_path / "run"
    run.mkdir()
    cfg = compose_config(
        [
            DP,
            *MPIRUN,
            "tracking.enabled=false",
            "trainer.epochs=1",
            f"checkpoint.strategy.save_file={run}/strategy.ckpt",
        ]
    )
    OmegaConf.save(cfg, run / "config.yaml", resolve=True)
    with pytest.raises(WorkersFailed) as failed:
        launch(cfg.parallel, run, {})
    logs = run / "log_output"
    assert str(failed.value) == f"mpirun exited with status 2; worker logs are in {logs}"
    for rank in (0, 1):
        (line,) = (logs / "1" / f"rank.{rank}" / "stdout").read_text().splitlines()
        assert line.startswith(f"ms_exp.worker: error: {run / 'config.yaml'}: ")
        assert (
            "parallel.launcher.style='mpirun': not allowed; expected trainer.device_target" in line
        )
