"""A user's own project (examples/my_project: its network, data, callback and conf/ folder)
trained through ms_exp from the checkout's install, everywhere the built-in options work;
and its bad components refused in one line before any run exists."""
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port, run_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_project"
OWN = ("--config-dir", "conf", "model=tiny_net", "dataset=blobs")
TINY = ("trainer.epochs=2", "trainer.progress_bar=never")


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the example project, so its runs write into a scratch folder."""
    copy = tmp_path / "my_project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", "outputs",
                                                                 "multirun", "mlflow.db"))
    return copy


def refusal(project: Path, *overrides: str) -> str:
    result = run_cli("ms_exp.run", [*OWN, *TINY, *overrides], project)
    assert result.rc == 2, f"rc={result.rc}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert not (project / "outputs").exists() and not (project / "mlflow.db").exists()
    return lines[0]


def train(project: Path, *args: str):
    """A run of the project from its folder; ms_exp's flags come before the overrides."""
    result = run_cli("ms_exp.run", [*args], project)
    assert result.rc == 0, f"rc={result.rc}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def write_module(project: Path, name: str, source: str) -> None:
    (project / "my_project" / f"{name}.py").write_text(textwrap.dedent(source))


# --- refused before any run exists ------------------------------------------------------


def test_a_model_target_that_does_not_import_is_refused(project):
    line = refusal(project, "model._target_=my_project.nets.NoSuchNet")
    assert line.startswith("ms_exp: error: model._target_='my_project.nets.NoSuchNet': "
                           "does not import")


def test_unknown_and_missing_arguments_name_the_parameters(project):
    line = refusal(project, "+model.depth=3")
    assert line == ("ms_exp: error: model.depth=3: is not an argument of the target; expected "
                    "a parameter of my_project.nets.TinyNet: input_shape, num_classes, hidden")
    write_module(project, "strict", """
        from my_project.nets import TinyNet

        def net(input_shape, num_classes, width):
            return TinyNet(input_shape, num_classes, width)
    """)
    line = refusal(project, "model._target_=my_project.strict.net", "~model.hidden")
    assert line == ("ms_exp: error: model.width='missing': not allowed; expected a value: "
                    "my_project.strict.net requires 'width' (its parameters: input_shape, "
                    "num_classes, width)")


def test_a_model_that_returns_no_cell_is_refused(project):
    write_module(project, "wrong", """
        def net(input_shape, num_classes, hidden=8):
            return [input_shape, num_classes]
    """)
    line = refusal(project, "model._target_=my_project.wrong.net")
    assert line == ("ms_exp: error: model._target_='my_project.wrong.net': returned a list; "
                    "expected a mindspore.nn.Cell (a Cell class, or a function returning one)")


def test_a_dataset_that_returns_something_else_is_refused(project):
    write_module(project, "wrong", """
        def data(split, size=4):
            return {"x": list(range(size))}
    """)
    line = refusal(project, "dataset._target_=my_project.wrong.data", "~dataset.samples",
                   "~dataset.features", "~dataset.classes")
    assert line == ("ms_exp: error: dataset._target_='my_project.wrong.data': returned a "
                    "dict for split='train'; expected a pair of numpy arrays (x, y), or a "
                    "mindspore.dataset dataset of unbatched (data, label) samples")
    line = refusal(project, "+dataset.spread=-1")  # the target's own error, in one line
    assert line == ("ms_exp: error: dataset._target_='my_project.data.blobs': failed to "
                    "build: ValueError: scale < 0; expected arguments my_project.data.blobs "
                    "accepts")


def test_a_dataset_without_split_is_refused(project):
    write_module(project, "wrong", """
        def data(size=4):
            return None
    """)
    line = refusal(project, "dataset._target_=my_project.wrong.data", "~dataset.samples",
                   "~dataset.features", "~dataset.classes")
    assert line == ("ms_exp: error: dataset._target_='my_project.wrong.data': does not take "
                    "'split', which ms_exp passes; expected a callable taking 'split' (its "
                    "parameters: size)")


# --- trained ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The example's preset (its network, data and callback) run from a copy of the
    project; several tests read it back."""
    copy = tmp_path_factory.mktemp("own") / "my_project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return train(copy, "--config-dir", "conf", "+experiment=blobs_quick", *TINY)


@pytest.mark.e2e
def test_the_example_trains_and_is_recorded_with_its_targets(trained):
    run = trained.store.get_run(trained.run_id)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["model._target_"] == "my_project.nets.TinyNet"
    assert params["dataset._target_"] == "my_project.data.blobs"
    assert params["model.hidden"] == "32"
    assert params["trainer.callbacks.epoch_log._target_"] == "my_project.callbacks.EpochLog"
    assert run.data.tags["ms_exp.model"] == "TinyNet"
    assert run.info.run_name == "TinyNet-blobs-stand_alone"
    history = trained.store.get_metric_history(trained.run_id, "eval/accuracy")
    assert len(history) == 2 and history[-1].value > 0.5
    assert "512 training and 128 held-out samples of shape (16,), 4 classes" in trained.stdout
    # The project's callback ran in the job and wrote into the run directory.
    log = (trained.run_dir / "epochs.log").read_text().splitlines()
    assert [line.split()[:2] for line in log] == [["epoch", "1"], ["epoch", "2"]]


@pytest.mark.e2e
def test_eval_from_rerun_and_resume_rebuild_the_users_network(trained):
    evaluated = run_cli("ms_exp.eval", ["--run-id", trained.run_id], trained.cwd)
    assert evaluated.rc == 0, evaluated.stderr[-2000:]
    accuracy = trained.store.get_run(trained.run_id).data.metrics["eval/accuracy"]
    assert f"'accuracy': {accuracy}" in evaluated.stdout
    again = train(trained.cwd, "--from-run", trained.run_id)
    assert again.store.get_run(again.run_id).data.metrics["eval/accuracy"] == accuracy
    longer = train(trained.cwd, *OWN, *TINY, "trainer.epochs=3",
                   f"trainer.resume={trained.run_id}")
    assert "resuming" in longer.stdout.lower()
    history = longer.store.get_metric_history(trained.run_id, "eval/accuracy")
    assert [m.step for m in history][-1] > [m.step for m in history][0]


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["concurrent", "submitit_local"])
def test_a_sweep_over_the_users_argument_is_one_parent_with_a_child_per_value(project,
                                                                              launcher):
    """Each launcher's job processes import the project's modules (the basic launcher's
    sweep runs from the installed wheel, tests/test_install.py)."""
    result = train(project, "-m", *OWN, *TINY, "trainer.epochs=1", "model.hidden=8,16",
                   f"hydra/launcher={launcher}")
    store = result.store
    runs = store.search_runs([store.get_experiment_by_name("ms_exp").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.params["model.hidden"] for r in children) == ["16", "8"]
    assert len({r.data.tags["mlflow.parentRunId"] for r in children}) == 1


@pytest.mark.e2e
@pytest.mark.distributed
def test_data_parallel_ranks_import_the_users_modules_and_read_half_the_data_each(project):
    result = train(project, *OWN, *TINY, "trainer.epochs=1", "parallel=data",
                   "parallel.device_num=2", f"parallel.launcher.master_port={free_port()}")
    for rank in range(2):
        log = (result.run_dir / "log_output" / f"worker_{rank}.log").read_text()
        assert "dataset=blobs: 256 training and 128 held-out samples" in log
    assert result.store.get_run(result.run_id).info.status == "FINISHED"


def test_shard_strategies_are_checked_against_the_users_operators(project):
    line = refusal(project, "parallel=semi_auto_tiny",
                   "+parallel.strategies.nosuch.matmul=[[2,1],[1,2]]")
    assert line.startswith("ms_exp: error: parallel.strategies: ")
    assert "nosuch" in line and "TinyNet" in line


@pytest.mark.e2e
@pytest.mark.distributed
def test_semi_auto_slices_of_the_users_network_merge_back_to_its_weights(project, tmp_path):
    import mindspore as ms

    result = train(project, *OWN, *TINY, "trainer.epochs=1", "parallel=semi_auto_tiny",
                   "checkpoint=sliced", f"parallel.launcher.master_port={free_port()}")
    part = ms.load_checkpoint(str(result.run_dir / "checkpoints/rank_0/checkpoint-1_4.ckpt"))
    assert tuple(part["hidden.weight"].shape) == (16, 16)  # [16, 32] split on its columns
    merged = run_cli("ms_exp.ckpt", ["merge", str(result.run_dir), "--output",
                                     str(tmp_path / "merged")], project)
    assert merged.rc == 0, merged.stderr[-2000:]
    weights = ms.load_checkpoint(merged.stdout.strip().splitlines()[-1])
    assert tuple(weights["hidden.weight"].shape) == (16, 32)
    assert tuple(weights["out.weight"].shape) == (4, 32)


@pytest.mark.e2e
def test_dim_reduce_stage_one_and_two_train_the_users_network(project):
    own = (*OWN, "trainer.progress_bar=never")
    first = train(project, *own[:2], "+experiment=dim_reduce_stage_one", *own[2:],
                  "trainer.epochs=3", "checkpoint.snapshots.start_epoch=1",
                  "checkpoint.snapshots.per_epoch=4")
    assert len(list((first.run_dir / "snapshots").glob("*.ckpt"))) >= 8
    second = train(project, *own[:2], "+experiment=dim_reduce_stage_two", *own[2:],
                   f"boost.stage_one_run_id={first.run_id}", "boost.n_components=4",
                   "trainer.epochs=1")
    run = second.store.get_run(second.run_id)
    assert run.info.status == "FINISHED"
    assert np.isfinite(run.data.metrics["eval/loss"])
