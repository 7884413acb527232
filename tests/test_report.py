"""A sweep's report (``python -m ms_exp.report``), its table and plots logged into its parent
run, made in-process from runs written straight into a store. The command on a real sweep,
and the checkpoint costs every job records for it, are tested in test_sweep.py."""

import csv
import json
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import migrated_store
from mlflow import MlflowClient

from ms_exp.tracking.store import ensure_experiment
from ms_exp.tracking.sweep import SWEPT_KEYS, child_run_name
from ms_exp.tracking.sweep_report import (
    Reference,
    ReportError,
    metric_figure,
    stage_one_references,
    swept_keys,
    write_report,
)
from ms_exp.tracking.sweep_runs import override_values, read_overrides


def report_rows(client, run_id, tmp_path):
    path = client.download_artifacts(run_id, "report/summary.csv", str(tmp_path))
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def store_in(folder: Path) -> str:
    """An empty MLflow store in ``folder``, copied from the one migrated once per process
    (a fresh store costs MLflow 1.5-2.5 s of migrations): its URI."""
    shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="module")
def recorded_sweep(tmp_path_factory):
    """A parent and four jobs written straight into a store, no training: one diverged
    (NaN accuracy), one failed. (Its tests add to it only what the other ignores: a report
    in the parent run, a run outside the sweep.)"""
    client = MlflowClient(store_in(tmp_path_factory.mktemp("recorded")))
    experiment = ensure_experiment(client, "report")
    parent = client.create_run(experiment, run_name="sweep", tags={"ms_exp.sweep": "true"})
    parent_id = parent.info.run_id
    client.log_param(parent_id, "optimizer.lr", "0.01,0.1,0.5,1.0")
    client.log_param(parent_id, "trainer.epochs", "1")
    for lr, accuracy, status in (
        ("0.01", 0.5, "FINISHED"),
        ("0.1", 0.9, "FINISHED"),
        ("0.5", float("nan"), "FINISHED"),
        ("1.0", None, "FAILED"),
    ):
        run_id = client.create_run(
            experiment,
            run_name=f"lr={lr}",
            tags={"mlflow.parentRunId": parent_id, "ms_exp.overrides": f"optimizer.lr={lr}"},
        ).info.run_id
        client.log_param(run_id, "optimizer.lr", lr)
        client.log_param(run_id, "checkpoint.strategy.save_file", f"/{lr}/strategy.ckpt")
        for step, loss in enumerate((2.3, 1.0), start=1):
            client.log_metric(run_id, "train/loss", loss, step=step)
        if accuracy is not None:
            client.log_metric(run_id, "eval/accuracy", accuracy, step=2)
        else:
            client.set_tag(run_id, "ms_exp.error", "FloatingPointError: loss is nan |\nstep 2")
        client.set_terminated(run_id, status)
    return client, parent_id


def test_write_report_in_process_ranks_failed_jobs_last(recorded_sweep, tmp_path):
    client, parent_id = recorded_sweep
    report = write_report(client, parent_id)
    assert report.files == [
        "eval_accuracy_vs_optimizer.lr.png",
        "summary.csv",
        "summary.md",
        "train_loss.png",
    ]
    assert report.artifact_uri.endswith(f"/{parent_id}/artifacts/report")
    rows = report_rows(client, parent_id, tmp_path)
    assert [r["optimizer.lr"] for r in rows[:2]] == ["0.1", "0.01"]
    assert {(r["optimizer.lr"], r["status"]) for r in rows[2:]} == {
        ("0.5", "FINISHED"),
        ("1.0", "FAILED"),
    }
    (failed,) = [r for r in rows if r["status"] == "FAILED"]
    assert failed["error"] == "FloatingPointError: loss is nan |\nstep 2"
    # One line per row in Markdown, the pipe escaped; no checkpoint columns without metrics.
    assert "| lr=1.0 | FAILED | 1.0 |  | 1.0000 |" in report.markdown
    assert "FloatingPointError: loss is nan \\| step 2 |" in report.markdown
    assert "ckpt_" not in report.markdown


def test_swept_keys_without_sweep_params_are_the_params_that_differ(recorded_sweep):
    client, parent_id = recorded_sweep
    parent = client.get_run(parent_id)
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    assert swept_keys(parent, children) == ["optimizer.lr"]
    bare = client.create_run(parent.info.experiment_id)
    assert swept_keys(bare, children) == ["checkpoint.strategy.save_file", "optimizer.lr"]
    with pytest.raises(ReportError, match="has no child runs"):
        write_report(client, bare.info.run_id)


def jobs_scatter(axes):
    (jobs,) = [c for c in axes.collections if c.get_label() == "each job"]
    return [tuple(point) for point in jobs.get_offsets()]


def test_jobs_with_equal_values_are_all_drawn_beside_a_labelled_mean():
    # Two jobs share gamma=0.8 and their accuracy; three share gamma=0.9; one failed.
    rows = [
        {"boost.gamma": gamma, "eval/accuracy": accuracy}
        for gamma, accuracy in (
            ("0.8", 0.9),
            ("0.8", 0.9),
            ("0.9", 0.91),
            ("0.9", 0.88),
            ("0.9", 0.88),
            ("0.9", None),
        )
    ]
    stage_one = Reference("stage one (0123abcd): 0.9700", 0.97, "0123abcd" * 4)
    axes = metric_figure(rows, "boost.gamma", "eval/accuracy", [stage_one]).axes[0]
    points = jobs_scatter(axes)
    assert len(points) == len(set(points)) == 5
    assert sorted(round(y, 2) for _, y in points) == [0.88, 0.88, 0.9, 0.9, 0.91]
    # Each job stays nearer its own value's tick than the next one.
    assert list(axes.get_xticks()) == [0, 1]
    assert sorted(round(x) for x, _ in points) == [0, 0, 1, 1, 1]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [
        "mean of the jobs with each boost.gamma",
        "each job",
        "stage one (0123abcd): 0.9700",
    ]
    mean, reference = axes.lines
    assert list(mean.get_xdata()) == [0, 1]
    assert [round(y, 4) for y in mean.get_ydata()] == [0.9, round((0.91 + 0.88 * 2) / 3, 4)]
    assert list(reference.get_ydata()) == [0.97, 0.97]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["0.8", "0.9"]
    assert axes.get_title() == "eval/accuracy against boost.gamma (5 jobs; 1 failed or without it)"


def test_the_swept_axis_shows_the_swept_values_as_given():
    """4 jobs at rho 0.4 (the other keys swept) sit around the one tick "0.4", in a band that
    cannot read as 0.38 or 0.42; unevenly spaced learning rates get a tick each, written as
    the sweep wrote them."""
    rows = [{"boost.rho": "0.4", "eval/accuracy": a} for a in (0.91, 0.92, 0.93, 0.935)]
    axes = metric_figure(rows, "boost.rho", "eval/accuracy").axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["0.4"]
    xs = [x for x, _ in jobs_scatter(axes)]
    low, high = axes.get_xlim()
    assert max(xs) - min(xs) <= 0.3 * (high - low)
    assert min(xs) < 0 < max(xs) == -min(xs)
    rows = [
        {"optimizer.lr": lr, "eval/accuracy": 0.5 + i / 10}
        for i, lr in enumerate(("0.1", "1e-3", "0.01", "1e-3"))
    ]
    axes = metric_figure(rows, "optimizer.lr", "eval/accuracy").axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["1e-3", "0.01", "0.1"]
    assert list(axes.get_xticks()) == [0, 1, 2]
    assert sorted(round(x) for x, _ in jobs_scatter(axes)) == [0, 0, 1, 2]


def test_categorical_values_spread_their_jobs_too():
    rows = [
        {"checkpoint.integrated_save": flag, "eval/accuracy": 0.5}
        for flag in ("true", "true", "false")
    ]
    axes = metric_figure(rows, "checkpoint.integrated_save", "eval/accuracy").axes[0]
    points = jobs_scatter(axes)
    assert len(set(points)) == 3
    assert [t.get_text() for t in axes.get_xticklabels()] == ["false", "true"]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [
        "mean of the jobs with each checkpoint.integrated_save",
        "each job",
    ]
    assert metric_figure([{"k": "1", "eval/accuracy": None}], "k", "eval/accuracy") is None


def test_stage_two_report_states_stage_ones_score(tmp_path):
    client = MlflowClient(store_in(tmp_path))
    experiment = ensure_experiment(client, "report")
    stage_one = client.create_run(experiment, run_name="dim_reduce-stage-one").info.run_id
    client.log_metric(stage_one, "eval/accuracy", 0.97)
    client.set_terminated(stage_one)
    parent = client.create_run(experiment, run_name="sweep", tags={"ms_exp.sweep": "true"})
    parent_id = parent.info.run_id
    client.log_param(parent_id, "boost.gamma", "0.8,0.9")
    for gamma in ("0.8", "0.9"):
        run_id = client.create_run(
            experiment,
            run_name=f"gamma={gamma}",
            tags={"mlflow.parentRunId": parent_id, "ms_exp.overrides": f"boost.gamma={gamma}"},
        ).info.run_id
        client.log_param(run_id, "boost.gamma", gamma)
        client.log_param(run_id, "boost.stage_one_run_id", stage_one)
        client.log_metric(run_id, "eval/accuracy", 0.93)
        client.set_terminated(run_id)
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent_id}'")
    (reference,) = stage_one_references(client, children, "eval/accuracy")
    assert (reference.value, reference.run_id) == (0.97, stage_one)
    assert reference.label == f"stage one ({stage_one[:8]}): 0.9700"
    report = write_report(client, parent_id)
    assert (
        f"Stage one (run {stage_one}), which the jobs started from: eval/accuracy 0.9700"
        in report.markdown
    )
    assert "eval_accuracy_vs_boost.gamma.png" in report.files


# A job's overrides whose values hold spaces and quotes, as Hydra hands them over (the shell
# has taken its own quotes off already).
OVERRIDES = [
    "+tags.note='a b'",
    "model.hidden_sizes=[8, 16]",
    "optimizer.lr=0.10",
    "~trainer.seed",
    '++tags.quote="it\'s"',
    "model=mlp",
]


def test_overrides_read_back_whole_with_each_value_as_the_command_line_gave_it(monkeypatch):
    tag = shlex.join(OVERRIDES)  # as ms_exp.overrides and ms_exp.sweep.overrides hold them
    assert read_overrides(tag) == OVERRIDES
    assert override_values(read_overrides(tag)) == {
        "tags.note": "'a b'",
        "model.hidden_sizes": "[8, 16]",
        "optimizer.lr": "0.10",
        "tags.quote": '"it\'s"',
        "model": "mlp",
    }  # a deletion sets no value
    monkeypatch.setenv(SWEPT_KEYS, json.dumps(["model.hidden_sizes", "tags.note"]))
    assert child_run_name(OVERRIDES) == "hidden_sizes=[8, 16],note='a b'"


def test_an_older_tag_joined_by_spaces_still_reads():
    assert read_overrides("optimizer.lr=0.1 model=mlp") == ["optimizer.lr=0.1", "model=mlp"]
    # Split on whitespace as it always was: the pieces of a value with a space are no
    # override and are left out (the report takes such a key from the job's params).
    old = read_overrides(" ".join(OVERRIDES))
    assert old == " ".join(OVERRIDES).split()
    assert override_values(old) == {"optimizer.lr": "0.10", "tags.quote": '"it\'s"', "model": "mlp"}


def test_a_value_with_spaces_is_a_whole_cell_of_the_table(tmp_path):
    client = MlflowClient(store_in(tmp_path))
    experiment = ensure_experiment(client, "report")
    sweep = ["model.hidden_sizes=[8, 16],[32]", "+tags.note='a b'"]
    parent_id = client.create_run(
        experiment,
        run_name="sweep",
        tags={"ms_exp.sweep": "true", "ms_exp.sweep.overrides": shlex.join(sweep)},
    ).info.run_id
    for sizes, accuracy in (("[8, 16]", 0.9), ("[32]", 0.8)):
        overrides = [f"model.hidden_sizes={sizes}", "+tags.note='a b'"]
        run_id = client.create_run(
            experiment,
            tags={"mlflow.parentRunId": parent_id, "ms_exp.overrides": shlex.join(overrides)},
        ).info.run_id
        client.log_metric(run_id, "eval/accuracy", accuracy)
        client.set_terminated(run_id)
    write_report(client, parent_id)
    rows = report_rows(client, parent_id, tmp_path)
    assert [row["model.hidden_sizes"] for row in rows] == ["[8, 16]", "[32]"]


def perplexity_sweep(tmp_path, tags, params=()):
    """Three jobs logging eval/perplexity, which is best low though its name says nothing,
    and eval/accuracy; the parent tagged with ``tags``: the report's table and title."""
    client = MlflowClient(store_in(tmp_path))
    experiment = ensure_experiment(client, "report")
    parent_id = client.create_run(
        experiment, run_name="sweep", tags={"ms_exp.sweep": "true", **tags}
    ).info.run_id
    for key, value in params:
        client.log_param(parent_id, key, value)
    for lr, perplexity, accuracy in (("0.1", 20.0, 0.7), ("0.2", 5.0, 0.9), ("0.3", 9.0, 0.8)):
        run_id = client.create_run(
            experiment,
            run_name=f"lr={lr}",
            tags={"mlflow.parentRunId": parent_id, "ms_exp.overrides": f"optimizer.lr={lr}"},
        ).info.run_id
        client.log_param(run_id, "optimizer.lr", lr)
        client.log_metric(run_id, "eval/perplexity", perplexity)
        client.log_metric(run_id, "eval/accuracy", accuracy)
        client.set_terminated(run_id)

    def report(metric=None):
        title = write_report(client, parent_id, metric).markdown.splitlines()[0]
        lrs = [row["optimizer.lr"] for row in report_rows(client, parent_id, tmp_path)]
        return title[title.index(" jobs, by ") + len(" jobs, by ") :], lrs

    return report


def test_an_optuna_sweep_ranks_its_metric_in_the_direction_it_states(tmp_path):
    optuna = {"ms_exp.optuna.direction": "minimize", "ms_exp.sweep.metric": "eval/perplexity"}
    report = perplexity_sweep(tmp_path, optuna)
    # The sweep's metric by default, in its direction.
    assert report() == (
        "eval/perplexity, lowest first, as the sweep minimizes it",
        ["0.2", "0.3", "0.1"],
    )
    # Another metric: the sweep states nothing about it, its name ranks it.
    assert report("eval/accuracy") == ("eval/accuracy, highest first", ["0.2", "0.3", "0.1"])


def test_an_older_optuna_parent_names_its_metric_in_its_params(tmp_path):
    report = perplexity_sweep(
        tmp_path, {"ms_exp.optuna.direction": "minimize"}, [("sweep.metric", "eval/perplexity")]
    )
    assert report() == (
        "eval/perplexity, lowest first, as the sweep minimizes it",
        ["0.2", "0.3", "0.1"],
    )
    assert report("eval/accuracy") == ("eval/accuracy, highest first", ["0.2", "0.3", "0.1"])


def test_a_basic_sweep_states_no_direction_so_the_name_guesses_it(tmp_path):
    report = perplexity_sweep(tmp_path, {"ms_exp.sweep.metric": "eval/perplexity"})
    # No word of loss, error, time or bytes in it: taken as best high.
    assert report() == ("eval/perplexity, highest first", ["0.1", "0.3", "0.2"])
    assert report("eval/accuracy") == ("eval/accuracy, highest first", ["0.2", "0.3", "0.1"])
