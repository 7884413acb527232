"""Training behaviour a user notices: both context modes, the checkpoint and tracking
options, optimizers and schedules, and how a run ends (KILLED, FAILED)."""
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import FAST, run_cli, train
from mlflow import MlflowClient

from ms_exp.checkpoint.files import load_verified
from ms_exp.preflight.compose import compose_config

SHORT = ("trainer.epochs=2",)


def final_accuracy(result) -> float:
    return float(result.field("final evaluation: eval/accuracy").split(",")[0])


def checkpoint_weights(path):
    import mindspore as ms

    return {name: p.asnumpy() for name, p in ms.load_checkpoint(str(path)).items()
            if name.startswith("layer")}


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_both_context_modes_train(tmp_path, mode):
    result = train(tmp_path, *SHORT, f"trainer.mode={mode}")
    run = result.store.get_run(result.run_id)
    assert run.data.tags["ms_exp.mode"] == mode
    loss = [m.value for m in result.store.get_metric_history(result.run_id, "train/loss")]
    assert np.mean(loss[-10:]) < 0.5 * np.mean(loss[:10])
    assert final_accuracy(result) > 0.5


@pytest.mark.e2e
def test_explicit_stand_alone_boost_off_device_placement(tmp_path):
    result = train(tmp_path, "trainer.epochs=1", "parallel=stand_alone", "boost=off",
                   "placement=device")
    assert "run standalone!" not in result.stdout
    assert "placement=device: every parameter and optimizer state on CPU" in result.stdout
    run = result.store.get_run(result.run_id)
    assert run.data.params["boost.level"] == "O0" and run.data.params["boost.mode"] == "off"
    assert run.data.params["placement.mode"] == "device"
    assert run.data.params["parallel.device_num"] == "1"
    assert run.data.tags["ms_exp.parallel_mode"] == "stand_alone"


@pytest.mark.e2e
def test_sliced_in_stand_alone_saves_the_same_full_weights_and_says_so_once(tmp_path):
    integrated = train(tmp_path / "i", *SHORT, "checkpoint=integrated")
    sliced = train(tmp_path / "s", *SHORT, "checkpoint=sliced")
    assert sliced.stdout.count("checkpoint=sliced in stand-alone mode") == 1
    assert "checkpoint=sliced in stand-alone" not in integrated.stdout
    a = checkpoint_weights(integrated.run_dir / "checkpoints/rank_0/checkpoint-2_44.ckpt")
    b = checkpoint_weights(sliced.run_dir / "checkpoints/rank_0/checkpoint-2_44.ckpt")
    assert a.keys() == b.keys() == {f"layer{i}.{w}" for i in (1, 2, 3) for w in ("weight", "bias")}
    assert a["layer1.weight"].shape == (64, 512)  # sized to the 8x8 digits
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert sliced.store.get_run(sliced.run_id).data.params["checkpoint.integrated_save"] == "False"


@pytest.mark.e2e
def test_checkpoint_none_saves_nothing_and_eval_says_why(tmp_path):
    result = train(tmp_path, *SHORT, "checkpoint=none")
    assert not (result.run_dir / "checkpoints").exists()
    assert result.store.list_artifacts(result.run_id, "checkpoints") == []
    refused = run_cli("ms_exp.eval", ["--run-id", result.run_id], tmp_path)
    assert refused.rc == 2
    assert "--checkpoint='last': not allowed; expected a checkpoint the run saved" in \
        refused.stderr


@pytest.mark.e2e
def test_checkpoint_steps_and_keep_max_reach_model_checkpoint(tmp_path):
    result = train(tmp_path, *SHORT, "checkpoint.save_checkpoint_steps=10",
                   "checkpoint.keep_checkpoint_max=2", "checkpoint.keep_best=false",
                   "checkpoint.prefix=digits")
    names = {p.name for p in (result.run_dir / "checkpoints/rank_0").glob("*.ckpt")}
    # Saved every 10 steps; only the two newest stay. 88 steps: 80 is epoch 2 step 36, and
    # the end of training (epoch 2 step 44) is always saved.
    assert names == {"digits-2_36.ckpt", "digits-2_44.ckpt"}


@pytest.mark.e2e
@pytest.mark.parametrize("choice,expected", [
    ("all", {"checkpoint-1_44.ckpt", "checkpoint-2_44.ckpt", "best.ckpt", "best.json",
             "checkpoint-graph.meta"}),
    ("last", {"checkpoint-2_44.ckpt", "best.ckpt"}),
    ("none", set()),
])
def test_log_checkpoints_setting_decides_what_mlflow_keeps(tmp_path, choice, expected):
    result = train(tmp_path, *SHORT, f"tracking.log_checkpoints={choice}")
    logged = {a.path.rsplit("/", 1)[-1]
              for a in result.store.list_artifacts(result.run_id, "checkpoints/rank_0")}
    assert logged == expected


@pytest.mark.e2e
def test_tracking_disabled_trains_without_a_store(tmp_path):
    result = train(tmp_path, "trainer.epochs=1", "tracking.enabled=false")
    assert "final evaluation" in result.stdout
    assert "MLflow run" not in result.stdout
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.e2e
def test_tracking_uri_and_names_are_used(tmp_path):
    store = tmp_path / "team" / "store.db"
    store.parent.mkdir()
    result = train(tmp_path, "trainer.epochs=1", f"tracking.uri=sqlite:///{store}",
                   "tracking.experiment_name=digits-study", "tracking.run_name=first",
                   "tracking.log_every_n_steps=4")
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("digits-study")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "first" and run.info.run_id == result.run_id
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(4, 45, 4))
    assert not (tmp_path / "mlflow.db").exists()
    assert (tmp_path / "team" / "mlartifacts" / "digits-study").is_dir()


@pytest.mark.e2e
@pytest.mark.parametrize("overrides", [
    ("optimizer.name=sgd", "optimizer.lr=0.1"),
    ("optimizer.name=adam", "optimizer.lr=0.001", "optimizer.weight_decay=0.0001"),
    ("optimizer.schedule=cosine", "optimizer.warmup_epochs=1", "loss.label_smoothing=0.1"),
    ("optimizer.schedule=linear", "loss.name=softmax_cross_entropy", "dataset.shuffle=false",
     "dataset.drop_remainder=false", "dataset.num_parallel_workers=2"),
], ids=["sgd", "adam", "cosine-warmup-smoothing", "linear-softmax-ce-no-shuffle"])
def test_optimizers_losses_and_schedules_train(tmp_path, overrides):
    result = train(tmp_path, *SHORT, *overrides)
    assert final_accuracy(result) > 0.5


def test_learning_rate_schedules_follow_warmup_then_decay():
    from ms_exp.train.optimizer import create_optimizer, learning_rates

    def rates(*overrides):
        cfg = compose_config(["optimizer.lr=0.8", "optimizer.min_lr=0.0", *overrides])
        return learning_rates(cfg.optimizer, steps_per_epoch=10, epochs=4)

    cosine = rates("optimizer.schedule=cosine", "optimizer.warmup_epochs=1")
    assert len(cosine) == 40
    assert cosine[:10] == pytest.approx([0.08 * (i + 1) for i in range(10)])
    # The model zoo's cosine (lr_generator.py): a cosine over 0.47 of a period, damped by a
    # linear decay, counted from the first step of training (tests/test_recipe.py).
    assert cosine[10] == pytest.approx(0.8 * (0.5 * (1 + math.cos(math.pi * 0.94 / 3)) + 1e-5))
    assert cosine[-1] < 0.01
    assert cosine[25] == pytest.approx(
        0.8 * (15 / 30 * 0.5 * (1 + math.cos(math.pi * 0.94 * 25 / 30)) + 1e-5))
    linear = rates("optimizer.schedule=linear")
    assert linear[0] == pytest.approx(0.8) and linear[20] == pytest.approx(0.4)
    assert rates("optimizer.schedule=constant") == [0.8] * 40

    from ms_exp.models.mlp import Network

    network = Network(4, 2, 3)
    kinds = {name: type(create_optimizer(compose_config([f"optimizer.name={name}"]).optimizer,
                                         network, 10, 1)).__name__
             for name in ("sgd", "momentum", "adam")}
    assert kinds == {"sgd": "SGD", "momentum": "Momentum", "adam": "Adam"}


@pytest.mark.e2e
@pytest.mark.parametrize("setting,shown", [("always", True), ("auto", False),
                                           ("never", False)])
def test_progress_bar_only_where_asked_and_never_in_captured_logs(tmp_path, setting, shown):
    result = run_cli("ms_exp.run", ["trainer.epochs=1", f"trainer.progress_bar={setting}"],
                     tmp_path)
    assert result.rc == 0
    # tqdm draws on stderr; "auto" sees a pipe here, as in CI, and stays quiet.
    assert ("epoch 1/1" in result.stderr and "step/s" in result.stderr) == shown


@pytest.mark.e2e
def test_multirun_gives_one_finished_mlflow_run_per_job(tmp_path):
    # Hydra's flags come before the overrides, as argparse wants them.
    result = run_cli("ms_exp.run", ["-m", *FAST, "trainer.epochs=1", "optimizer.lr=0.01,0.1"],
                     tmp_path)
    assert result.rc == 0, result.stderr[-2000:]
    # The sweep's own parent run aside (tests/test_sweep.py).
    runs = [r for r in result.store.search_runs(["1"]) if "ms_exp.sweep" not in r.data.tags]
    assert sorted(r.data.params["optimizer.lr"] for r in runs) == ["0.01", "0.1"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    job_dirs = sorted(Path(r.data.tags["ms_exp.run_dir"]).name for r in runs)
    assert job_dirs == ["0", "1"]
    assert all(Path(r.data.tags["ms_exp.run_dir"]).parent.parent.parent.name == "multirun"
               for r in runs)


@pytest.mark.e2e
def test_seed_makes_runs_repeatable(tmp_path):
    first = train(tmp_path / "a", "trainer.epochs=1", "trainer.seed=7")
    second = train(tmp_path / "b", "trainer.epochs=1", "trainer.seed=7")
    a = checkpoint_weights(first.run_dir / "checkpoints/rank_0/checkpoint-1_44.ckpt")
    b = checkpoint_weights(second.run_dir / "checkpoints/rank_0/checkpoint-1_44.ckpt")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def _start_long_run(tmp_path, checkpoint="none"):
    args = [sys.executable, "-m", "ms_exp.run", *FAST, "trainer.epochs=500",
            "dataset=synthetic", "dataset.num_samples=4096", f"checkpoint={checkpoint}"]
    process = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**__import__("os").environ, "PYTHONUNBUFFERED": "1"})
    seen = []
    deadline = time.time() + 120
    for line in process.stdout:
        seen.append(line)
        if line.startswith("epoch: 2 "):
            break
        assert time.time() < deadline, "".join(seen)
    return process, seen


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupted_run_saves_a_checkpoint_and_is_marked_killed(tmp_path, signum):
    process, _ = _start_long_run(tmp_path, checkpoint="integrated")
    sidecars = _sidecars_of(process.pid)
    process.send_signal(signum)
    rest = process.communicate(timeout=120)[0]
    assert process.returncode == 130, rest
    assert "stopping after this step and saving a checkpoint" in rest
    assert "the run was marked KILLED" in rest
    # Saved at the step it stopped at, mid-epoch (the regular ones come once an epoch).
    saved = Path(re.search(r"interrupted: checkpoint (\S+) saved", rest)[1])
    epoch, step = map(int, re.fullmatch(r"checkpoint-(\d+)_(\d+)\.ckpt", saved.name).groups())
    assert epoch >= 2 and 0 < step < 128
    params = load_verified(saved)
    assert int(params["step_num"].asnumpy()) == (epoch - 1) * 128 + step
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "KILLED"
    # MindSpore's native SIGINT handler re-raises Ctrl-C as SIGTERM once training runs.
    assert run.data.tags["ms_exp.ended_by"] in ("received signal SIGTERM",
                                                 "received signal SIGINT")
    history = client.get_metric_history(run.info.run_id, "train/loss")  # flushed first
    assert max(m.step for m in history) == (epoch - 1) * 128 + step
    deadline = time.time() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in sidecars):
        assert time.time() < deadline, "the sidecar process outlived its job"
        time.sleep(0.2)


@pytest.mark.e2e
def test_a_killed_job_leaves_no_run_running_and_no_process_behind(tmp_path):
    # SIGKILL cannot be caught: the MLflow sidecar sees its job's pipe close and ends the run.
    process, _ = _start_long_run(tmp_path)
    sidecars = _sidecars_of(process.pid)
    assert len(sidecars) == 1
    process.kill()
    process.communicate(timeout=60)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    deadline = time.time() + 60
    while client.search_runs(["1"])[0].info.status == "RUNNING":
        assert time.time() < deadline, "the run was left RUNNING"
        time.sleep(0.5)
    (run,) = client.search_runs(["1"])
    assert run.info.status == "KILLED"
    assert "ended without ending the run" in run.data.tags["ms_exp.ended_by"]
    assert client.get_metric_history(run.info.run_id, "train/loss")
    deadline = time.time() + 30
    while Path(f"/proc/{sidecars[0]}").exists():
        assert time.time() < deadline, "the sidecar process outlived its job"
        time.sleep(0.2)


def _sidecars_of(pid: int):
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [child for child in children
            if b"ms_exp.tracking.sidecar" in Path(f"/proc/{child}/cmdline").read_bytes()]


@pytest.mark.e2e
def test_crash_marks_the_run_failed_with_its_error(tmp_path):
    # A fresh process: MindSpore's device cannot be set again once kernels have run here.
    code = """
import ms_exp.data
from omegaconf import OmegaConf
from ms_exp.preflight.compose import compose_config
from ms_exp.job.run_job import run_job

def broken_reader(*args, **kwargs):
    raise OSError("disk went away")

ms_exp.data.create_datasets = broken_reader
cfg = compose_config(["trainer.epochs=1"])
OmegaConf.update(cfg, "checkpoint.strategy.save_file", "")
run_job(cfg, "run")
"""
    crashed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                             text=True)
    assert crashed.returncode == 1 and "OSError: disk went away" in crashed.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FAILED"
    assert run.data.tags["ms_exp.error"] == "OSError: disk went away"
    assert {a.path for a in client.list_artifacts(run.info.run_id, "logs")} == \
        {"logs/console.log"}
