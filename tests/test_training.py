"""Training behaviour a user notices: both context modes, the checkpoint and tracking
options, optimizers and schedules, and how a run ends (KILLED, FAILED)."""

import contextlib
import io
import math
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import FAST, main_in_process, train
from mlflow import MlflowClient
from training_jobs import experiment_sweep

from ms_exp.checkpoint.files import breakpoint_record, load_verified
from ms_exp.preflight.compose import compose_config
from ms_exp.tracking.store import python_command

# The jobs of this file that need no process of their own: one sweep (tests/training_jobs.py),
# each job an experiment file. The command line's explicit parallel, boost and placement
# choices (ms_exp's defaults) apply to all of them; the progress bar is left at its default
# (auto), which a pipe keeps quiet, but for one job that asks for it and one that refuses it.
JOBS = {
    # A step in PyNative mode costs tens of graph-mode steps: one epoch, at a rate that
    # learns in it.
    "pynative": (
        "trainer: {epochs: 1, mode: pynative}\noptimizer: {lr: 0.2}\n"
        "tracking: {log_checkpoints: none}\n"
    ),
    "sliced": "defaults:\n  - override /checkpoint: sliced\ntrainer: {epochs: 2}\n",
    "checkpoint_none": (
        "defaults:\n  - override /checkpoint: none\ntrainer: {epochs: 1, progress_bar: always}\n"
    ),
    "sgd": (
        "trainer: {epochs: 2}\noptimizer: {name: sgd, lr: 0.1}\ntracking: {log_checkpoints: all}\n"
    ),
    # Adam under a warmed-up cosine schedule with label smoothing, and the checkpoint options
    # that reach ModelCheckpoint: one job, as a job costs its graphs' compilation and its
    # MLflow run whatever it trains (it ends near 0.89 accuracy, the tests ask for 0.5).
    "adam_cosine_checkpoint_steps": (
        "trainer: {epochs: 2, progress_bar: never}\n"
        "optimizer: {name: adam, lr: 0.001, weight_decay: 0.0001, "
        "schedule: cosine, warmup_epochs: 1}\n"
        "loss: {label_smoothing: 0.1}\n"
        "checkpoint: {save_checkpoint_steps: 10, keep_checkpoint_max: 2, "
        "keep_best: false, prefix: digits}\n"
    ),
    "linear_softmax_ce_no_shuffle": (
        "trainer: {epochs: 2}\noptimizer: {schedule: linear}\n"
        "loss: {name: softmax_cross_entropy}\n"
        "dataset: {shuffle: false, drop_remainder: false, "
        "num_parallel_workers: 2}\n"
    ),
    # Graph mode, integrated checkpoints, tracking.log_checkpoints=last: the defaults. The
    # last job of the sweep, after every other one has run in this process: compared with a
    # job of another process (test_seed_makes_runs_repeatable).
    "graph": "trainer: {epochs: 2, mode: graph}\n",
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    # Hydra's flags come before the overrides, as argparse wants them.
    return experiment_sweep(
        tmp_path_factory.mktemp("sweep"),
        JOBS,
        "tracking.log_models=false",
        "parallel=stand_alone",
        "boost=off",
        "placement=device",
    )


def final_accuracy(job) -> float:
    return float(job.field("final evaluation: eval/accuracy").split(",")[0])


def checkpoint_weights(path):
    import mindspore as ms

    return {
        name: p.asnumpy()
        for name, p in ms.load_checkpoint(str(path)).items()
        if name.startswith("layer")
    }


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_both_context_modes_train(sweep, mode):
    job = sweep[mode]
    assert job.run.data.tags["ms_exp.mode"] == mode
    loss = [m.value for m in job.store.get_metric_history(job.run_id, "train/loss")]
    assert np.mean(loss[-10:]) < 0.5 * np.mean(loss[:10])
    assert final_accuracy(job) > 0.5
    assert "dataset=digits:" in job.console
    assert f"mode: {mode}" in (job.run_dir / "config.yaml").read_text()
    epochs = int(job.run.data.params["trainer.epochs"])
    assert (job.run_dir / f"checkpoints/rank_0/checkpoint-{epochs}_44.ckpt").is_file()


@pytest.mark.e2e
def test_explicit_stand_alone_boost_off_device_placement(sweep):
    job = sweep["graph"]
    assert "run standalone!" not in job.console
    assert "run standalone!" not in sweep.result.stdout
    assert "placement=device: every parameter and optimizer state on CPU" in job.console
    params = job.run.data.params
    assert params["boost.level"] == "O0" and params["boost.mode"] == "off"
    assert params["placement.mode"] == "device"
    assert params["parallel.device_num"] == "1"
    assert job.run.data.tags["ms_exp.parallel_mode"] == "stand_alone"


@pytest.mark.e2e
def test_sliced_in_stand_alone_saves_the_same_full_weights_and_says_so_once(sweep):
    integrated, sliced = sweep["graph"], sweep["sliced"]
    assert sliced.console.count("checkpoint=sliced in stand-alone mode") == 1
    assert "checkpoint=sliced in stand-alone" not in integrated.console
    a = checkpoint_weights(integrated.run_dir / "checkpoints/rank_0/checkpoint-2_44.ckpt")
    b = checkpoint_weights(sliced.run_dir / "checkpoints/rank_0/checkpoint-2_44.ckpt")
    assert a.keys() == b.keys() == {f"layer{i}.{w}" for i in (1, 2, 3) for w in ("weight", "bias")}
    assert a["layer1.weight"].shape == (64, 512)  # sized to the 8x8 digits
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert sliced.run.data.params["checkpoint.integrated_save"] == "False"


@pytest.mark.e2e
def test_checkpoint_none_saves_nothing_and_eval_says_why(sweep):
    job = sweep["checkpoint_none"]
    assert not (job.run_dir / "checkpoints").exists()
    assert job.store.list_artifacts(job.run_id, "checkpoints") == []
    refused = main_in_process("ms_exp.eval", ["--run-id", job.run_id], sweep.result.cwd)
    assert refused.rc == 2
    assert "--checkpoint='last': not allowed; expected a checkpoint the run saved" in refused.stderr


@pytest.mark.e2e
def test_checkpoint_steps_and_keep_max_reach_model_checkpoint(sweep):
    job = sweep["adam_cosine_checkpoint_steps"]
    names = {p.name for p in (job.run_dir / "checkpoints/rank_0").glob("*.ckpt")}
    # Saved every 10 steps; only the two newest stay. 88 steps: 80 is epoch 2 step 36, and
    # the end of training (epoch 2 step 44) is always saved.
    assert names == {"digits-2_36.ckpt", "digits-2_44.ckpt"}


@pytest.mark.e2e
@pytest.mark.parametrize(
    "choice,job,expected",
    [
        (
            "all",
            "sgd",
            {
                "checkpoint-1_44.ckpt",
                "checkpoint-2_44.ckpt",
                "best.ckpt",
                "best.json",
                "checkpoint-graph.meta",
            },
        ),
        ("last", "graph", {"checkpoint-2_44.ckpt", "best.ckpt"}),
        ("none", "pynative", set()),
    ],
    ids=["all", "last", "none"],
)
def test_log_checkpoints_setting_decides_what_mlflow_keeps(sweep, choice, job, expected):
    job = sweep[job]
    assert job.run.data.params["tracking.log_checkpoints"] == choice
    logged = {
        a.path.rsplit("/", 1)[-1]
        for a in job.store.list_artifacts(job.run_id, "checkpoints/rank_0")
    }
    assert logged == expected
    # What MLflow does not keep stays in the run directory all the same.
    epochs = int(job.run.data.params["trainer.epochs"])
    assert {f"checkpoint-{epochs}_44.ckpt", "best.ckpt"} <= {
        p.name for p in (job.run_dir / "checkpoints/rank_0").iterdir()
    }


@pytest.mark.e2e
def test_tracking_disabled_trains_without_a_store(untracked):
    assert "final evaluation" in untracked.stdout
    assert "MLflow run" not in untracked.stdout
    assert not (untracked.cwd / "mlflow.db").exists()


@pytest.fixture(scope="module")
def untracked(tmp_path_factory):
    """A job of its own process without tracking, trained as the sweep's last job (graph)."""
    return train(tmp_path_factory.mktemp("untracked"), "trainer.epochs=2", "tracking.enabled=false")


@pytest.mark.e2e
def test_tracking_uri_and_names_are_used(tmp_path):
    store = tmp_path / "team" / "store.db"
    store.parent.mkdir()
    result = train(
        tmp_path,
        "trainer.epochs=1",
        f"tracking.uri=sqlite:///{store}",
        "tracking.experiment_name=digits-study",
        "tracking.run_name=first",
        "tracking.log_every_n_steps=4",
    )
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("digits-study")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "first" and run.info.run_id == result.run_id
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(4, 45, 4))
    assert not (tmp_path / "mlflow.db").exists()
    assert (tmp_path / "team" / "mlartifacts" / "digits-study").is_dir()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "case,job",
    [
        ("sgd", "sgd"),
        ("adam", "adam_cosine_checkpoint_steps"),
        ("cosine_warmup_smoothing", "adam_cosine_checkpoint_steps"),
        ("linear_softmax_ce_no_shuffle", "linear_softmax_ce_no_shuffle"),
    ],
    ids=["sgd", "adam", "cosine-warmup-smoothing", "linear-softmax-ce-no-shuffle"],
)
def test_optimizers_losses_and_schedules_train(sweep, case, job):
    job = sweep[job]
    assert final_accuracy(job) > 0.5
    params = job.run.data.params
    expected = {
        "sgd": {"optimizer.name": "sgd", "optimizer.lr": "0.1"},
        "adam": {
            "optimizer.name": "adam",
            "optimizer.lr": "0.001",
            "optimizer.weight_decay": "0.0001",
        },
        "cosine_warmup_smoothing": {
            "optimizer.schedule": "cosine",
            "optimizer.warmup_epochs": "1",
            "loss.label_smoothing": "0.1",
        },
        "linear_softmax_ce_no_shuffle": {
            "optimizer.schedule": "linear",
            "loss.name": "softmax_cross_entropy",
            "dataset.shuffle": "False",
            "dataset.drop_remainder": "False",
            "dataset.num_parallel_workers": "2",
        },
    }[case]
    assert {key: params[key] for key in expected} == expected


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
        0.8 * (15 / 30 * 0.5 * (1 + math.cos(math.pi * 0.94 * 25 / 30)) + 1e-5)
    )
    linear = rates("optimizer.schedule=linear")
    assert linear[0] == pytest.approx(0.8) and linear[20] == pytest.approx(0.4)
    assert rates("optimizer.schedule=constant") == [0.8] * 40

    from ms_exp.models.mlp import Network

    network = Network(4, 2, 3)
    kinds = {
        name: type(
            create_optimizer(compose_config([f"optimizer.name={name}"]).optimizer, network, 10, 1)
        ).__name__
        for name in ("sgd", "momentum", "adam")
    }
    assert kinds == {"sgd": "SGD", "momentum": "Momentum", "adam": "Adam"}


@pytest.mark.e2e
@pytest.mark.parametrize(
    "setting,job,shown",
    [
        ("always", "checkpoint_none", True),
        ("auto", "graph", False),
        ("never", "adam_cosine_checkpoint_steps", False),
    ],
)
def test_progress_bar_only_where_asked_and_never_in_captured_logs(sweep, setting, job, shown):
    job = sweep[job]
    assert job.run.data.params["trainer.progress_bar"] == setting
    # tqdm draws on stderr, which the job's console.log keeps; "auto" sees a pipe here, as
    # in CI, and stays quiet.
    assert ("epoch 1/1" in job.console and "step/s" in job.console) == shown
    assert ("step/s" in job.console) == shown
    # On the sweep's stderr: the bar of the one job that asked for it (1 epoch), and none
    # of the jobs of 2 epochs, which left it at auto or never.
    assert "epoch 1/1" in sweep.result.stderr
    assert "epoch 1/2" not in sweep.result.stderr and "epoch 2/2" not in sweep.result.stderr


def test_progress_bar_setting_decides_by_the_console_a_job_prints_to(tmp_path):
    """auto: a bar only where the console is a terminal, seen through the job's copy of
    its console (console.log) as MindSpore's callbacks see it."""
    from ms_exp.job.console import tee_output
    from ms_exp.train.progress import wants_progress_bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, watched in ((Terminal(), True), (io.StringIO(), False)):
        assert wants_progress_bar("always", stream) is True
        assert wants_progress_bar("never", stream) is False
        assert wants_progress_bar("auto", stream) is watched
        with contextlib.redirect_stdout(stream), tee_output(tmp_path / "console.log"):
            assert wants_progress_bar("auto") is watched
            assert wants_progress_bar("always") is True
            assert wants_progress_bar("never") is False


@pytest.mark.e2e
def test_multirun_gives_one_finished_mlflow_run_per_job(sweep):
    # The sweep's own parent run aside (tests/test_sweep.py).
    jobs = sweep.jobs.values()
    # Each job's own values: those of its experiment file, the defaults elsewhere.
    lr = {job.name: job.run.data.params["optimizer.lr"] for job in jobs}
    assert lr == {
        **{name: "0.05" for name in JOBS},
        "pynative": "0.2",
        "sgd": "0.1",
        "adam_cosine_checkpoint_steps": "0.001",
    }
    assert {job.run.info.status for job in jobs} == {"FINISHED"}
    assert sweep.parent.info.status == "FINISHED"
    job_dirs = sorted(int(job.run_dir.name) for job in jobs)
    assert job_dirs == list(range(len(JOBS)))
    assert all(job.run_dir.parent.parent.parent.name == "multirun" for job in jobs)
    # In the order of the command line's values.
    assert [job.name for job in sorted(jobs, key=lambda job: int(job.run_dir.name))] == list(JOBS)


@pytest.mark.e2e
def test_seed_makes_runs_repeatable(sweep, untracked):
    # The same seed (trainer.seed's default) in two processes: the sweep's last job, after
    # six others in its process, and a job of its own (without tracking, which does not
    # touch the weights).
    first = sweep["graph"]
    assert first.run.data.params["trainer.seed"] == "1"
    a = checkpoint_weights(first.run_dir / "checkpoints/rank_0/checkpoint-2_44.ckpt")
    b = checkpoint_weights(untracked.run_dir / "checkpoints/rank_0/checkpoint-2_44.ckpt")
    assert a.keys() == b.keys() and a
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def _long_run(checkpoint="none"):
    # With checkpoints, also MindSpore's breakpoint file when training raises.
    saves = [] if checkpoint == "none" else ["checkpoint.exception_save=true"]
    return [
        *FAST,
        "trainer.epochs=500",
        "dataset=synthetic",
        "dataset.num_samples=4096",
        f"checkpoint={checkpoint}",
        *saves,
    ]


def _start_long_run(tmp_path, checkpoint="none"):
    process = subprocess.Popen(
        [sys.executable, "-m", "ms_exp.run", *_long_run(checkpoint)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**__import__("os").environ, "PYTHONUNBUFFERED": "1"},
    )
    seen = []
    deadline = time.time() + 120
    for line in process.stdout:
        seen.append(line)
        if line.startswith("epoch: 2 "):
            break
        assert time.time() < deadline, "".join(seen)
    return process, seen


@pytest.mark.e2e
def test_interrupted_run_saves_a_checkpoint_and_is_marked_killed(tmp_path):
    process, _ = _start_long_run(tmp_path, checkpoint="integrated")
    sidecars = _sidecars_of(process.pid)
    # Ctrl-C; a scheduler's SIGTERM reaches the same stop (MindSpore's runtime turns the one
    # into the other), as tests/test_pool.py's stopped jobs show.
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=120)[0]
    assert process.returncode == 130, rest
    # MindSpore's runtime turns Ctrl-C into SIGTERM (docs/design.md#sigint-becomes-sigterm):
    # said as what the user may have sent, not as a signal they did not send.
    words = "Ctrl-C or SIGTERM"
    assert (
        f"ms_exp: {words}: stopping after this step and saving a checkpoint (a second one "
        "stops at once)"
    ) in rest
    # Saved at the step it stopped at, mid-epoch (the regular ones come once an epoch).
    saved = Path(re.search(r"interrupted: checkpoint (\S+) saved", rest)[1])
    epoch, step = map(int, re.fullmatch(r"checkpoint-(\d+)_(\d+)\.ckpt", saved.name).groups())
    assert epoch >= 2 and 0 < step < 128
    params = load_verified(saved)
    assert int(params["step_num"].asnumpy()) == (epoch - 1) * 128 + step
    # ms_exp's stop raises Terminated inside Model's loop, so MindSpore's exception_save
    # writes a breakpoint file of the same step too (no CRC; ms_exp records its step);
    # trainer.resume=auto continues from the numbered one.
    written = saved.with_name(f"checkpoint-{epoch}_{step}_breakpoint.ckpt")
    assert breakpoint_record(written)["step"] == (epoch - 1) * 128 + step
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "KILLED"
    assert run.data.tags["ms_exp.ended_by"] == f"stopped by {words}"
    # The last line names the run and the command that continues it, as it was typed.
    continued = shlex.join([*shlex.split(python_command()), "-m", "ms_exp.run"])
    assert rest.strip().splitlines()[-1] == (
        f"ms_exp: stopped by {words}; MLflow run {run.info.run_id} was marked KILLED; "
        f"continue it with: {continued} {shlex.join(_long_run('integrated'))} trainer.resume=auto"
    ), rest[-3000:]
    history = client.get_metric_history(run.info.run_id, "train/loss")  # flushed first
    assert max(m.step for m in history) == (epoch - 1) * 128 + step
    deadline = time.time() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in sidecars):
        assert time.time() < deadline, "the sidecar process outlived its job"
        time.sleep(0.2)


def test_a_stop_is_said_as_the_user_sent_it_with_the_command_that_continues_it(monkeypatch):
    from ms_exp.job.summary import stop_line
    from ms_exp.tracking import lifecycle
    from ms_exp.tracking.lifecycle import StoppedRun, Terminated, signal_words

    python = shlex.join([*shlex.split(python_command()), "-m", "ms_exp.run"])
    # Before MindSpore's runtime starts each signal reaches Python as sent; after, Ctrl-C
    # arrives as SIGTERM too.
    monkeypatch.setattr(lifecycle, "_mindspore_loaded", lambda: False)
    assert [signal_words(s) for s in (signal.SIGINT, signal.SIGTERM)] == [
        "Ctrl-C (SIGINT)",
        "SIGTERM",
    ]
    monkeypatch.setattr(lifecycle, "_mindspore_loaded", lambda: True)
    assert signal_words(signal.SIGTERM) == "Ctrl-C or SIGTERM"
    stopped = Terminated(f"stopped by {signal_words(signal.SIGTERM)}")
    cfg = compose_config(["optimizer.lr=0.1"])
    monkeypatch.setattr(StoppedRun, "run_id", None)
    monkeypatch.setattr(StoppedRun, "run_dir", None)
    # Stopped before its run started (Python's own Ctrl-C handler): nothing to continue.
    assert stop_line(KeyboardInterrupt(), ["optimizer.lr=0.1"], False, cfg) == (
        "ms_exp: stopped by Ctrl-C (SIGINT)"
    )
    monkeypatch.setattr(StoppedRun, "run_dir", Path("/w/outputs/run"))
    assert stop_line(stopped, ["--config-dir", "conf", "optimizer.lr=0.1"], False, cfg) == (
        "ms_exp: stopped by Ctrl-C or SIGTERM; the run in /w/outputs/run was marked KILLED; "
        f"continue it with: {python} --config-dir conf optimizer.lr=0.1 trainer.resume=auto"
    )
    monkeypatch.setattr(StoppedRun, "run_id", "0a1b")
    # A command that named what to resume continues the run's folder, whatever it named.
    typed = ["trainer.resume=/w/outputs/run/checkpoints/rank_0/c-1_5.ckpt", "trainer.epochs=9"]
    assert stop_line(stopped, typed, False, cfg) == (
        "ms_exp: stopped by Ctrl-C or SIGTERM; MLflow run 0a1b was marked KILLED; continue it "
        f"with: {python} trainer.epochs=9 trainer.resume=/w/outputs/run"
    )
    # A sweep goes on with the jobs that did not finish.
    typed = ["-m", "optimizer.lr=0.1,0.2", "tracking.skip_finished=false"]
    assert stop_line(stopped, typed, True, cfg) == (
        "ms_exp: stopped by Ctrl-C or SIGTERM; the sweep's runs were marked KILLED; continue "
        f"it with: {python} -m optimizer.lr=0.1,0.2 tracking.skip_finished=true "
        "trainer.resume=auto"
    )
    assert stop_line(stopped, ["checkpoint=none"], False, compose_config(["checkpoint=none"])) == (
        "ms_exp: stopped by Ctrl-C or SIGTERM; MLflow run 0a1b was marked KILLED; it cannot be "
        "continued (this config saves no checkpoint to resume from)"
    )


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
    return [
        child
        for child in children
        if b"ms_exp.tracking.sidecar" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


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
    crashed = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert crashed.returncode == 1 and "OSError: disk went away" in crashed.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FAILED"
    assert run.data.tags["ms_exp.error"] == "OSError: disk went away"
    assert {a.path for a in client.list_artifacts(run.info.run_id, "logs")} == {"logs/console.log"}
