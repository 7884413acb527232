"""Distributed jobs: msrun started by the entrypoint, one run for all ranks, real data
parallel on CPU, parallel=auto on CPU, master ports chosen per job, multi-node, failures and
interruption."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from conftest import (
    FAST,
    CliResult,
    assert_same_training_state,
    differences,
    free_port,
    main_in_process,
    migrated_store,
    train,
)
from mlflow import MlflowClient

from ms_exp.job.launch_plan import COMMAND_FILE, msrun_arguments
from ms_exp.parallel.checks import port_is_free
from ms_exp.preflight.compose import compose_config

DP = ("parallel=data", "dataset.shuffle=false")
ERROR = "ms_exp: error: "


def weights(path):
    import mindspore as ms

    return {
        k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items() if k.startswith("layer")
    }


def whole(dev_matrix, tensor_map) -> bool:
    """No tensor dim is split: each maps to nothing (-1) or to a device dim of size 1."""
    return all(m == -1 or dev_matrix[-m - 1] == 1 for m in tensor_map)


def saved_port(run_dir: Path) -> int:
    line = (run_dir / COMMAND_FILE).read_text().splitlines()[-1].split()
    return int(next(a for a in line if a.startswith("--master_port=")).split("=")[1])


def _listening_ports(cwd: Path) -> set:
    """TCP ports the processes working in ``cwd`` (the job, msrun, its scheduler and
    ranks) listen on."""
    pids = set()
    for process in psutil.process_iter(["cwd"]):
        if process.info["cwd"] == str(cwd):
            pids.add(process.pid)
    return {
        c.laddr.port
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    }


def _port_in_use(cwd: Path):
    """The master port the job in ``cwd`` chose, once its scheduler listens on it."""
    for command_file in (cwd / "outputs").glob(f"*/*/{COMMAND_FILE}"):
        try:
            port = saved_port(command_file.parent)
        except (StopIteration, IndexError, ValueError):
            return None  # being written
        return None if port_is_free("127.0.0.1", port) else port
    return None


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """Two distributed jobs started at once, neither naming a master port: the
    data-parallel run most tests below read (no shuffling, so that it can be compared with
    a stand-alone run; its MLflow models logged) and a parallel=auto run on 2 ranks. While
    both train, the ports each job's processes listen on are sampled, and a third job
    naming the port the data-parallel run's scheduler holds is refused (``main()`` in this
    process: the refusal comes before anything starts)."""
    root = tmp_path_factory.mktemp("side_by_side")
    jobs = {
        "dp": (*DP, "trainer.epochs=1", "tracking.log_models=true"),
        "auto": ("parallel=auto", "parallel.device_num=2", "checkpoint=sliced", "trainer.epochs=1"),
    }
    started = {}
    for name, overrides in jobs.items():
        cwd = root / name
        cwd.mkdir()
        shutil.copyfile(migrated_store(), cwd / "mlflow.db")
        with open(cwd / "stdout.txt", "w") as out, open(cwd / "stderr.txt", "w") as err:
            started[name] = subprocess.Popen(
                [sys.executable, "-m", "ms_exp.run", *FAST, *overrides],
                cwd=cwd,
                stdout=out,
                stderr=err,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
    cwds = [root / name for name in jobs]
    # Both jobs at once, each with its scheduler and both ranks listening: the first sample
    # where they are is kept (and the last, to show when there is none).
    seen, last, refused = None, [set(), set()], None
    deadline = time.time() + 240
    while (
        (seen is None or refused is None)
        and time.time() < deadline
        and all(job.poll() is None for job in started.values())
    ):
        if seen is None:
            last = [_listening_ports(cwd) for cwd in cwds]
            if all(len(ports) >= 3 for ports in last):
                seen = last
        port = _port_in_use(root / "dp") if refused is None else None
        if port is not None:
            refused = (
                port,
                main_in_process(
                    "ms_exp.run",
                    [
                        *FAST,
                        "parallel=data",
                        "trainer.epochs=1",
                        f"parallel.launcher.master_port={port}",
                    ],
                    root / "refused",
                ),
            )
        time.sleep(0.5)
    results = {}
    for name, job in started.items():
        job.wait(timeout=300)
        stdout, stderr = (
            (root / name / f"{stream}.txt").read_text() for stream in ("stdout", "stderr")
        )
        results[name] = CliResult(
            subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr), root / name
        )
        assert job.returncode == 0, f"{name}: {stdout[-3000:]}\n{stderr[-3000:]}"
    return SimpleNamespace(
        dp=results["dp"], auto=results["auto"], seen=seen or last, refused=refused
    )


@pytest.fixture(scope="module")
def data_parallel_run(side_by_side):
    return side_by_side.dp


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Two ranks of batch 32 reading interleaved shards, unshuffled, trained in one process:
    batch 64. Its epoch-1 checkpoint is also a one-epoch job's (the learning rate is
    constant)."""
    return train(
        tmp_path_factory.mktemp("alone"),
        "trainer.epochs=2",
        "dataset.shuffle=false",
        "dataset.batch_size=64",
    )


@pytest.mark.distributed
@pytest.mark.e2e
def test_data_parallel_ranks_train_to_identical_weights_equal_to_stand_alone(
    data_parallel_run, alone
):
    run_dir = data_parallel_run.run_dir
    rank0 = weights(run_dir / "checkpoints/rank_0/checkpoint-1_22.ckpt")
    rank1 = weights(run_dir / "checkpoints/rank_1/checkpoint-1_22.ckpt")
    for name in rank0:
        np.testing.assert_array_equal(rank0[name], rank1[name])
    full = weights(alone.run_dir / "checkpoints/rank_0/checkpoint-1_22.ckpt")
    for name in rank0:
        np.testing.assert_allclose(rank0[name], full[name], rtol=1e-5, atol=1e-6)
    # Both ranks trained: each printed its own loss lines into its own log.
    for rank in (0, 1):
        log = (run_dir / "log_output" / f"worker_{rank}.log").read_text()
        assert re.search(r"epoch: 1 step: 20, loss is [0-9.]+", log)
        assert "run distribute!" not in log  # the tutorial's init_env print: noise


@pytest.mark.distributed
@pytest.mark.e2e
def test_one_run_directory_and_one_mlflow_run_for_all_ranks(data_parallel_run):
    client = data_parallel_run.store
    runs = client.search_runs(["1"])
    assert [r.info.run_id for r in runs] == [data_parallel_run.run_id]
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["ms_exp.parallel_mode"] == "data"
    assert run.data.params["parallel.device_num"] == "2"
    # Rank 0 logs the metrics: one point per global step, no duplicates from rank 1.
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in loss] == list(range(1, 23))
    samples = client.get_metric_history(run.info.run_id, "train/samples_per_s")
    assert len(samples) == 22
    listing = {a.path for a in client.list_artifacts(run.info.run_id, "logs/ranks")}
    assert {"logs/ranks/worker_0.log", "logs/ranks/worker_1.log"} <= listing
    for rank, best in ((0, {"best.ckpt"}), (1, set())):  # one best.ckpt: rank 0's
        files = {
            a.path.rsplit("/", 1)[-1]
            for a in client.list_artifacts(run.info.run_id, f"checkpoints/rank_{rank}")
        }
        assert files == {"checkpoint-1_22.ckpt", *best}
    assert {a.path for a in client.list_artifacts(run.info.run_id, "launch")} == {
        "launch/launch_command.sh"
    }
    run_dirs = list((data_parallel_run.cwd / "outputs").glob("*/*"))
    assert run_dirs == [data_parallel_run.run_dir]


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_data_parallel_runs_models_are_rank_0s_checkpoints(data_parallel_run, tmp_path):
    import mlflow.artifacts

    client = data_parallel_run.store
    run = client.get_run(data_parallel_run.run_id)
    models = {
        m.name: m
        for m in client.search_logged_models(
            [run.info.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'"
        )
    }
    assert set(models) == {"best", "last"}
    rank0 = data_parallel_run.run_dir / "checkpoints" / "rank_0"
    for name, checkpoint in (("best", "best.ckpt"), ("last", "checkpoint-1_22.ckpt")):
        local = Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri=models[name].artifact_location, dst_path=str(tmp_path / name)
            )
        )
        assert (local / "checkpoint.ckpt").read_bytes() == (rank0 / checkpoint).read_bytes()
        assert {"MLmodel", "model.mindir", "config.yaml"} <= {p.name for p in local.iterdir()}


@pytest.mark.distributed
@pytest.mark.e2e
def test_msrun_command_is_printed_and_saved_for_copying(data_parallel_run):
    saved = (data_parallel_run.run_dir / "launch_command.sh").read_text().splitlines()[-1]
    assert saved in data_parallel_run.stdout
    assert saved.startswith(
        "msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port="
    )
    assert " --node_rank=-1 --log_dir=" in saved
    assert saved.endswith(f"python -m ms_exp.worker --run-dir {data_parallel_run.run_dir}")


@pytest.mark.distributed
@pytest.mark.e2e
def test_eval_loads_a_data_parallel_run(data_parallel_run):
    result = main_in_process(
        "ms_exp.eval", ["--run-id", data_parallel_run.run_id], data_parallel_run.cwd
    )
    assert result.rc == 0, result.stderr[-2000:]
    final = data_parallel_run.store.get_run(data_parallel_run.run_id).data.metrics
    printed = float(re.search(r"'accuracy': ([0-9.]+)", result.stdout).group(1))
    assert printed == pytest.approx(final["eval/accuracy"], abs=1e-9)


@pytest.mark.distributed
@pytest.mark.e2e
def test_two_distributed_jobs_with_default_ports_run_side_by_side(side_by_side):
    seen = side_by_side.seen
    assert all(len(ports) >= 3 for ports in seen), seen
    assert not seen[0] & seen[1], seen
    ports = []
    for result in (side_by_side.dp, side_by_side.auto):
        run = result.store.get_run(result.run_id)
        (run_dir,) = (result.cwd / "outputs").glob("*/*")
        port = saved_port(run_dir)
        # The chosen port is printed, saved and recorded on the run.
        assert f"--master_port={port} " in result.stdout
        assert f"--master_port={port} " in run.data.tags["ms_exp.launch_command"]
        assert run.info.status == "FINISHED"
        ports.append(port)
    assert ports[0] != ports[1]
    assert [ports[0] in seen[0], ports[1] in seen[1]] == [True, True]


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_second_job_on_the_same_explicit_port_is_refused(side_by_side):
    assert side_by_side.refused is not None, "the data-parallel run's port was never seen taken"
    port, refused = side_by_side.refused
    assert port == saved_port(side_by_side.dp.run_dir)
    err = refused.stderr.strip().splitlines()
    assert (refused.rc, err) == (
        2,
        [
            ERROR + f"parallel.launcher.master_port={port}: not allowed; expected a free port "
            f"(another process is listening on 127.0.0.1:{port})"
        ],
    )
    assert list(refused.cwd.iterdir()) == []
    # The job holding the port was not disturbed: it finished (side_by_side checks rc 0).
    assert side_by_side.dp.store.get_run(side_by_side.dp.run_id).info.status == "FINISHED"


@pytest.mark.distributed
@pytest.mark.e2e
def test_auto_parallel_on_cpu_runs_data_parallel_layouts_and_says_so(side_by_side):
    result = side_by_side.auto
    assert "parallel=auto on CPU" in result.stdout
    assert "data-parallel layouts (every parameter whole on every rank)" in result.stdout
    from ms_exp.checkpoint.transform import strategy_file_layouts

    layouts = strategy_file_layouts(result.run_dir / "strategy.ckpt")
    assert layouts and all(whole(*layout) for layout in layouts.values())
    import mindspore as ms

    part = ms.load_checkpoint(str(result.run_dir / "checkpoints/rank_1/checkpoint-1_22.ckpt"))
    assert part["layer1.weight"].shape == (64, 512)
    run = result.store.get_run(result.run_id)
    assert run.data.params["parallel.search_mode"] == "sharding_propagation"


def test_msrun_arguments_for_a_multi_node_cluster():
    cfg = compose_config(
        [
            "parallel=data",
            "parallel.device_num=16",
            "parallel.launcher.local_worker_num=8",
            "parallel.launcher.node_rank=1",
            "parallel.launcher.master_addr=10.0.0.5",
            "parallel.launcher.master_port=9000",
            "parallel.launcher.cluster_time_out=300",
            "parallel.launcher.log_dir=/shared/logs",
        ]
    )
    assert msrun_arguments(cfg.parallel, Path("/shared/run")) == [
        "--worker_num=16",
        "--local_worker_num=8",
        "--master_addr=10.0.0.5",
        "--master_port=9000",
        "--node_rank=1",
        "--log_dir=/shared/logs",
        "--join=True",
        "--tail_worker_log=0",
        "--cluster_time_out=300",
        "python",
        "-m",
        "ms_exp.worker",
        "--run-dir",
        "/shared/run",
    ]


@pytest.mark.parametrize(
    "mode,expected",
    [
        (
            "data",
            {
                "parallel_mode": "data_parallel",
                "gradients_mean": True,
                "device_num": 2,
                "all_reduce_fusion_config": [2, 4],
            },
        ),
        (
            "semi_auto",
            {
                "parallel_mode": "semi_auto_parallel",
                "gradients_mean": True,
                "device_num": 8,
                "full_batch": True,
                "all_reduce_fusion_config": [2, 4],
                "strategy_ckpt_config": {
                    "save_file": "/run/strategy.ckpt",
                    "only_trainable_params": True,
                },
            },
        ),
        (
            "auto",
            {
                "parallel_mode": "auto_parallel",
                "gradients_mean": True,
                "device_num": 8,
                "full_batch": True,
                "search_mode": "recursive_programming",
                "all_reduce_fusion_config": [2, 4],
                "strategy_ckpt_config": {
                    "save_file": "/run/strategy.ckpt",
                    "only_trainable_params": True,
                },
            },
        ),
    ],
)
def test_gpu_and_ascend_get_mindspores_own_parallel_context(mode, expected):
    from ms_exp.train.context import auto_parallel_context

    overrides = [
        f"parallel={mode}",
        "parallel.all_reduce_fusion_config=[2,4]",
        "checkpoint.strategy.save_file=/run/strategy.ckpt",
    ]
    if mode != "data":
        overrides.append("parallel.full_batch=true")
    if mode == "auto":
        overrides.append("parallel.search_mode=recursive_programming")
    cfg = compose_config(overrides)
    context = auto_parallel_context(cfg.parallel, cfg.checkpoint.strategy, "GPU")
    assert {k: (v if k != "parallel_mode" else str(v)) for k, v in context.items()} == expected
    # The same config on CPU trains data parallel (MindSpore refuses the others there).
    on_cpu = auto_parallel_context(cfg.parallel, cfg.checkpoint.strategy, "CPU")
    assert str(on_cpu["parallel_mode"]) == "data_parallel" and "full_batch" not in on_cpu


def _workers_of(run_dir: Path):
    out = subprocess.run(
        ["pgrep", "-f", f"ms_exp.worker --run-dir {run_dir}"], capture_output=True, text=True
    ).stdout
    return [int(pid) for pid in out.split()]


def _workers_left(run_dir: Path, timeout=15):
    """The job's processes (msrun, its scheduler, the ranks) still there after up to
    ``timeout`` seconds of waiting for them to end."""
    deadline = time.time() + timeout
    while _workers_of(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    return _workers_of(run_dir)


def _start(tmp_path, *overrides, port=None):
    """``ms_exp.run`` in ``tmp_path`` (run directory ``run``), its output into a file
    (``_output``), which nothing has to drain while the test does other things."""
    args = [
        sys.executable,
        "-m",
        "ms_exp.run",
        *FAST,
        "parallel=data",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"parallel.launcher.master_port={port or free_port()}",
        *overrides,
    ]
    with open(tmp_path / "console.txt", "w") as console:
        process = subprocess.Popen(
            args,
            cwd=tmp_path,
            stdout=console,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    process.console = tmp_path / "console.txt"
    return process


def _output(process) -> str:
    return process.console.read_text(errors="replace")


def _finish(process, timeout) -> str:
    process.wait(timeout=timeout)
    return _output(process)


def _wait_until(process, done, timeout: float, what: str) -> None:
    """Until ``done()`` (a file the job writes says so), failing as soon as the job ends
    or ``timeout`` passes: the files are the event, looked at every 0.2 s."""
    deadline = time.time() + timeout
    while not done():
        assert process.poll() is None, _output(process)[-3000:]
        assert time.time() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)


def _wait_for_training(process, run_dir: Path, timeout=120):
    log = run_dir / "log_output" / "worker_1.log"
    _wait_until(
        process,
        lambda: log.is_file() and "epoch: 1 step:" in log.read_text(errors="replace"),
        timeout,
        "training did not start",
    )


LONG = ("trainer.epochs=300", "trainer.loss_print_interval=1")


def _wait_for_checkpoints(process, run_dir: Path, timeout=60):
    """Until each rank's folder holds a checkpoint: a rank killed after it can be resumed."""
    folders = [run_dir / "checkpoints" / f"rank_{rank}" for rank in (0, 1)]
    _wait_until(
        process,
        lambda: all(any(f.glob("checkpoint-*.ckpt")) for f in folders),
        timeout,
        "no checkpoint in every rank's folder",
    )


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_killed_launcher_takes_every_rank_with_it_and_the_job_resumes(tmp_path, alone):
    # The same command twice (the port too: it is part of the config the runs share).
    # Two epochs, killed in the first: the resumed job goes on from inside it. Each rank
    # saves only its share (checkpoint.remove_redundancy): the resume reads them all.
    job = (
        "trainer.epochs=2",
        "dataset.shuffle=false",  # to compare with the same training in one process
        "checkpoint.save_checkpoint_steps=5",
        "checkpoint.remove_redundancy=true",
        "trainer.resume=auto",
        "trainer.loss_print_interval=1",
        f"parallel.launcher.master_port={free_port()}",
    )
    process = _start(tmp_path, *job)
    run_dir = tmp_path / "run"
    deadline = time.time() + 120
    log = run_dir / "log_output" / "worker_1.log"
    while "epoch: 1 step: 12," not in (log.read_text(errors="replace") if log.is_file() else ""):
        assert time.time() < deadline and process.poll() is None, "training did not start"
        time.sleep(0.2)
    process.kill()
    process.wait(timeout=60)
    # msrun, its scheduler and both ranks die with it
    assert _workers_left(run_dir) == [], "ranks outlived their killed launcher"
    resumed = _start(tmp_path, *job)
    output = _finish(resumed, 300)
    assert resumed.returncode == 0, output[-3000:]
    (point,) = set(
        re.findall(
            r"resumed from \S+/rank_\d/(checkpoint-\d+_\d+\.ckpt)",
            (run_dir / "log_output" / "worker_0.log").read_text()
            + (run_dir / "log_output" / "worker_1.log").read_text(),
        )
    )
    epoch, step = map(int, re.match(r"checkpoint-(\d+)_(\d+)", point).groups())
    # Where the killed job had got to: rank 1 had logged step 12 (epoch 1), so both ranks
    # had saved the checkpoint of step 10 at least (every 5 steps); step 15's exists only
    # when the kill lands after it, as it does on a quiet machine.
    assert (epoch - 1) * 22 + step >= 12 // 5 * 5
    import mindspore as ms

    shares = [
        set(ms.load_checkpoint(str(run_dir / f"checkpoints/rank_{rank}/checkpoint-2_22.ckpt")))
        for rank in (0, 1)
    ]
    # MindSpore 2.10 gives each parameter and its moments to one rank (docs/design.md).
    assert "layer1.weight" in shares[0] ^ shares[1], shares
    assert "moments.layer1.weight" in shares[0] ^ shares[1], shares
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
    assert (
        run.info.status == "FINISHED"
        and run.data.tags["ms_exp.resumed_from"] == f"{point} (epoch {epoch}, step {step} of it)"
    )
    # The same training uninterrupted, in one process: the resumed ranks' shares hold it.
    resumed = {}
    for rank in (0, 1):
        resumed.update(weights(run_dir / f"checkpoints/rank_{rank}/checkpoint-2_22.ckpt"))
    uninterrupted = weights(alone.run_dir / "checkpoints/rank_0/checkpoint-2_22.ckpt")
    assert sorted(resumed) == sorted(uninterrupted)
    for name in uninterrupted:
        np.testing.assert_allclose(resumed[name], uninterrupted[name], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def crashed_and_interrupted(tmp_path_factory):
    """Two long jobs stopped once both ranks train: rank 1 of the first is killed; while
    msrun waits for its scheduler to time the dead rank out (MindSpore's heartbeat timeout,
    about 30 s, idle), the second is started and interrupted with Ctrl-C (SIGINT)."""
    crash_dir, ctrl_c_dir = (tmp_path_factory.mktemp(name) for name in ("crash", "ctrl_c"))
    jobs = []
    try:
        crashed = _start(crash_dir, *LONG, "checkpoint.save_checkpoint_steps=5")
        jobs.append(crashed)
        _wait_for_training(crashed, crash_dir / "run")
        _wait_for_checkpoints(crashed, crash_dir / "run")
        victim = next(
            pid
            for pid in _workers_of(crash_dir / "run")
            if "RANK_ID=1"
            in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").replace("\0", " ")
        )
        os.kill(victim, signal.SIGKILL)

        interrupted = _start(ctrl_c_dir, "trainer.epochs=300", "trainer.loss_print_interval=1")
        jobs.append(interrupted)
        _wait_for_training(interrupted, ctrl_c_dir / "run")
        workers = len(_workers_of(ctrl_c_dir / "run"))
        interrupted.send_signal(signal.SIGINT)
        ctrl_c_output = _finish(interrupted, 120)
        ctrl_c_left = _workers_left(ctrl_c_dir / "run")

        crash_output = _finish(crashed, 180)
    finally:
        for process in jobs:  # a failed step above leaves no job training on
            if process.poll() is None:
                process.kill()
                process.wait()
    return SimpleNamespace(
        crash_dir=crash_dir,
        crashed=crashed,
        crash_output=crash_output,
        victim=victim,
        ctrl_c_dir=ctrl_c_dir,
        interrupted=interrupted,
        ctrl_c_output=ctrl_c_output,
        workers_at_ctrl_c=workers,
        workers_after_ctrl_c=ctrl_c_left,
    )


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_crashed_worker_stops_the_others_and_fails_the_run(crashed_and_interrupted):
    job = crashed_and_interrupted
    output = job.crash_output
    assert job.crashed.returncode == 1, output[-3000:]
    # Two lines say which rank died of what and how to go on; the tracebacks of losing it
    # (the scheduler's, msrun's) stay in the logs, and no traceback of the job's own.
    run_dir, logs = job.crash_dir / "run", job.crash_dir / "run" / "log_output"
    assert output.strip().splitlines()[-2:] == [
        f"ms_exp: rank 1 (pid {job.victim}) was killed by SIGKILL; msrun is stopping the "
        "other ranks",
        f"ms_exp: error: rank 1 (pid {job.victim}) was killed by SIGKILL (msrun exit status "
        f"1); its output is in {logs}/worker_1.log, msrun's and its scheduler's in "
        f"{logs}/launcher.log; continue the run with trainer.resume={run_dir}",
    ], output[-3000:]
    assert "Traceback" not in output and "Error code" not in output
    assert "Traceback (most recent call last)" in (logs / "launcher.log").read_text()
    assert _workers_of(job.crash_dir / "run") == []
    (run,) = MlflowClient(f"sqlite:///{job.crash_dir / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "FAILED"
    assert run.data.tags["ms_exp.error"].startswith("WorkersFailed:")


@pytest.mark.distributed
@pytest.mark.e2e
def test_ctrl_c_stops_every_rank_at_a_checkpoint_and_kills_the_run(crashed_and_interrupted):
    job = crashed_and_interrupted
    run_dir = job.ctrl_c_dir / "run"
    assert job.workers_at_ctrl_c >= 3  # msrun, its scheduler and the ranks
    output = job.ctrl_c_output
    assert job.interrupted.returncode == 130, output[-3000:]
    assert job.workers_after_ctrl_c == []  # they end with it
    (run,) = MlflowClient(f"sqlite:///{job.ctrl_c_dir / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "KILLED"
    # Each rank finished the same step and saved it: they stop together (a rank that saw
    # the signal a step late used to wait in AllReduce for one that had stopped, and fail),
    # so a resumed job can start from it.
    saved = []
    for rank in (0, 1):
        log = (run_dir / "log_output" / f"worker_{rank}.log").read_text()
        found = re.search(r"interrupted: checkpoint (\S+) saved", log)
        assert found, log[-3000:]
        saved.append(Path(found[1]).name)
    # The step the ranks agreed on (ms_exp/train/stop_step.py), one after the signal.
    agreed = int((run_dir / "stop_step").read_text())
    assert saved == [f"checkpoint-{(agreed - 1) // 22 + 1}_{(agreed - 1) % 22 + 1}.ckpt"] * 2


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.distributed
@pytest.mark.e2e
def test_from_run_of_a_data_parallel_run_on_two_nodes_is_bit_for_bit(data_parallel_run, tmp_path):
    """The data-parallel run re-run (``--from-run``) as two nodes of one rank each: node 0 is
    the entrypoint; node 1 runs the saved msrun command with its node rank, as a second
    machine sharing the run directory would. Both ranks train into one run, to the
    original's weights bit for bit."""
    # A copy of the run's store: the re-run's run joins the copy, and the tests of this
    # module still find one run in the original.
    shutil.copyfile(data_parallel_run.cwd / "mlflow.db", tmp_path / "mlflow.db")
    original = data_parallel_run.store.get_run(data_parallel_run.run_id)
    assert "ms_exp.launch_command" in original.data.tags
    explicit = free_port()
    node0 = _start(
        tmp_path,
        "--from-run",
        data_parallel_run.run_id,
        "parallel.launcher.local_worker_num=1",
        "parallel.launcher.node_rank=0",
        port=explicit,
    )
    command_file = tmp_path / "run" / "launch_command.sh"
    deadline = time.time() + 60
    while not command_file.is_file():
        assert time.time() < deadline and node0.poll() is None, _output(node0)
        time.sleep(0.2)
    line = command_file.read_text().splitlines()[-1].split()
    assert line[0] == "msrun" and "--node_rank=0" in line
    # Node 0's scheduler must own the port first: on one machine node 1 starts a scheduler
    # too (see below), and whichever binds first wins.
    port = int(next(a for a in line if a.startswith("--master_port=")).split("=")[1])
    assert port == explicit  # an explicit port is honoured: node 0's scheduler takes it
    while not _listening(port):
        assert time.time() < deadline + 60 and node0.poll() is None, _output(node0)
        time.sleep(0.2)
    node1_args = [a if a != "--node_rank=0" else "--node_rank=1" for a in line[1:]]
    node1 = subprocess.run(
        [sys.executable, "-m", "mindspore.parallel.cluster.run", *node1_args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    output = _finish(node0, 300)
    assert node0.returncode == 0, output[-3000:]
    # msrun starts a scheduler on every node whose own address is master_addr; on one
    # machine that is both "nodes", so node 1's extra scheduler cannot bind the port
    # node 0's holds. Its worker is unaffected: it joined node 0's scheduler and trained.
    node1_output = node1.stdout + node1.stderr
    assert node1.returncode == 0 or (
        re.search(r"Scheduler process \d+ exit with exception", node1_output)
        and "Worker process" not in node1_output
    ), node1_output[-3000:]
    worker1 = (tmp_path / "run" / "log_output" / "worker_1.log").read_text()
    assert "epoch: 1 step: 20, loss is" in worker1
    assert f"re-running MLflow run {data_parallel_run.run_id}" in output
    # Nothing changed since the run but, where the tree has them, its uncommitted changes.
    listed = differences(output)
    assert all("uncommitted changes" in line for line in listed), listed
    if not listed:
        assert "same code, packages, data and config as the original run" in output
    for rank in (0, 1):
        first = f"checkpoints/rank_{rank}/checkpoint-1_22.ckpt"
        assert_same_training_state(
            weights(data_parallel_run.run_dir / first), weights(tmp_path / "run" / first)
        )
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs(["1"], f"tags.`ms_exp.rerun_of` = '{data_parallel_run.run_id}'")
    assert run.info.status == "FINISHED"
