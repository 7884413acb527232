"""The whole job in the fast lane: ``python -m ms_exp.run``'s main() called in this process
on tiny data, as lightning-hydra-template runs its train function, so every stage of a job
(config -> checks -> plan -> built objects -> training -> records) runs in the unit lane.
The end-to-end lane runs the same jobs as a user's command would, in their own processes."""

import gc
import pickle
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import main_in_process, migrated_store
from datafiles import write_image_folder
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from mlflow import MlflowClient
from omegaconf import OmegaConf

TINY = (
    "trainer.progress_bar=never",
    "trainer.epochs=2",
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A tiny job recorded in MLflow with its models, one of them registered."""
    cwd = tmp_path_factory.mktemp("job")
    (cwd / "mlflow.db").write_bytes(migrated_store().read_bytes())
    composed = []  # every composition of a config, the preflight's and Hydra's
    compose = ConfigLoaderImpl._load_configuration_impl
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            ConfigLoaderImpl,
            "_load_configuration_impl",
            lambda *args, **kwargs: composed.append(1) or compose(*args, **kwargs),
        )
        result = main_in_process(
            "ms_exp.run", [*TINY, "tracking.log_models=true", "tracking.register_model=tiny"], cwd
        )
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_id = re.search(r"^MLflow run (\w+)", result.stdout, re.M).group(1)
    return SimpleNamespace(
        result=result,
        cwd=cwd,
        run_id=run_id,
        store=MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}"),
        compositions=len(composed),
        # What the job set aside from Python's collector while MindSpore compiled
        # (docs/design.md#compile-collections), handed back: a sweep's next job frees it.
        frozen_after=gc.get_freeze_count(),
    )


def test_an_in_process_job_trains_and_is_recorded_with_its_models(job):
    run = job.store.get_run(job.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["dataset.name"] == "synthetic"
    # 64 samples at batch 32: 2 steps an epoch, every step's loss and every epoch's eval.
    steps = [m.step for m in job.store.get_metric_history(job.run_id, "train/loss")]
    assert steps == [1, 2, 3, 4]
    assert [m.step for m in job.store.get_metric_history(job.run_id, "eval/accuracy")] == [2, 4]
    run_dir = job.cwd / run.data.tags["ms_exp.run_dir"]
    # Composed once: Hydra loads the preflight's config (as get_mode, then as Hydra.run with
    # the hydra.mode=RUN it adds), and records it as it records its own.
    assert job.compositions == 1
    assert job.frozen_after == 0
    hydra = OmegaConf.load(run_dir / ".hydra/hydra.yaml").hydra
    assert (hydra.mode, hydra.overrides.hydra[-1]) == ("RUN", "hydra.mode=RUN")
    assert hydra.overrides.task == list(TINY) + [
        "tracking.log_models=true",
        "tracking.register_model=tiny",
    ]
    assert {p.name for p in (run_dir / "checkpoints/rank_0").glob("*.ckpt")} >= {
        "best.ckpt",
        "checkpoint-2_2.ckpt",
    }
    models = job.store.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{job.run_id}'"
    )
    assert {m.name for m in models} == {"best", "last"}
    (version,) = job.store.search_model_versions("name = 'tiny'")
    assert version.run_id == job.run_id
    # The run's last lines name its models and MLflow's command that predicts with one.
    ids = {m.name: m.model_id for m in models}
    last_lines = job.result.stdout.splitlines()[-4:]
    assert (
        last_lines[-2] == f"MLflow models: best models:/{ids['best']}, last models:/{ids['last']}"
    )
    prefix = "  predict with: "
    assert last_lines[-1].startswith(prefix)
    words = shlex.split(last_lines[-1][len(prefix) :])
    example = run_dir / "models/best/serving_input_example.json"
    assert words[0] == f"MLFLOW_TRACKING_URI=sqlite:///{job.cwd / 'mlflow.db'}"
    assert Path(words[1]).name == "mlflow"
    assert words[2:] == [
        *("models", "predict", "-m", f"models:/{ids['best']}"),
        *("-i", str(example.resolve()), "-t", "json", "--env-manager", "local"),
    ]
    assert example.is_file()


def test_the_same_config_again_is_skipped_when_asked(job, monkeypatch):
    from ms_exp.preflight import validate

    checked = []
    real = validate.validate_config
    monkeypatch.setattr(
        validate, "validate_config", lambda cfg, choices: checked.append(1) or real(cfg, choices)
    )
    again = main_in_process(
        "ms_exp.run", [*TINY, "tracking.log_models=true", "tracking.skip_finished=true"], job.cwd
    )
    assert again.rc == 0, again.stderr[-3000:]
    assert f"skipped: run {job.run_id}" in again.stdout
    # Checked once in this process: by the preflight, not again by Hydra's job function.
    assert checked == [1]


def test_a_job_is_checked_again_only_when_it_differs_from_the_one_checked(monkeypatch):
    from ms_exp.preflight import validate
    from ms_exp.preflight.compose import compose_config, hydra_config_of
    from ms_exp.preflight.interpolations import without_hydra

    checked = []
    real = validate.validate_config
    monkeypatch.setattr(
        validate, "validate_config", lambda cfg, choices: checked.append(1) or real(cfg, choices)
    )
    cfg = compose_config([*TINY, "optimizer.lr=0.0123"], return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    with hydra_config_of(cfg, "."):
        validate.validate(cfg, choices)  # the preflight
        validate.validate_once(without_hydra(cfg), choices)  # the job, same config
        assert checked == [1]
        changed = without_hydra(cfg)
        changed.optimizer.lr = 0.0456  # a value a sweeper made up
        validate.validate_once(changed, choices)
    assert checked == [1, 1]


def test_eval_of_the_run_gives_its_final_accuracy(job):
    evaluated = main_in_process("ms_exp.eval", ["--run-id", job.run_id], job.cwd)
    assert evaluated.rc == 0, evaluated.stderr[-3000:]
    accuracy = job.store.get_run(job.run_id).data.metrics["eval/accuracy"]
    assert f"'accuracy': {accuracy}" in evaluated.stdout


def test_the_functional_loop_in_pynative_mode_trains_on_an_image_folder(tmp_path):
    images = write_image_folder(tmp_path / "images", per_class_train=4, per_class_val=2, size=16)
    result = main_in_process(
        "ms_exp.run",
        [
            "trainer.progress_bar=never",
            "trainer.epochs=1",
            "trainer.loop=functional",
            "trainer.mode=pynative",
            "tracking.enabled=false",
            "dataset=imagenet",
            f"dataset.path={images}",
            "dataset.image_size=16",
            "dataset.batch_size=4",
            "model.hidden_size=8",
            "trainer.loss_print_interval=1",
        ],
        tmp_path / "work",
    )
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "12 training and 6 held-out samples of shape (3, 16, 16), 3 classes" in result.stdout
    assert re.findall(r"^epoch: 1 step: (\d+), loss is", result.stdout, re.M) == ["1", "2", "3"]
    assert "MLflow run" not in result.stdout


def test_ranks_agree_on_the_first_proposed_stop_step(tmp_path):
    from ms_exp.train.stop_step import (
        agreed_stop_step,
        clear_stop_step,
        propose_stop_step,
        stop_step_file,
    )

    path = stop_step_file(tmp_path)
    assert agreed_stop_step(path) is None
    assert propose_stop_step(path, 7) == 7
    assert propose_stop_step(path, 8) == 7  # the later rank stops where the first said
    assert list(tmp_path.iterdir()) == [path]  # no proposal's part file left behind
    clear_stop_step(tmp_path)
    assert agreed_stop_step(path) is None


def test_a_sweeps_best_child_follows_the_direction_and_skips_unfinished_jobs():
    from ms_exp.tracking.registry import best_child

    def child(status, **metrics):
        return SimpleNamespace(
            info=SimpleNamespace(status=status), data=SimpleNamespace(metrics=metrics)
        )

    a, b = (
        child("FINISHED", **{"eval/accuracy": 0.5, "eval/loss": 0.2}),
        child("FINISHED", **{"eval/accuracy": 0.9, "eval/loss": 0.4}),
    )
    failed = child("FAILED", **{"eval/accuracy": 1.0})
    assert best_child([a, b, failed], None) == (b, "eval/accuracy")
    assert best_child([a, b], "eval/loss") == (a, "eval/loss")
    assert best_child([a, b], "eval/accuracy", "minimize") == (a, "eval/accuracy")
    assert best_child([failed], "eval/accuracy") == (None, "eval/accuracy")


def test_a_pruned_trial_pickles_back_from_a_worker_process():
    import optuna

    from ms_exp.search.pruned import TrialPruned

    pruned = pickle.loads(pickle.dumps(TrialPruned("study-a", 3)))
    assert isinstance(pruned, optuna.TrialPruned)
    assert (pruned.study_name, pruned.epoch) == ("study-a", 3)
