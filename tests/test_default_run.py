"""The default job, end to end, read back from MLflow; then evaluated with ms_exp.eval."""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import main_in_process, train
from test_system_metrics import NPU_SMI_910B, printing, with_path


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """``python -m ms_exp.run`` with no overrides but a quiet progress bar, on a machine
    whose ``npu-smi`` (a fake one, first on PATH) reports two Ascend NPUs; Python reports
    what the job's own process imports (``-X importtime``, on stderr)."""
    npu_smi = printing(tmp_path_factory.mktemp("npu-bin"), NPU_SMI_910B)
    return train(
        tmp_path_factory.mktemp("default"),
        "tracking.log_models=true",
        env=with_path(npu_smi),
        python_flags=("-X", "importtime"),
    )


def imported(run) -> list:
    """The modules the job's process imported (the sidecar's are not reported)."""
    return re.findall(r"^import time:.*\| +(\S+)$", run.stderr, re.M)


@pytest.mark.e2e
def test_default_run_trains_far_above_chance_and_says_where_it_is(default_run):
    accuracy = float(
        re.search(r"final evaluation: eval/accuracy ([0-9.]+)", default_run.stdout).group(1)
    )
    assert accuracy > 0.9  # ten digit classes: chance is 0.1
    assert "run standalone!" not in default_run.stdout  # the tutorial's init_env print: noise
    # No API ms_exp calls is one MindSpore says it will remove (it says so in a log line,
    # not a DeprecationWarning: set_context(device_target=...) did).
    printed = default_run.stdout + re.sub(r"^import time:.*\n", "", default_run.stderr, flags=re.M)
    assert "deprecated" not in printed, re.findall(r".*deprecated.*", printed)
    # MLflow is the sidecar's: the job's process (training, then its models' ids at the
    # end) never imports it (docs/design.md#mlmodel-in-the-sidecar).
    modules = imported(default_run)
    assert "mindspore" in modules
    assert [m for m in modules if m.split(".")[0] == "mlflow"] == []
    assert re.search(r"^epoch: 1 step: 20, loss is [0-9.]+$", default_run.stdout, re.M)
    assert re.search(r"throughput: [0-9.]+ samples/s", default_run.stdout)
    db = default_run.cwd / "mlflow.db"
    # Printed to paste into a shell where the virtual environment is not activated: the
    # executable is named by its path unless the shell would find this one.
    command = re.search(
        r"^open it with: (\S+) (ui --backend-store-uri .*)$", default_run.stdout, re.M
    )
    assert command.group(2) == f"ui --backend-store-uri sqlite:///{db} --host 127.0.0.1 --port 5000"
    assert shutil.which(command.group(1)) == str(Path(sys.executable).parent / "mlflow")
    assert default_run.run_dir.is_dir()
    # MLflow's default artifact root would create ./mlruns, which flips later `mlflow ui`
    # calls in this folder to the old file store.
    assert not (default_run.cwd / "mlruns").exists()


@pytest.mark.e2e
def test_train_epoch_time_is_the_epochs_training_not_the_evaluation(default_run):
    """MindSpore's TimeMonitor under Model.fit counts "Train epoch time" from the
    evaluation's start; ms_exp's counts the epoch's training steps."""
    printed = [
        float(t) for t in re.findall(r"^Train epoch time: ([0-9.]+) ms", default_run.stdout, re.M)
    ]
    steps = default_run.store.get_metric_history(default_run.run_id, "train/step_time_ms")
    last_epoch = sum(m.value for m in steps if m.step > 9 * 44)  # epoch 10: steps 397..440
    assert len(printed) == 10
    assert 0.8 * last_epoch < printed[-1] < 1.5 * last_epoch + 50


@pytest.mark.e2e
def test_run_is_recorded_in_mlflow_with_params_metrics_artifacts_and_status(default_run):
    client = default_run.store
    run = client.get_run(default_run.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "mlp-digits-stand_alone"
    params = run.data.params
    assert params["checkpoint.integrated_save"] == "True"
    assert params["dataset.batch_size"] == "32"
    assert params["trainer.mode"] == "graph"
    assert params["model.hidden_size"] == "512"
    assert params["checkpoint.strategy.only_trainable_params"] == "True"
    # A param differs between two runs only where their experiments do: no folder of its
    # own (the strategy file is recorded inside the run's folder), no path of this machine.
    absolute = {k: v for k, v in params.items() if v.startswith("/") or str(default_run.cwd) in v}
    assert absolute == {}, absolute
    assert params["checkpoint.strategy.save_file"] == "strategy.ckpt"
    assert run.data.tags["ms_exp.parallel_mode"] == "stand_alone"
    assert run.data.tags["ms_exp.dataset"] == "digits"
    assert run.data.tags["ms_exp.model"] == "mlp"

    steps_per_epoch, epochs = 44, 10  # 1437 training digits, batch 32, drop_remainder
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in loss] == list(range(1, steps_per_epoch * epochs + 1))
    assert np.mean([m.value for m in loss[-20:]]) < np.mean([m.value for m in loss[:20]])
    for name in ("train/step_time_ms", "train/samples_per_s"):
        assert len(client.get_metric_history(run.info.run_id, name)) == steps_per_epoch * epochs
    accuracy = client.get_metric_history(run.info.run_id, "eval/accuracy")
    assert [m.step for m in accuracy] == [steps_per_epoch * e for e in range(1, epochs + 1)]
    for name in ("eval/top_5_accuracy", "eval/loss", "train/epoch_time_s"):
        assert len(client.get_metric_history(run.info.run_id, name)) == epochs

    def listing(path=None):
        return {a.path for a in client.list_artifacts(run.info.run_id, path)}

    assert {"config/config.yaml"} <= listing("config")
    assert {"hydra/config.yaml", "hydra/hydra.yaml", "hydra/overrides.yaml"} <= listing("hydra")
    assert listing("logs") == {"logs/console.log"}  # no empty run.log beside it
    assert listing("checkpoints/rank_0") == {
        "checkpoints/rank_0/checkpoint-10_44.ckpt",
        "checkpoints/rank_0/best.ckpt",
    }


@pytest.mark.e2e
def test_run_directory_holds_config_logs_and_per_rank_checkpoints(default_run):
    run_dir = default_run.run_dir
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    console = (run_dir / "console.log").read_text()
    assert "epoch: 10 step: 44, loss is" in console
    ckpts = {p.name for p in (run_dir / "checkpoints" / "rank_0").iterdir()}
    # keep_checkpoint_max=5 of one checkpoint per epoch, the graph, and the best one.
    # best.json: what best.ckpt scored, so a resumed run keeps the better one.
    assert ckpts == {
        "best.ckpt",
        "best.json",
        "checkpoint-graph.meta",
        *(f"checkpoint-{e}_44.ckpt" for e in range(6, 11)),
    }


@pytest.mark.e2e
def test_eval_of_run_id_gives_back_the_final_accuracy_as_a_child_run(default_run):
    client = default_run.store
    final = client.get_run(default_run.run_id).data.metrics["eval/accuracy"]
    result = main_in_process("ms_exp.eval", ["--run-id", default_run.run_id], default_run.cwd)
    assert result.rc == 0, result.stderr[-2000:]
    printed = re.search(r"result: \{'accuracy': ([0-9.]+)", result.stdout).group(1)
    assert float(printed) == pytest.approx(final, abs=1e-9)
    child = client.get_run(result.field("MLflow run ").split()[0])
    assert child.data.tags["mlflow.parentRunId"] == default_run.run_id
    assert child.data.metrics["eval/accuracy"] == pytest.approx(final, abs=1e-9)
    assert child.data.metrics["system/cpu_utilization_percentage"] >= 0
    assert "top_5_accuracy" in printed or "eval/top_5_accuracy" in child.data.metrics


@pytest.mark.e2e
def test_eval_of_best_checkpoint_file_gives_the_best_accuracy(default_run):
    history = default_run.store.get_metric_history(default_run.run_id, "eval/accuracy")
    best = default_run.run_dir / "checkpoints" / "rank_0" / "best.ckpt"
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(best)], default_run.cwd)
    assert result.rc == 0, result.stderr[-2000:]
    printed = float(re.search(r"result: \{'accuracy': ([0-9.]+)", result.stdout).group(1))
    assert printed == pytest.approx(max(m.value for m in history), abs=1e-9)
    # Recorded as an evaluation of the run whose folder holds the file.
    assert f"(child of {default_run.run_id})" in result.stdout


@pytest.mark.e2e
def test_the_default_run_records_system_metrics_and_npu_metrics_from_npu_smi(default_run):
    run = default_run.store.get_run(default_run.run_id)
    metrics = {k: v for k, v in run.data.metrics.items() if k.startswith("system/")}
    for name in (
        "cpu_utilization_percentage",
        "system_memory_usage_megabytes",
        "disk_usage_megabytes",
        "network_receive_megabytes",
    ):
        assert f"system/{name}" in metrics
    assert metrics["system/npu_0_utilization_percentage"] == 37.0
    assert metrics["system/npu_0_memory_usage_megabytes"] == 12034.0
    assert metrics["system/npu_0_memory_usage_percentage"] == 18.4
    assert metrics["system/npu_1_utilization_percentage"] == 0.0
    assert metrics["system/npu_1_memory_usage_megabytes"] == 3357.0
    # MindSpore counts no device memory on CPU: nothing is logged for it.
    assert not [k for k in metrics if k.startswith("system/device_memory")]
    assert "npu-smi" not in default_run.stderr
    assert run.info.status == "FINISHED"


def test_eval_refuses_a_missing_checkpoint_in_one_line(tmp_path):
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(tmp_path / "nope.ckpt")], tmp_path)
    assert result.rc == 2
    assert result.stderr.strip().splitlines() == [
        f"ms_exp.eval: error: --checkpoint='{tmp_path / 'nope.ckpt'}': no such file; "
        "expected a checkpoint file that exists, or last or best with --run-id"
    ]
    assert list(tmp_path.iterdir()) == []
