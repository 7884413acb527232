"""``ms_exp.autolog()`` on plain MindSpore scripts: the example's run holds its params,
curves, checkpoints and system metrics; a failing, interrupted, disabled or already
tracked script ends (or leaves) its run as the guide says (docs/guides/autolog.md)."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import migrated_store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "autolog" / "train_digits.py"

# Scenarios around the example's network and data, one per argv[1]: "interrupted" waits
# at step 3 for a signal; "sequence" trains three times in one process: with autolog
# disabled, in the user's own active run, and failing at step 3 (each ending as the guide
# says, whatever came before it in the process).
SCENARIO = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {example_dir!r})
    import mindspore as ms
    import mlflow
    from mindspore.train import Callback
    import ms_exp
    import train_digits as example  # its own ms_exp.autolog() runs here

    mode = sys.argv[1]
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

    class Hook(Callback):
        def on_train_step_end(self, run_context):
            if run_context.original_args().cur_step_num != 3:
                return
            if mode == "fail":
                raise RuntimeError("boom at step 3")
            if mode == "interrupted":
                print("TRAINING", flush=True)
                time.sleep(60)

    def runs():
        client = mlflow.MlflowClient()
        return client.search_runs([e.experiment_id for e in client.search_experiments()])

    train, valid = example.datasets(64)
    model = example.build_model(0.05)
    if mode == "interrupted":
        ms_exp.autolog()
        model.train(1, train, callbacks=[Hook()])
    else:
        mode = "disabled"
        ms_exp.autolog(disable=True)  # the last call wins
        model.train(1, train, callbacks=[Hook()])
        print("DISABLED", len(runs()), flush=True)
        mode = "active"
        ms_exp.autolog()
        with mlflow.start_run() as run:
            model.train(1, train, callbacks=[Hook()])
            status = mlflow.MlflowClient().get_run(run.info.run_id).info.status
            print("ACTIVE", run.info.run_id, status, flush=True)
        mode = "fail"
        model.train(1, train, callbacks=[Hook()])
""")


def environment(tmp_path: Path) -> dict:
    """The scenario's environment, its MLflow store in ``tmp_path`` (a copy of conftest's
    migrated empty store: a first use of a store is not what these tests are about)."""
    if not (tmp_path / "mlflow.db").exists():
        shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    env = dict(os.environ)
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
        MS_EXP_AUTOLOG_SYSTEM_METRICS_INTERVAL="0.5",
        PYTHONUNBUFFERED="1",
    )
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    env.pop("MLFLOW_EXPERIMENT_ID", None)
    return env


def runs(tmp_path: Path):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client, client.search_runs(experiments)


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    """The "sequence" scenario, once for the three tests of what it does: (the finished
    process, its working directory)."""
    tmp_path = tmp_path_factory.mktemp("sequence")
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO.format(example_dir=str(EXAMPLE.parent)))
    done = subprocess.run(
        [sys.executable, str(script), "sequence"],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, tmp_path


def printed(done: subprocess.CompletedProcess, word: str):
    line = next((line for line in done.stdout.splitlines() if line.startswith(word)), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    return line.split()[1:]


def test_import_ms_exp_imports_neither_mindspore_nor_mlflow():
    code = (
        "import sys, ms_exp; print(callable(ms_exp.autolog), "
        "'mindspore' in sys.modules, 'mlflow' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["True", "False", "False"], done.stderr


def test_optimizer_params_name_the_rate_or_its_schedule():
    from mindspore import nn

    from ms_exp.tracking.autolog import optimizer_params

    weights = nn.Dense(4, 2).trainable_params()
    momentum = optimizer_params(nn.Momentum(weights, 0.01, 0.9, weight_decay=1e-4))
    assert momentum["optimizer.class"] == "Momentum"
    assert momentum["optimizer.lr"] == 0.01
    assert momentum["optimizer.momentum"] == 0.9
    assert momentum["optimizer.weight_decay"] == 1e-4
    cosine = optimizer_params(nn.Adam(weights, nn.CosineDecayLR(0.0, 0.01, 10)))
    assert cosine["optimizer.lr"] == "CosineDecayLR(min_lr=0.0, max_lr=0.01, decay_steps=10)"
    assert cosine["optimizer.beta1"] == 0.9
    per_step = optimizer_params(nn.SGD(weights, [0.1, 0.05, 0.01]))
    assert per_step["optimizer.lr"] == "per step: 3 values, 0.1 to 0.01"
    adamw = optimizer_params(nn.AdamWeightDecay(weights, 1e-3, weight_decay=0.01))
    assert adamw["optimizer.lr"] == 0.001 and adamw["optimizer.weight_decay"] == 0.01


@pytest.mark.e2e
def test_the_example_records_one_complete_run(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--epochs", "2"],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client, found = runs(tmp_path)
    assert len(found) == 1
    run = found[0]
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["optimizer.class"] == "Momentum"
    assert params["optimizer.lr"] == "0.1"
    assert params["optimizer.momentum"] == "0.9"
    assert params["trainer.epochs"] == "2"
    assert params["dataset.batch_size"] == "32"
    assert params["model.network"] == "LeNet"
    assert params["model.loss_fn"] == "SoftmaxCrossEntropyWithLogits"
    assert params["model.metrics"] == "accuracy,loss"
    assert int(params["model.trainable_params"]) > 0
    steps = int(params["dataset.steps_per_epoch"])
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, 2 * steps + 1))
    # The example's Momentum keeps its constant rate: train/lr at every step.
    rates = client.get_metric_history(run.info.run_id, "train/lr")
    assert sorted(m.step for m in rates) == list(range(1, 2 * steps + 1))
    assert {round(m.value, 6) for m in rates} == {float(params["optimizer.lr"])}
    for name in ("eval/accuracy", "eval/loss", "train/epoch_time_s"):
        history = client.get_metric_history(run.info.run_id, name)
        assert sorted(m.step for m in history) == [steps, 2 * steps], name
    assert any(name.startswith("system/") for name in run.data.metrics)
    written = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert any(name.endswith(".ckpt") for name in written)
    logged = sorted(
        Path(a.path).name for a in client.list_artifacts(run.info.run_id, "checkpoints")
    )
    assert logged == written
    # It says where the run went and how to open it, as ms_exp.run does.
    experiment = run.info.experiment_id
    assert (
        f"ms_exp.autolog: MLflow run {run.info.run_id} (experiment {experiment}, FINISHED) "
        f"in sqlite:///{tmp_path / 'mlflow.db'}\n" in done.stdout
    )
    assert (
        f"  then browse to http://127.0.0.1:5000/#/experiments/{experiment}/runs/"
        f"{run.info.run_id}?workflowType=machine_learning" in done.stdout
    )


@pytest.mark.e2e
def test_an_error_in_training_ends_the_run_failed_and_propagates(sequence):
    done, tmp_path = sequence
    assert done.returncode != 0
    assert "RuntimeError: boom at step 3" in done.stderr
    _, found = runs(tmp_path)
    (run,) = [run for run in found if run.info.status == "FAILED"]
    assert "boom at step 3" in run.data.tags["ms_exp.error"]


@pytest.mark.e2e
def test_a_signal_during_training_ends_the_run_killed(tmp_path):
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO.format(example_dir=str(EXAMPLE.parent)))
    process = subprocess.Popen(
        [sys.executable, str(script), "interrupted"],
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        output = []
        for line in process.stdout:
            output.append(line)
            if "TRAINING" in line or time.monotonic() > deadline:
                break
        assert "TRAINING" in "".join(output), "".join(output)[-3000:]
        # Ctrl-C: once MindSpore trains, its runtime turns it into SIGTERM, which therefore
        # takes the same way (docs/design.md#sigint-becomes-sigterm).
        process.send_signal(signal.SIGINT)
        output.append(process.communicate(timeout=120)[0])
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    _, (run,) = runs(tmp_path)
    assert run.info.status == "KILLED", "".join(output)[-3000:]
    assert run.data.tags["ms_exp.ended_by"] in (
        "stopped by Ctrl-C or SIGTERM",
        "stopped by Ctrl-C (SIGINT)",
    )


@pytest.mark.e2e
def test_disabled_autolog_records_nothing(sequence):
    done, tmp_path = sequence
    assert printed(done, "DISABLED") == ["0"]
    # Nor later: the process's runs are the user's and the failed one's.
    assert len(runs(tmp_path)[1]) == 2


@pytest.mark.e2e
def test_the_users_active_run_is_used_and_left_open(sequence):
    done, tmp_path = sequence
    run_id, status_inside = printed(done, "ACTIVE")
    assert status_inside == "RUNNING"
    client, found = runs(tmp_path)
    (run,) = [run for run in found if run.info.run_id == run_id]
    assert run.info.status == "FINISHED"  # ended by the user's `with`, not by autolog
    assert run.data.params["optimizer.class"] == "Momentum"
    assert "train/loss" in run.data.metrics
