"""``python -m ms_exp.report``: a sweep's table and plots, logged into its parent run; and
the checkpoint costs every run records for it (``checkpoint/save_time_s``,
``checkpoint/bytes_rank_<r>``)."""
import csv
from pathlib import Path

import pytest
from conftest import FAST, run_cli, train
from mlflow import MlflowClient

from ms_exp import report
from ms_exp.tracking.store import ensure_experiment
from ms_exp.tracking.sweep_report import (
    Reference,
    ReportError,
    metric_figure,
    stage_one_references,
    swept_keys,
    write_report,
)

PLOTS = {"eval_accuracy_vs_checkpoint.integrated_save.png", "train_loss.png"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A two-job sweep over integrated_save: ``(cwd, client, parent run, children)``."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = run_cli("ms_exp.run", ["-m", *FAST, "trainer.epochs=1",
                                    "checkpoint.integrated_save=true,false"], cwd)
    assert result.rc == 0, result.stderr[-3000:]
    client = result.store
    (parent,) = client.search_runs(["1"], "tags.`ms_exp.sweep` = 'true'")
    children = client.search_runs(["1"], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 2
    return cwd, client, parent, children


def report_rows(client, run_id, tmp_path):
    path = client.download_artifacts(run_id, "report/summary.csv", str(tmp_path))
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
def test_report_of_a_sweep_folder_is_logged_into_its_parent_run(sweep, tmp_path):
    cwd, client, parent, children = sweep
    result = run_cli("ms_exp.report", [parent.data.tags["ms_exp.sweep.dir"]], cwd)
    assert result.rc == 0, result.stderr[-3000:]
    assert "| run_name | job | status | checkpoint.integrated_save | eval/accuracy |" \
        in result.stdout
    assert "mlflow ui --backend-store-uri" in result.stdout

    run_id = parent.info.run_id
    logged = {Path(a.path).name for a in client.list_artifacts(run_id, "report")}
    assert logged == {"summary.csv", "summary.md", *PLOTS}
    rows = report_rows(client, run_id, tmp_path)
    by_id = {c.info.run_id: c for c in children}
    assert {r["run_id"] for r in rows} == set(by_id)
    assert float(rows[0]["eval/accuracy"]) >= float(rows[1]["eval/accuracy"])
    for row in rows:
        child = by_id[row["run_id"]]
        metrics = child.data.metrics
        assert row["status"] == "FINISHED" and row["error"] == ""
        assert row["checkpoint.integrated_save"] == child.data.params["checkpoint.integrated_save"]
        for column in ("eval/accuracy", "eval/loss", "train/loss"):
            assert float(row[column]) == metrics[column]
        assert float(row["ckpt_save_s"]) == metrics["checkpoint/save_time_s"] > 0
        assert int(row["ckpt_bytes_rank_0"]) == metrics["checkpoint/bytes_rank_0"] > 0
        assert float(row["duration_s"]) > 0
    markdown = Path(client.download_artifacts(run_id, "report/summary.md", str(tmp_path)))
    assert markdown.read_text() in result.stdout + "\n"


@pytest.mark.e2e
def test_report_by_parent_id_or_job_folder_and_another_metric(sweep, tmp_path):
    cwd, client, parent, _ = sweep
    run_id = parent.info.run_id
    by_id = run_cli("ms_exp.report", [run_id, "--metric", "train/loss"], cwd)
    assert by_id.rc == 0, by_id.stderr[-3000:]
    assert f"({run_id}): 2 jobs, by train/loss, lowest first" in by_id.stdout
    rows = report_rows(client, run_id, tmp_path)
    assert float(rows[0]["train/loss"]) <= float(rows[1]["train/loss"])
    assert "train_loss_vs_checkpoint.integrated_save.png" in \
        {Path(a.path).name for a in client.list_artifacts(run_id, "report")}

    job = Path(parent.data.tags["ms_exp.sweep.dir"]) / "1"
    by_job = run_cli("ms_exp.report", [str(job)], cwd)
    assert by_job.rc == 0, by_job.stderr[-3000:]
    assert f"({run_id}): 2 jobs, by eval/accuracy" in by_job.stdout


def one_line_error(rc: int, stdout: str, stderr: str) -> str:
    assert rc == 2 and stdout == "", stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ms_exp.report: error: "), stderr
    return lines[0]


@pytest.mark.e2e
def test_unknown_run_id_is_one_line_and_exit_2(sweep):
    cwd = sweep[0]
    result = run_cli("ms_exp.report", ["0123abcd"], cwd)
    assert "no run '0123abcd'" in one_line_error(result.rc, result.stdout, result.stderr)


@pytest.mark.e2e
def test_what_is_no_sweep_is_refused_in_one_line(sweep, workdir, capsys):
    """In-process, to spare an MLflow import per case; the command line is the same."""
    cwd, _, parent, children = sweep
    store = ["--tracking-uri", f"sqlite:///{cwd / 'mlflow.db'}"]

    def error(*args) -> str:
        return one_line_error(report.main(list(args)), *capsys.readouterr())

    assert "no sweep recorded for folder" in error(str(workdir), *store)
    assert f"its sweep is run {parent.info.run_id}" in error(children[0].info.run_id, *store)
    assert "logged 'eval/acc'" in error(parent.info.run_id, "--metric", "eval/acc", *store)
    # No store in the working directory: refused, and none created.
    assert "no MLflow store at" in error(parent.info.run_id)
    assert not (workdir / "mlflow.db").exists()


@pytest.mark.e2e
def test_plain_run_records_what_its_checkpoints_cost(tmp_path):
    result = train(tmp_path, "trainer.epochs=1")
    metrics = result.store.get_run(result.run_id).data.metrics
    rank_0 = result.run_dir / "checkpoints" / "rank_0"
    # One checkpoint per epoch, none after the evaluation (best.ckpt is not counted).
    (saved,) = rank_0.glob("checkpoint-*.ckpt")
    assert metrics["checkpoint/bytes_rank_0"] == saved.stat().st_size
    assert 0 < metrics["checkpoint/save_time_s"] < 60


@pytest.fixture
def recorded_sweep(tmp_path):
    """A parent and four jobs written straight into a store, no training: one diverged
    (NaN accuracy), one failed."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = ensure_experiment(client, "report")
    parent = client.create_run(experiment, run_name="sweep", tags={"ms_exp.sweep": "true"})
    parent_id = parent.info.run_id
    client.log_param(parent_id, "optimizer.lr", "0.01,0.1,0.5,1.0")
    client.log_param(parent_id, "trainer.epochs", "1")
    for lr, accuracy, status in (("0.01", 0.5, "FINISHED"), ("0.1", 0.9, "FINISHED"),
                                 ("0.5", float("nan"), "FINISHED"), ("1.0", None, "FAILED")):
        run_id = client.create_run(experiment, run_name=f"lr={lr}", tags={
            "mlflow.parentRunId": parent_id, "ms_exp.overrides": f"optimizer.lr={lr}"}).info.run_id
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


@pytest.mark.e2e
def test_write_report_in_process_ranks_failed_jobs_last(recorded_sweep, tmp_path):
    client, parent_id = recorded_sweep
    report = write_report(client, parent_id)
    assert report.files == ["eval_accuracy_vs_optimizer.lr.png", "summary.csv", "summary.md",
                            "train_loss.png"]
    assert report.artifact_uri.endswith(f"/{parent_id}/artifacts/report")
    rows = report_rows(client, parent_id, tmp_path)
    assert [r["optimizer.lr"] for r in rows[:2]] == ["0.1", "0.01"]
    assert {(r["optimizer.lr"], r["status"]) for r in rows[2:]} == \
        {("0.5", "FINISHED"), ("1.0", "FAILED")}
    (failed,) = [r for r in rows if r["status"] == "FAILED"]
    assert failed["error"] == "FloatingPointError: loss is nan |\nstep 2"
    # One line per row in Markdown, the pipe escaped; no checkpoint columns without metrics.
    assert "| lr=1.0 | FAILED | 1.0 |  | 1.0000 |" in report.markdown
    assert "FloatingPointError: loss is nan \\| step 2 |" in report.markdown
    assert "ckpt_" not in report.markdown


def test_swept_keys_without_sweep_params_are_the_params_that_differ(recorded_sweep):
    client, parent_id = recorded_sweep
    parent = client.get_run(parent_id)
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent_id}'")
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
    rows = [{"boost.gamma": gamma, "eval/accuracy": accuracy} for gamma, accuracy in (
        ("0.8", 0.9), ("0.8", 0.9), ("0.9", 0.91), ("0.9", 0.88), ("0.9", 0.88),
        ("0.9", None))]
    stage_one = Reference("stage one (0123abcd): 0.9700", 0.97, "0123abcd" * 4)
    axes = metric_figure(rows, "boost.gamma", "eval/accuracy", [stage_one]).axes[0]
    points = jobs_scatter(axes)
    assert len(points) == len(set(points)) == 5
    assert sorted(round(y, 2) for _, y in points) == [0.88, 0.88, 0.9, 0.9, 0.91]
    # Each job stays nearer its own value than the next one.
    assert sorted(round(x, 1) for x, _ in points) == [0.8, 0.8, 0.9, 0.9, 0.9]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == \
        ["mean of the jobs with each boost.gamma", "each job", "stage one (0123abcd): 0.9700"]
    mean, reference = axes.lines
    assert list(mean.get_xdata()) == [0.8, 0.9]
    assert [round(y, 4) for y in mean.get_ydata()] == [0.9, round((0.91 + 0.88 * 2) / 3, 4)]
    assert list(reference.get_ydata()) == [0.97, 0.97]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["0.8", "0.9"]
    assert axes.get_title() == "eval/accuracy against boost.gamma (5 jobs; 1 failed or without it)"


def test_categorical_values_spread_their_jobs_too():
    rows = [{"checkpoint.integrated_save": flag, "eval/accuracy": 0.5}
            for flag in ("true", "true", "false")]
    axes = metric_figure(rows, "checkpoint.integrated_save", "eval/accuracy").axes[0]
    points = jobs_scatter(axes)
    assert len(set(points)) == 3
    assert [t.get_text() for t in axes.get_xticklabels()] == ["false", "true"]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == \
        ["mean of the jobs with each checkpoint.integrated_save", "each job"]
    assert metric_figure([{"k": "1", "eval/accuracy": None}], "k", "eval/accuracy") is None


def test_stage_two_report_states_stage_ones_score(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = ensure_experiment(client, "report")
    stage_one = client.create_run(experiment, run_name="dim_reduce-stage-one").info.run_id
    client.log_metric(stage_one, "eval/accuracy", 0.97)
    client.set_terminated(stage_one)
    parent = client.create_run(experiment, run_name="sweep", tags={"ms_exp.sweep": "true"})
    parent_id = parent.info.run_id
    client.log_param(parent_id, "boost.gamma", "0.8,0.9")
    for gamma in ("0.8", "0.9"):
        run_id = client.create_run(experiment, run_name=f"gamma={gamma}", tags={
            "mlflow.parentRunId": parent_id,
            "ms_exp.overrides": f"boost.gamma={gamma}"}).info.run_id
        client.log_param(run_id, "boost.gamma", gamma)
        client.log_param(run_id, "boost.stage_one_run_id", stage_one)
        client.log_metric(run_id, "eval/accuracy", 0.93)
        client.set_terminated(run_id)
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent_id}'")
    (reference,) = stage_one_references(client, children, "eval/accuracy")
    assert (reference.value, reference.run_id) == (0.97, stage_one)
    assert reference.label == f"stage one ({stage_one[:8]}): 0.9700"
    report = write_report(client, parent_id)
    assert f"Stage one (run {stage_one}), which the jobs started from: eval/accuracy 0.9700" \
        in report.markdown
    assert "eval_accuracy_vs_boost.gamma.png" in report.files
