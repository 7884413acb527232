"""The job's MLflow sidecar seen from the job: what MLflow refuses reaches the user and the
run, a store that cannot be opened stops the job at its first step."""

import pytest
from mlflow import MlflowClient

from ms_exp.tracking.sidecar import SidecarTracker, TrackingFailed


@pytest.mark.e2e
def test_a_refused_call_fails_the_run_with_one_warning(tmp_path, capfd, monkeypatch):
    # A sidecar kept idle by an earlier job of this worker writes to the stderr that
    # test captured, not to this one's.
    monkeypatch.setattr("ms_exp.tracking.sidecar._IDLE", [])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SidecarTracker(uri, "exp", "refused", {"ms_exp.model": "mlp"})
    tracker.log_params({"optimizer.lr": 0.1})
    # MLflow never lets a param change its value: refused twice, warned once.
    tracker.log_params({"optimizer.lr": 0.2})
    tracker.log_params({"optimizer.lr": 0.3})
    tracker.log_metrics({"train/loss": 1.5}, step=1)
    with pytest.raises(TrackingFailed, match=r"MLflow refused log_params: .*\(and 1 more\)"):
        tracker.finish("FINISHED")
    warnings = [line for line in capfd.readouterr().err.splitlines() if "ms_exp: warning" in line]
    assert len(warnings) == 1 and "log_params" in warnings[0]
    run = MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["ms_exp.error"].startswith("MLflow refused log_params")
    assert run.data.params["optimizer.lr"] == "0.1"
    assert run.data.metrics["train/loss"] == 1.5  # what was accepted is kept


@pytest.mark.e2e
def test_a_store_that_cannot_be_opened_stops_the_job_at_its_first_step(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    uri = f"sqlite:///{blocker / 'mlflow.db'}"
    tracker = SidecarTracker(uri, "exp", "nowhere", {})
    with pytest.raises(
        TrackingFailed,
        match=r"tracking.uri=sqlite:///.*/file/mlflow.db: "
        r"no MLflow run could be created",
    ):
        tracker.wait_for_run()
    tracker.finish("FAILED")  # nothing to end: returns, the job's own error stands


@pytest.mark.e2e
def test_everything_sent_is_in_the_store_after_flush(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SidecarTracker(uri, "exp", "flushed", {})
    for step in range(1, 301):
        tracker.log_metrics({"train/loss": 1 / step, "train/step_time_ms": 4.0}, step=step)
    artifact = tmp_path / "config.yaml"
    artifact.write_text("a: 1\n")
    tracker.log_artifact(artifact, "config")
    tracker.set_tags({"ms_exp.placement": "device"})
    tracker.flush()
    client = MlflowClient(uri)
    history = client.get_metric_history(tracker.run_id, "train/loss")
    assert [m.step for m in history] == list(range(1, 301))
    assert client.get_run(tracker.run_id).info.status == "RUNNING"
    assert [a.path for a in client.list_artifacts(tracker.run_id, "config")] == [
        "config/config.yaml"
    ]
    tracker.finish("FINISHED")
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ms_exp.placement"] == "device"


@pytest.mark.e2e
def test_the_next_job_of_a_process_reuses_its_sidecar(tmp_path, monkeypatch):
    # A sweep's jobs under the basic launcher run in one process: starting a sidecar per
    # job would pay MLflow's import every time.
    runs = []
    for job in ("first", "second"):
        workdir = tmp_path / job
        workdir.mkdir()
        monkeypatch.chdir(workdir)
        uri = f"sqlite:///{workdir / 'mlflow.db'}"
        tracker = SidecarTracker(uri, "exp", job, {})
        tracker.log_metrics({"train/loss": len(runs) + 1.0}, step=1)
        tracker.finish("FINISHED")
        runs.append((uri, tracker.run_id, tracker._process.pid))
    (uri1, run1, pid1), (uri2, run2, pid2) = runs
    assert pid1 == pid2
    assert MlflowClient(uri1).get_run(run1).data.metrics == {"train/loss": 1.0}
    second = MlflowClient(uri2).get_run(run2)
    assert second.info.status == "FINISHED" and second.data.metrics == {"train/loss": 2.0}
    assert second.info.run_name == "second"
