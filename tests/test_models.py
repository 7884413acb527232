"""A run's checkpoints as MLflow models, the Model Registry, and evaluating a model."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow.artifacts
import pytest
import yaml

from tests.conftest import main_in_process, migrated_store, run_cli, train

# FAST logs no models: these jobs ask for them.
SHORT = ("trainer.epochs=2", "tracking.log_models=true")


def logged_models(client, run_id):
    run = client.get_run(run_id)
    found = client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    return {m.name: m for m in found}


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """One default short run registering its best model as digits_mlp."""
    cwd = tmp_path_factory.mktemp("models")
    return train(cwd, *SHORT, "tracking.register_model=digits_mlp")


@pytest.mark.e2e
def test_best_and_last_are_logged_models_of_the_run(registered):
    client = registered.store
    run_id = registered.run_id
    models = logged_models(client, run_id)
    assert set(models) == {"best", "last"}
    run = client.get_run(run_id)
    outputs = {o.model_id for o in run.outputs.model_outputs}
    assert outputs == {m.model_id for m in models.values()}
    best_line = registered.field("best checkpoint:")
    best_accuracy = float(best_line.rsplit("accuracy ", 1)[1].rstrip(")"))
    for name, model in models.items():
        assert model.source_run_id == run_id
        assert model.status.to_int() == 2  # READY
        assert model.tags["ms_exp.checkpoint"] == name
        assert model.params["model.name"] == "mlp"
        assert model.params["input_shape"] == "[1, 8, 8]"
        metrics = {m.key: m for m in model.metrics}
        assert {"eval/accuracy", "eval/loss"} <= set(metrics)
        assert all(m.model_id == model.model_id and m.run_id == run_id for m in metrics.values())
    best_metrics = {m.key: m.value for m in models["best"].metrics}
    assert best_metrics["eval/accuracy"] == pytest.approx(best_accuracy, abs=1e-4)
    assert run.data.tags["ms_exp.model.best"] == models["best"].model_id


@pytest.mark.e2e
def test_model_artifacts_hold_checkpoint_config_mindir_and_mlmodel(registered, tmp_path):
    model = logged_models(registered.store, registered.run_id)["best"]
    local = Path(
        mlflow.artifacts.download_artifacts(
            artifact_uri=model.artifact_location, dst_path=str(tmp_path)
        )
    )
    files = {p.name for p in local.rglob("*") if p.is_file()}
    assert {
        "MLmodel",
        "checkpoint.ckpt",
        "config.yaml",
        "model.mindir",
        "input_example.json",
    } <= files
    assert not [name for name in files if name.endswith((".pkl", ".pickle"))]
    mlmodel = yaml.safe_load((local / "MLmodel").read_text())
    flavor = mlmodel["flavors"]["mindspore"]
    assert flavor["checkpoint"] == "checkpoint.ckpt" and flavor["mindir"] == "model.mindir"
    assert flavor["config"] == "config.yaml" and flavor["mindspore_version"]
    assert "pickle" not in json.dumps(mlmodel["flavors"]).lower()
    inputs = json.loads(mlmodel["signature"]["inputs"])
    assert inputs[0]["tensor-spec"]["shape"] == [-1, 1, 8, 8]
    assert mlmodel["saved_input_example_info"]["artifact_path"] == "input_example.json"
    # The MindIR runs without ms_exp, as the network with the checkpoint does (pyfunc
    # rebuilds it from config + checkpoint).
    script = f"""
import json, numpy as np, mindspore as ms, mlflow.pyfunc
d = {str(local)!r}
x = np.array(json.load(open(d + '/input_example.json')), dtype=np.float32)
graph = ms.nn.GraphCell(ms.load(d + '/model.mindir'))(ms.Tensor(x)).asnumpy()
rebuilt = mlflow.pyfunc.load_model(d).predict(x)
np.testing.assert_allclose(graph, rebuilt, rtol=1e-5, atol=1e-5)
print('same', graph.shape)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same (2, 10)" in done.stdout


@pytest.mark.e2e
def test_the_run_folder_holds_what_the_tracking_guide_shows(registered):
    from tests.test_docs import assert_listed_as_shown

    assert_listed_as_shown(
        registered.run_dir, "tracking.md", ["", "checkpoints/rank_0", "models/best"]
    )


@pytest.mark.e2e
def test_mlflows_own_predict_command_serves_a_logged_model(registered, tmp_path):
    """``mlflow models predict`` on a model of the run, by its models:/ URI, in the
    environment ms_exp is installed in, as the run's last line prints it: the same outputs
    as the model's MindIR."""
    import mindspore as ms
    import numpy as np

    model = logged_models(registered.store, registered.run_id)["best"]
    local = Path(
        mlflow.artifacts.download_artifacts(
            artifact_uri=model.artifact_location, dst_path=str(tmp_path)
        )
    )
    printed = registered.field("  predict with:")
    setting, *command = shlex.split(printed)
    name, _, uri = setting.partition("=")
    assert (name, uri) == ("MLFLOW_TRACKING_URI", f"sqlite:///{registered.cwd / 'mlflow.db'}")
    assert command[command.index("-m") + 1] == f"models:/{model.model_id}"
    given, answer = Path(command[command.index("-i") + 1]), tmp_path / "predictions.json"
    done = subprocess.run(
        [*command, "-o", str(answer)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, name: uri},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    predicted = np.array(json.loads(answer.read_text())["predictions"], dtype=np.float32)
    x = ms.Tensor(np.array(json.loads(given.read_text())["inputs"], dtype=np.float32))
    graph = ms.nn.GraphCell(ms.load(str(local / "model.mindir")))(x).asnumpy()
    assert predicted.shape == graph.shape == (2, 10)
    np.testing.assert_allclose(predicted, graph, rtol=1e-5, atol=1e-5)


@pytest.mark.e2e
def test_register_model_versions_and_eval_model_and_a_sweep_registers_its_best_job_once(registered):
    cwd = registered.cwd
    assert "registered model digits_mlp version 1 (models:/digits_mlp/1)" in registered.stdout
    evaluated = main_in_process("ms_exp.eval", ["--model", "models:/digits_mlp/1"], cwd)
    assert evaluated.rc == 0, evaluated.stderr[-3000:]
    result = evaluated.field("result:")
    best = logged_models(registered.store, registered.run_id)["best"]
    best_accuracy = {m.key: m.value for m in best.metrics}["eval/accuracy"]
    accuracy = float(result.split("'accuracy': ")[1].split(",")[0])
    assert accuracy == pytest.approx(best_accuracy, abs=1e-9)
    assert f"child of {registered.run_id}" in evaluated.stdout

    missing = main_in_process("ms_exp.eval", ["--model", "models:/digits_mlp/9"], cwd)
    assert missing.rc == 2
    assert "registered model digits_mlp has versions 1" in missing.stderr
    both = main_in_process(
        "ms_exp.eval", ["--model", "models:/digits_mlp/1", "--checkpoint", "best"], cwd
    )
    assert both.rc == 2 and "--model alone" in both.stderr

    # A sweep registers its best job once: the registered model's next version.
    sweep = run_cli(
        "ms_exp.run",
        [
            "-m",
            "trainer.progress_bar=never",
            "trainer.epochs=1",
            "optimizer.lr=0.001,0.1",
            "tracking.register_model=digits_mlp",
        ],
        cwd,
        timeout=600,
    )
    assert sweep.rc == 0, sweep.stderr[-3000:]
    assert "registered model digits_mlp version 2 (models:/digits_mlp/2)" in sweep.stdout
    client = sweep.store
    versions = client.search_model_versions("name = 'digits_mlp'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    runs = client.search_runs(
        [client.get_experiment_by_name("ms_exp").experiment_id],
        filter_string="tags.`ms_exp.sweep.id` != ''",
    )
    assert len(runs) == 2
    best = max(runs, key=lambda r: r.data.metrics["eval/accuracy"])
    assert client.get_model_version("digits_mlp", "2").run_id == best.info.run_id
    assert client.get_model_version("digits_mlp", "1").run_id == registered.run_id
    parent = client.get_run(best.data.tags["ms_exp.sweep.id"])
    assert parent.data.tags["ms_exp.sweep.best_run"] == best.info.run_id
    assert parent.data.tags["ms_exp.registered_model"] == "digits_mlp/2"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["tracking.register_model=a/b"], "without '/' or ':'"),
        (["tracking.register_model=x:y"], "without '/' or ':'"),
        (["tracking.register_model=.."], "registered-model name"),
        (
            ["tracking.register_model=ok", "tracking.log_models=false"],
            "null while tracking.log_models=false",
        ),
        (
            ["tracking.register_model=ok", "tracking.enabled=false"],
            "null while tracking.enabled=false",
        ),
    ],
)
def test_bad_register_model_is_refused(workdir, overrides, message):
    result = main_in_process("ms_exp.run", overrides, workdir)
    assert result.rc == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "tracking.register_model=" in lines[0], result.stderr
    assert message in lines[0]
    assert list(workdir.iterdir()) == []


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_unknown_registered_model_is_refused(workdir):
    shutil.copyfile(migrated_store(), workdir / "mlflow.db")
    result = main_in_process("ms_exp.eval", ["--model", "models:/nothing_here/1"], workdir)
    assert result.rc == 2
    assert "no registered model nothing_here" in result.stderr


def test_the_mlmodel_file_is_written_from_the_saved_example_once(tmp_path):
    import numpy as np

    from ms_exp.tracking.mlmodel import EXAMPLE_ARRAYS, save_example, write_mlmodel

    images, ids = np.ones((2, 1, 8, 8), np.float32), np.arange(2, dtype=np.int32)
    save_example(tmp_path, [images, ids], np.zeros((2, 10), np.float32))
    spec = {
        "flavor": "mindspore",
        "fields": {"checkpoint": "checkpoint.ckpt", "inputs": 2},
        "loader_module": "ms_exp.job.model_package",
    }
    write_mlmodel(tmp_path, spec)
    mlmodel = yaml.safe_load((tmp_path / "MLmodel").read_text())
    assert mlmodel["flavors"]["mindspore"] == {"checkpoint": "checkpoint.ckpt", "inputs": 2}
    assert mlmodel["flavors"]["python_function"]["loader_module"] == "ms_exp.job.model_package"
    inputs = {
        spec["name"]: spec["tensor-spec"] for spec in json.loads(mlmodel["signature"]["inputs"])
    }
    assert inputs == {
        "input_0": {"dtype": "float32", "shape": [-1, 1, 8, 8]},
        "input_1": {"dtype": "int32", "shape": [-1]},
    }
    assert json.loads(mlmodel["signature"]["outputs"])[0]["tensor-spec"]["shape"] == [-1, 10]
    assert (tmp_path / "input_example.json").is_file()
    assert not (tmp_path / EXAMPLE_ARRAYS).exists()
    # A journal delivered again after a cut finds it written and leaves it as it is.
    written = (tmp_path / "MLmodel").read_text()
    write_mlmodel(tmp_path, spec)
    assert (tmp_path / "MLmodel").read_text() == written


def test_a_model_logged_by_an_earlier_layout_loads_and_predicts_as_it_did(tmp_path):
    """Users keep models logged by earlier versions: tests/data/model_logged_by_65ca5bd is
    one (MLmodel, config.yaml, checkpoint) logged by ms_exp at commit 65ca5bd, with the
    predictions that version's loader gave for its input example. MLflow finds the loader by
    the module path its MLmodel names, ms_exp.job.model_package, so that path stays."""
    import mlflow.pyfunc
    import numpy as np

    model = tmp_path / "model"
    shutil.copytree(Path(__file__).parent / "data" / "model_logged_by_65ca5bd", model)
    mlmodel = yaml.safe_load((model / "MLmodel").read_text())
    assert mlmodel["flavors"]["python_function"]["loader_module"] == "ms_exp.job.model_package"
    example = np.asarray(json.loads((model / "input_example.json").read_text()), np.float32)
    predictions = mlflow.pyfunc.load_model(str(model)).predict(example)
    np.testing.assert_allclose(
        predictions, np.load(model / "predictions.npy", allow_pickle=False), rtol=1e-6
    )


def test_a_model_whose_mlmodel_cannot_be_written_is_one_warning_not_a_failed_run(tmp_path, capsys):
    from mlflow import MlflowClient

    from ms_exp.tracking.tracker import Tracker

    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker = Tracker.start(client, "models", "r", {})
    (tmp_path / "best").mkdir()  # no example arrays in it
    tracker.log_model(
        "best",
        tmp_path / "best",
        {},
        {},
        None,
        {},
        {"flavor": "mindspore", "fields": {}, "loader_module": "x"},
    )
    (warning,) = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("ms_exp:")
    ]
    assert warning.startswith(
        "ms_exp: warning: no MLflow model 'best' logged for this run (FileNotFoundError: "
    ), warning
    assert client.search_logged_models([tracker.experiment_id]) == []
