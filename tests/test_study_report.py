"""The Optuna study's part of a sweep's report: trials, best value so far, importances and
the history plot, read from a real Optuna storage and logged beside the jobs' table."""

import csv
import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest
from conftest import migrated_store
from mlflow import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution

from ms_exp import report
from ms_exp.tracking.store import ensure_experiment
from ms_exp.tracking.study_report import study_part
from ms_exp.tracking.sweep_report import write_report

SPACE = {
    "boost.rho": FloatDistribution(0.1, 0.9),
    "optimizer.lr": FloatDistribution(1e-5, 1.0, log=True),
    "model.name": CategoricalDistribution(["mlp", "resnet"]),
}
# (params, what the trial ended as): a value, "PRUNED" or "FAIL".
TRIALS = [
    ({"boost.rho": 0.2, "optimizer.lr": 0.1, "model.name": "mlp"}, 0.8),
    ({"boost.rho": 0.4, "optimizer.lr": 3e-5, "model.name": "resnet"}, 0.9),
    ({"boost.rho": 0.6, "optimizer.lr": 0.1, "model.name": "mlp"}, "PRUNED"),
    ({"boost.rho": 0.8, "optimizer.lr": 0.01, "model.name": "resnet"}, "FAIL"),
    ({"boost.rho": 0.3, "optimizer.lr": 0.05, "model.name": "mlp"}, 0.7),
]
OPTUNA_FILES = {
    "optuna_trials.csv",
    "optuna_trials.md",
    "optuna_history.png",
    "optuna_importances.png",
}


def store_in(folder: Path) -> str:
    """An empty MLflow store in ``folder``, copied from the one migrated once per process
    (a fresh store costs MLflow 1.5-2.5 s of migrations): its URI."""
    shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def make_study(storage: str, name: str, direction: str, trials=TRIALS) -> None:
    """As the sweeper does: ask for each trial, report its epochs if pruned, tell."""
    study = optuna.create_study(study_name=name, storage=storage, direction=direction)
    for params, outcome in trials:
        study.enqueue_trial(params)
        trial = study.ask(SPACE)
        if outcome == "PRUNED":
            trial.report(0.5, step=1)
            trial.report(0.55, step=2)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif outcome == "FAIL":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, outcome)


def make_sweep(tmp_path: Path, study: str, storage: str, trials=TRIALS):
    """A parent run tagged as the Optuna sweeper tags it and one child run per trial."""
    client = MlflowClient(store_in(tmp_path))
    experiment = ensure_experiment(client, "search")
    parent_id = client.create_run(
        experiment,
        run_name="sweep",
        tags={
            "ms_exp.sweep": "true",
            "ms_exp.optuna.study": study,
            "ms_exp.optuna.storage": storage,
        },
    ).info.run_id
    for number, (params, outcome) in enumerate(trials):
        overrides = " ".join(f"{key}={value}" for key, value in params.items())
        run_id = client.create_run(
            experiment,
            run_name=f"trial {number}",
            tags={
                "mlflow.parentRunId": parent_id,
                "ms_exp.overrides": overrides,
                "ms_exp.optuna.trial": str(number),
            },
        ).info.run_id
        for key, value in params.items():
            client.log_param(run_id, key, value)
        status = "FINISHED"
        if outcome == "PRUNED":
            client.log_metric(run_id, "eval/accuracy", 0.55, step=2)
            client.set_tag(run_id, "ms_exp.pruned_epoch", "2")
            status = "KILLED"
        elif outcome == "FAIL":
            status = "FAILED"
        else:
            client.log_metric(run_id, "eval/accuracy", outcome, step=3)
        client.set_terminated(run_id, status)
    return client, parent_id


def logged(client: MlflowClient, run_id: str):
    return {Path(a.path).name for a in client.list_artifacts(run_id, "report")}


def table(markdown: str, header: str):
    """The rows of the Markdown table whose header line starts with ``header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")))))
    return rows


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_optuna_sweep_report_holds_its_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    make_study(storage, "rho-search", "maximize")
    client, parent_id = make_sweep(tmp_path, "rho-search", storage)
    sweep = write_report(client, parent_id)

    assert {"summary.csv", "summary.md"} | OPTUNA_FILES <= logged(client, parent_id)
    assert OPTUNA_FILES <= set(sweep.files)
    text = sweep.markdown
    # The jobs' table first, then the study.
    assert text.index("| run_name |") < text.index(f"Optuna study rho-search in {storage}")
    assert "maximize, 5 trials (3 COMPLETE, 1 FAIL, 1 PRUNED)" in text
    assert "Best trial: #1, value 0.9, boost.rho=0.4, model.name=resnet, optimizer.lr=3e-05" in text
    importances = table(text, "| param | importance |")
    assert {row["param"] for row in importances} == set(SPACE)
    assert sum(float(row["importance"]) for row in importances) == pytest.approx(1, abs=1e-3)
    history = table(text, "| number |")
    assert [row["state"] for row in history] == [
        "COMPLETE",
        "COMPLETE",
        "PRUNED",
        "FAIL",
        "COMPLETE",
    ]
    assert history[1]["optimizer.lr"] == "3e-05"  # not rounded away
    assert history[2]["pruned_epoch"] == "2"
    # The same text is logged, for the MLflow UI.
    path = client.download_artifacts(parent_id, "report/optuna_trials.md", str(tmp_path))
    assert Path(path).read_text() in text


@pytest.mark.parametrize(
    "direction, best",
    [
        ("maximize", ["0.8", "0.9", "0.9", "0.9", "0.9"]),
        ("minimize", ["0.8", "0.8", "0.8", "0.8", "0.7"]),
    ],
)
def test_best_so_far_follows_the_direction_over_completed_trials(tmp_path, direction, best):
    """The pruned trial's value (its last intermediate one, 0.55) is never the best."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    make_study(storage, "s", direction)
    part = study_part(storage, "s", tmp_path)
    with open(tmp_path / "optuna_trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["number"] for row in rows] == ["0", "1", "2", "3", "4"]
    assert [row["best_so_far"] for row in rows] == best
    assert [row["value"] for row in rows][2:4] == ["0.55", ""]
    assert [row["pruned_epoch"] for row in rows] == ["", "", "2", "", ""]
    assert all(float(row["duration_s"]) >= 0 for row in rows)
    assert [row["best_so_far"] for row in table(part.markdown, "| number |")] == [
        f"{float(value):.4f}" for value in best
    ]


def test_one_completed_trial_says_why_there_are_no_importances(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    make_study(storage, "s", "maximize", TRIALS[:1] + TRIALS[2:4])
    part = study_part(storage, "s", tmp_path)
    assert (
        "No parameter importances: they need at least 2 completed trials; the study has 1"
        in part.markdown
    )
    assert "| param | importance |" not in part.markdown
    assert part.files == ["optuna_history.png", "optuna_trials.csv", "optuna_trials.md"]
    assert not (tmp_path / "optuna_importances.png").exists()


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_a_study_that_cannot_be_loaded_leaves_the_rest_of_the_report(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    make_study(storage, "other", "maximize")
    client, parent_id = make_sweep(tmp_path, "rho-search", storage)
    sweep = write_report(client, parent_id)
    assert (
        f"no study part: no study 'rho-search' in {storage} (studies there: other)"
        in sweep.markdown
    )
    assert "| run_name |" in sweep.markdown
    files = logged(client, parent_id)
    assert "summary.md" in files and not files & OPTUNA_FILES
    # A storage file that is not there is named, not created.
    gone = tmp_path / "gone.db"
    sweep = write_report(client, parent_id, optuna_storage=f"sqlite:///{gone}")
    assert f"no study part: study 'rho-search' in sqlite:///{gone}: no such file" in sweep.markdown
    assert not gone.exists()
    # A tag is a record: the storage it names is opened only if it is Optuna's file already
    # (Optuna adds its tables to any database; a server would get the reader's PGPASSWORD).
    victim = tmp_path / "victim.db"
    sqlite3.connect(victim).close()
    before = victim.read_bytes()
    for planted in (f"sqlite:///{victim}", "postgresql://127.0.0.1:9/planted"):
        client.set_tag(parent_id, "ms_exp.optuna.storage", planted)
        sweep = write_report(client, parent_id)
        assert (
            f"no study part: study 'rho-search' in {planted}: named by the sweep's tag, and "
            "not a SQLite file of Optuna's; a report opens such a storage only where you "
            "name it: pass the study's storage URL with --optuna-storage"
        ) in sweep.markdown
    assert victim.read_bytes() == before


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_report_command_reads_the_storage_the_tag_masks(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    make_study(storage, "rho-search", "maximize")
    client, parent_id = make_sweep(tmp_path, "rho-search", "postgresql://me:***@db:5432/optuna")
    store = ["--tracking-uri", client.tracking_uri]

    assert report.main([parent_id, *store]) == 0
    out = capsys.readouterr().out
    assert (
        "no study part: study 'rho-search' in postgresql://me:***@db:5432/optuna: the "
        "sweep's tag hides the storage's password; pass the storage URL with "
        "--optuna-storage"
    ) in out

    assert report.main([parent_id, *store, "--optuna-storage", storage]) == 0
    out = capsys.readouterr().out
    assert "Best trial: #1, value 0.9" in out
    assert "optuna_importances.png" in out  # in the list of files logged
