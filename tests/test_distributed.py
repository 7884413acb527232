"""Distributed jobs: msrun started by the entrypoint, one run for all ranks, real data
parallel on CPU, multi-node, failures and interruption."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import FAST, free_port, run_cli, train
from mlflow import MlflowClient

from ms_exp.job.launch_plan import msrun_arguments
from ms_exp.preflight.compose import compose_config

DP = ("parallel=data", "dataset.shuffle=false")


def weights(path):
    import mindspore as ms

    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()
            if k.startswith("layer")}


@pytest.fixture(scope="module")
def data_parallel_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("dp"), *DP, "trainer.epochs=1",
                 f"parallel.launcher.master_port={free_port()}")


@pytest.mark.distributed
@pytest.mark.e2e
def test_data_parallel_ranks_train_to_identical_weights_equal_to_stand_alone(
        data_parallel_run, tmp_path):
    run_dir = data_parallel_run.run_dir
    rank0 = weights(run_dir / "checkpoints/rank_0/checkpoint-1_22.ckpt")
    rank1 = weights(run_dir / "checkpoints/rank_1/checkpoint-1_22.ckpt")
    for name in rank0:
        np.testing.assert_array_equal(rank0[name], rank1[name])
    # Two ranks of batch 32 reading interleaved shards = one process with batch 64.
    alone = train(tmp_path, "trainer.epochs=1", "dataset.shuffle=false",
                  "dataset.batch_size=64")
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
        files = {a.path.rsplit("/", 1)[-1]
                 for a in client.list_artifacts(run.info.run_id, f"checkpoints/rank_{rank}")}
        assert files == {"checkpoint-1_22.ckpt", *best}
    assert {a.path for a in client.list_artifacts(run.info.run_id, "launch")} == \
        {"launch/launch_command.sh"}
    run_dirs = list((data_parallel_run.cwd / "outputs").glob("*/*"))
    assert run_dirs == [data_parallel_run.run_dir]


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_data_parallel_runs_models_are_rank_0s_checkpoints(data_parallel_run, tmp_path):
    import mlflow.artifacts

    client = data_parallel_run.store
    run = client.get_run(data_parallel_run.run_id)
    models = {m.name: m for m in client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'")}
    assert set(models) == {"best", "last"}
    rank0 = data_parallel_run.run_dir / "checkpoints" / "rank_0"
    for name, checkpoint in (("best", "best.ckpt"), ("last", "checkpoint-1_22.ckpt")):
        local = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=models[name].artifact_location, dst_path=str(tmp_path / name)))
        assert (local / "checkpoint.ckpt").read_bytes() == (rank0 / checkpoint).read_bytes()
        assert {"MLmodel", "model.mindir", "config.yaml"} <= {p.name for p in local.iterdir()}


@pytest.mark.distributed
@pytest.mark.e2e
def test_msrun_command_is_printed_and_saved_for_copying(data_parallel_run):
    saved = (data_parallel_run.run_dir / "launch_command.sh").read_text().splitlines()[-1]
    assert saved in data_parallel_run.stdout
    assert saved.startswith("msrun --worker_num=2 --local_worker_num=2 "
                            "--master_addr=127.0.0.1 --master_port=")
    assert " --node_rank=-1 --log_dir=" in saved
    assert saved.endswith(f"python -m ms_exp.worker --run-dir {data_parallel_run.run_dir}")


@pytest.mark.distributed
@pytest.mark.e2e
def test_eval_loads_a_data_parallel_run(data_parallel_run):
    result = run_cli("ms_exp.eval", ["--run-id", data_parallel_run.run_id],
                     data_parallel_run.cwd)
    assert result.rc == 0, result.stderr[-2000:]
    final = data_parallel_run.store.get_run(data_parallel_run.run_id).data.metrics
    printed = float(re.search(r"'accuracy': ([0-9.]+)", result.stdout).group(1))
    assert printed == pytest.approx(final["eval/accuracy"], abs=1e-9)


def test_msrun_arguments_for_a_multi_node_cluster():
    cfg = compose_config(["parallel=data", "parallel.device_num=16",
                          "parallel.launcher.local_worker_num=8", "parallel.launcher.node_rank=1",
                          "parallel.launcher.master_addr=10.0.0.5",
                          "parallel.launcher.master_port=9000",
                          "parallel.launcher.cluster_time_out=300",
                          "parallel.launcher.log_dir=/shared/logs"])
    assert msrun_arguments(cfg.parallel, Path("/shared/run")) == [
        "--worker_num=16", "--local_worker_num=8", "--master_addr=10.0.0.5",
        "--master_port=9000", "--node_rank=1", "--log_dir=/shared/logs", "--join=True",
        "--tail_worker_log=0", "--cluster_time_out=300",
        "python", "-m", "ms_exp.worker", "--run-dir", "/shared/run"]


@pytest.mark.parametrize("mode,expected", [
    ("data", {"parallel_mode": "data_parallel", "gradients_mean": True, "device_num": 2,
              "all_reduce_fusion_config": [2, 4]}),
    ("semi_auto", {"parallel_mode": "semi_auto_parallel", "gradients_mean": True,
                   "device_num": 8, "full_batch": True, "all_reduce_fusion_config": [2, 4],
                   "strategy_ckpt_config": {"save_file": "/run/strategy.ckpt",
                                            "only_trainable_params": True}}),
    ("auto", {"parallel_mode": "auto_parallel", "gradients_mean": True, "device_num": 8,
              "full_batch": True, "search_mode": "recursive_programming",
              "all_reduce_fusion_config": [2, 4],
              "strategy_ckpt_config": {"save_file": "/run/strategy.ckpt",
                                       "only_trainable_params": True}}),
])
def test_gpu_and_ascend_get_mindspores_own_parallel_context(mode, expected):
    from ms_exp.train.context import auto_parallel_context

    overrides = [f"parallel={mode}", "parallel.all_reduce_fusion_config=[2,4]",
                 "checkpoint.strategy.save_file=/run/strategy.ckpt"]
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
    out = subprocess.run(["pgrep", "-f", f"ms_exp.worker --run-dir {run_dir}"],
                         capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def _start(tmp_path, *overrides):
    args = [sys.executable, "-m", "ms_exp.run", *FAST, "parallel=data",
            f"hydra.run.dir={tmp_path / 'run'}",
            f"parallel.launcher.master_port={free_port()}", *overrides]
    return subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait_for_training(process, run_dir: Path, timeout=120):
    deadline = time.time() + timeout
    log = run_dir / "log_output" / "worker_1.log"
    while time.time() < deadline:
        if log.is_file() and "epoch: 1 step:" in log.read_text(errors="replace"):
            return
        assert process.poll() is None, process.communicate()[0][-3000:]
        time.sleep(0.5)
    raise AssertionError("training did not start")


LONG = ("trainer.epochs=300", "checkpoint=none", "trainer.loss_print_interval=1")


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_killed_launcher_takes_every_rank_with_it_and_the_job_resumes(tmp_path):
    # The same command twice (the port too: it is part of the config the runs share).
    job = ("trainer.epochs=8", "checkpoint.save_checkpoint_steps=5", "trainer.resume=auto",
           "trainer.loss_print_interval=1", f"parallel.launcher.master_port={free_port()}")
    process = _start(tmp_path, *job)
    run_dir = tmp_path / "run"
    deadline = time.time() + 120
    log = run_dir / "log_output" / "worker_1.log"
    while "epoch: 2 step: 12," not in (log.read_text(errors="replace") if log.is_file() else ""):
        assert time.time() < deadline and process.poll() is None, "training did not start"
        time.sleep(0.2)
    process.kill()
    process.communicate(timeout=60)
    deadline = time.time() + 15
    while _workers_of(run_dir):        # msrun, its scheduler and both ranks die with it
        assert time.time() < deadline, "ranks outlived their killed launcher"
        time.sleep(0.2)
    resumed = _start(tmp_path, *job)
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output[-3000:]
    (point,) = set(re.findall(r"resumed from \S+/rank_\d/(checkpoint-\d+_\d+\.ckpt)",
                              (run_dir / "log_output" / "worker_0.log").read_text() +
                              (run_dir / "log_output" / "worker_1.log").read_text()))
    epoch, step = map(int, re.match(r"checkpoint-(\d+)_(\d+)", point).groups())
    # Where the killed job had got to: rank 1 had logged step 34 (epoch 2, step 12), so
    # both ranks had saved the checkpoint of step 30 at least (every 5 steps); step 35's
    # exists only when the kill lands after it, as it does on a quiet machine.
    assert (epoch - 1) * 22 + step >= (22 + 12) // 5 * 5
    for rank in (0, 1):
        assert (run_dir / f"checkpoints/rank_{rank}/checkpoint-8_22.ckpt").is_file()
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "FINISHED" and run.data.tags["ms_exp.resumed_from"] == \
        f"{point} (epoch {epoch}, step {step} of it)"


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_crashed_worker_stops_the_others_and_fails_the_run(tmp_path):
    process = _start(tmp_path, *LONG)
    run_dir = tmp_path / "run"
    _wait_for_training(process, run_dir)
    victim = next(pid for pid in _workers_of(run_dir)
                  if "RANK_ID=1" in Path(f"/proc/{pid}/environ").read_bytes()
                  .decode(errors="replace").replace("\0", " "))
    os.kill(victim, signal.SIGKILL)
    output = process.communicate(timeout=180)[0]
    assert process.returncode == 1, output[-3000:]
    assert "rank" in output and "failed (msrun exit status" in output
    assert _workers_of(run_dir) == []
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "FAILED"
    assert run.data.tags["ms_exp.error"].startswith("WorkersFailed:")


@pytest.mark.distributed
@pytest.mark.e2e
def test_ctrl_c_stops_every_rank_at_a_checkpoint_and_kills_the_run(tmp_path):
    process = _start(tmp_path, "trainer.epochs=300", "trainer.loss_print_interval=1")
    run_dir = tmp_path / "run"
    _wait_for_training(process, run_dir)
    assert len(_workers_of(run_dir)) >= 3  # msrun, its scheduler and the ranks
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 130, output[-3000:]
    time.sleep(1)
    assert _workers_of(run_dir) == []
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
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
def test_two_nodes_on_this_machine_train_into_one_run(tmp_path):
    """Node 0 is the entrypoint; node 1 runs the saved msrun command with its node rank,
    as a second machine sharing the run directory would."""
    node0 = _start(tmp_path, "trainer.epochs=1", "parallel.launcher.local_worker_num=1",
                   "parallel.launcher.node_rank=0")
    command_file = tmp_path / "run" / "launch_command.sh"
    deadline = time.time() + 60
    while not command_file.is_file():
        assert time.time() < deadline and node0.poll() is None, node0.communicate()[0]
        time.sleep(0.2)
    line = command_file.read_text().splitlines()[-1].split()
    assert line[0] == "msrun" and "--node_rank=0" in line
    # Node 0's scheduler must own the port first: on one machine node 1 starts a scheduler
    # too (see below), and whichever binds first wins.
    port = int(next(a for a in line if a.startswith("--master_port=")).split("=")[1])
    while not _listening(port):
        assert time.time() < deadline + 60 and node0.poll() is None, node0.communicate()[0]
        time.sleep(0.2)
    node1_args = [a if a != "--node_rank=0" else "--node_rank=1" for a in line[1:]]
    node1 = subprocess.run([sys.executable, "-m", "mindspore.parallel.cluster.run",
                            *node1_args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300,
                           env={**os.environ,
                                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    output = node0.communicate(timeout=300)[0]
    assert node0.returncode == 0, output[-3000:]
    # msrun starts a scheduler on every node whose own address is master_addr; on one
    # machine that is both "nodes", so node 1's extra scheduler cannot bind the port
    # node 0's holds. Its worker is unaffected: it joined node 0's scheduler and trained.
    node1_output = node1.stdout + node1.stderr
    assert node1.returncode == 0 or (
        re.search(r"Scheduler process \d+ exit with exception", node1_output)
        and "Worker process" not in node1_output), node1_output[-3000:]
    worker1 = (tmp_path / "run" / "log_output" / "worker_1.log").read_text()
    assert "epoch: 1 step: 20, loss is" in worker1
    run_dir = tmp_path / "run"
    a = weights(run_dir / "checkpoints/rank_0/checkpoint-1_22.ckpt")
    b = weights(run_dir / "checkpoints/rank_1/checkpoint-1_22.ckpt")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "FINISHED"
