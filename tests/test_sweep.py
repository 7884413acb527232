"""A multirun is one MLflow parent run with every job's run as its child (the
``mlflow.parentRunId`` tag the UI nests by); the parent ends FINISHED, FAILED or KILLED
with its jobs, never RUNNING, and runs after it are nobody's children."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST, run_cli
from mlflow import MlflowClient

from ms_exp.tracking import sweep

TINY = (*FAST, "trainer.epochs=1")


def parent_and_children(client):
    runs = client.search_runs(["1"])
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = [r for r in runs if r is not parents[0]]
    return parents[0], children


def summary_rows(client, run_id, tmp_path):
    path = client.download_artifacts(run_id, "report/summary.csv", str(tmp_path))
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_sweep_is_one_parent_run_with_the_jobs_as_children(tmp_path):
    result = run_cli("ms_exp.run", ["-m", *TINY, "optimizer.lr=0.01,0.1"], tmp_path)
    assert result.rc == 0, result.stderr[-2000:]
    client = result.store
    parent, children = parent_and_children(client)
    assert len(children) == 2
    assert {c.data.tags.get("mlflow.parentRunId") for c in children} == {parent.info.run_id}
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name.startswith("sweep-run-")
    assert parent.data.metrics == {"sweep/jobs": 2.0, "sweep/finished_jobs": 2.0,
                                   "sweep/failed_jobs": 0.0, "sweep/skipped_jobs": 0.0}
    # The sweep's overrides are the parent's params; each child is named by its values
    # and tagged with the sweep's id.
    assert parent.data.params == {"trainer.progress_bar": "never", "trainer.epochs": "1",
                                  "optimizer.lr": "0.01,0.1"}
    assert sorted(c.info.run_name for c in children) == ["lr=0.01", "lr=0.1"]
    assert {c.data.tags["ms_exp.sweep.id"] for c in children} == {parent.info.run_id}
    tags = parent.data.tags
    assert tags["ms_exp.sweep.overrides"] == \
        "trainer.progress_bar=never trainer.epochs=1 optimizer.lr=0.01,0.1"
    assert "-m trainer.progress_bar=never" in tags["ms_exp.command"]
    assert "ms_exp.sweep.failed_jobs" not in tags
    # The job folders are multirun/<date>/<time>/0 and /1.
    assert {str(Path(c.data.tags["ms_exp.run_dir"]).parent)
            for c in children} == {tags["ms_exp.sweep.dir"]}
    assert sorted(Path(c.data.tags["ms_exp.run_dir"]).relative_to(tmp_path).parts[::3]
                  for c in children) == [("multirun", "0"), ("multirun", "1")]

    rows = summary_rows(client, parent.info.run_id, tmp_path)
    assert {"run_id", "run_name", "status", "optimizer.lr", "eval/accuracy",
            "train/loss"} <= set(rows[0])
    assert sorted(r["optimizer.lr"] for r in rows) == ["0.01", "0.1"]
    assert {r["run_id"] for r in rows} == {c.info.run_id for c in children}
    by_id = {c.info.run_id: c for c in children}
    for row in rows:
        assert row["status"] == "FINISHED"
        assert float(row["eval/accuracy"]) == by_id[row["run_id"]].data.metrics["eval/accuracy"]
        assert float(row["train/loss"]) == by_id[row["run_id"]].data.metrics["train/loss"]


# The second job's data reader fails after the command line was validated; then, in the
# same process, a plain run, which must not become a child of the failed sweep.
FAILING_SWEEP = """
import json, os, sys
import ms_exp.data
from ms_exp.run import main

read = ms_exp.data.create_datasets

def reader(dataset_cfg, *args, **kwargs):
    if dataset_cfg.split_seed == 1:
        raise OSError("disk went away")
    return read(dataset_cfg, *args, **kwargs)

ms_exp.data.create_datasets = reader
args = sys.argv[1:]  # main() rewrites sys.argv for Hydra
try:
    main(["-m", *args, "dataset.split_seed=0,1"])
    code = 0
except SystemExit as exit:
    code = exit.code
left = os.environ.get("MS_EXP_PARENT_RUN_ID")
single = main([*args, "tracking.run_name=after"])
print("RESULT " + json.dumps({"sweep": code, "left": left, "single": single}))
"""


@pytest.mark.slow
def test_failed_job_fails_the_sweep_and_a_later_run_is_no_child(tmp_path):
    done = subprocess.run([sys.executable, "-c", FAILING_SWEEP, *TINY], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    line = [text for text in done.stdout.splitlines() if text.startswith("RESULT ")]
    assert line, done.stdout[-2000:] + done.stderr[-3000:]
    # Hydra runs the whole batch, then exits 1 for the failed job.
    assert json.loads(line[0][len("RESULT "):]) == {"sweep": 1, "left": None, "single": 0}
    assert "OSError: disk went away" in done.stderr

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent, others = parent_and_children(client)
    assert parent.info.status == "FAILED"
    assert parent.data.metrics == {"sweep/jobs": 2.0, "sweep/finished_jobs": 1.0,
                                   "sweep/failed_jobs": 1.0, "sweep/skipped_jobs": 0.0}
    assert parent.data.tags["ms_exp.sweep.failed_jobs"] == \
        "#1 trainer.progress_bar=never trainer.epochs=1 dataset.split_seed=1"
    (after,) = [r for r in others if r.info.run_name == "after"]
    assert "mlflow.parentRunId" not in after.data.tags and after.info.status == "FINISHED"
    children = {r.data.params["dataset.split_seed"]: r for r in others if r is not after}
    assert {seed: c.info.status for seed, c in children.items()} == \
        {"0": "FINISHED", "1": "FAILED"}
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id
               for c in children.values())
    rows = summary_rows(client, parent.info.run_id, tmp_path)
    assert {r["dataset.split_seed"]: r["status"] for r in rows} == \
        {"0": "FINISHED", "1": "FAILED"}


@pytest.mark.slow
def test_interrupted_sweep_is_killed_with_its_running_job(tmp_path):
    # Ctrl-C. (Once MindSpore runs, its native handler turns SIGINT into SIGTERM anyway.)
    args = [sys.executable, "-m", "ms_exp.run", "-m", *FAST, "trainer.epochs=500",
            "dataset=synthetic", "dataset.num_samples=4096", "checkpoint=none",
            "optimizer.lr=0.01,0.1"]
    process = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    for line in process.stdout:
        if line.startswith("epoch: 2 "):
            break
        assert time.time() < deadline
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=120)[0]
    assert process.returncode == 130, rest[-3000:]

    parent, children = parent_and_children(
        MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"))
    assert parent.info.status == "KILLED"
    assert [c.info.status for c in children] == ["KILLED"]  # the second job never started
    # One job had started (its run is KILLED); none finished or failed.
    assert parent.data.metrics == {"sweep/jobs": 1.0, "sweep/finished_jobs": 0.0,
                                   "sweep/failed_jobs": 0.0, "sweep/skipped_jobs": 0.0}


@pytest.mark.slow
def test_sweep_without_tracking_records_nothing(tmp_path):
    result = run_cli("ms_exp.run", ["-m", *TINY, "tracking.enabled=false"], tmp_path)
    assert result.rc == 0, result.stderr[-2000:]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlartifacts").exists()


def test_jobs_that_record_elsewhere_get_no_parent(monkeypatch):
    monkeypatch.setenv(sweep.PARENT_RUN_ID, "abc")
    monkeypatch.setenv(sweep.PARENT_TRACKING_URI, "sqlite:////x/mlflow.db")
    monkeypatch.setenv(sweep.PARENT_EXPERIMENT, "ms_exp")
    assert sweep.parent_run_id("sqlite:////x/mlflow.db", "ms_exp") == "abc"
    # A sweep over tracking.experiment_name or tracking.uri: the parent is elsewhere.
    assert sweep.parent_run_id("sqlite:////x/mlflow.db", "other") is None
    assert sweep.parent_run_id("http://127.0.0.1:5000", "ms_exp") is None
    monkeypatch.delenv(sweep.PARENT_RUN_ID)
    assert sweep.parent_run_id("sqlite:////x/mlflow.db", "ms_exp") is None


@pytest.mark.slow
def test_concurrent_jobs_on_a_fresh_store_lose_no_runs(tmp_path):
    """Four jobs, two at a time in joblib's worker processes, the store created by none of
    them beforehand: one parent, four children, nothing misfiled in "Default"."""
    result = run_cli("ms_exp.run", ["-m", *TINY, "hydra/launcher=concurrent",
                                    "optimizer.lr=0.01,0.02,0.05,0.1"], tmp_path)
    assert result.rc == 0, result.stdout[-2000:] + result.stderr[-2000:]
    client = result.store
    everywhere = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(everywhere) == 5
    parent, children = parent_and_children(client)
    assert sorted(c.info.run_name for c in children) == \
        ["lr=0.01", "lr=0.02", "lr=0.05", "lr=0.1"]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert parent.info.status == "FINISHED" and parent.data.metrics["sweep/jobs"] == 4
    # Two at a time, really: some job started before another ended.
    spans = sorted((c.info.start_time, c.info.end_time) for c in children)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


@pytest.mark.slow
def test_rerunning_a_sweep_skips_the_jobs_that_already_finished(tmp_path):
    first = run_cli("ms_exp.run", ["-m", *TINY, "optimizer.lr=0.01,0.1"], tmp_path)
    assert first.rc == 0, first.stderr[-2000:]
    again = run_cli("ms_exp.run", ["-m", *TINY, "optimizer.lr=0.01,0.1,0.2",
                                   "tracking.skip_finished=true"], tmp_path)
    assert again.rc == 0, again.stderr[-2000:]
    assert again.stdout.count("already finished with this config") == 2
    client = again.store
    sweeps = client.search_runs(["1"], "tags.`ms_exp.sweep` = 'true'",
                                order_by=["attributes.start_time DESC"])
    latest = sweeps[0]
    children = client.search_runs(["1"], f"tags.mlflow.parentRunId = '{latest.info.run_id}'")
    assert [c.info.run_name for c in children] == ["lr=0.2"]
    assert latest.data.metrics["sweep/skipped_jobs"] == 2
    assert latest.data.metrics["sweep/jobs"] == 3
    skipped = {k for k in latest.data.tags if k.startswith("ms_exp.sweep.skipped.")}
    first_children = client.search_runs(
        ["1"], f"tags.mlflow.parentRunId = '{sweeps[1].info.run_id}'")
    assert skipped == {f"ms_exp.sweep.skipped.{c.info.run_id}" for c in first_children}


def test_launcher_presets_compose_to_hydras_plugins():
    from ms_exp.preflight.compose import compose_config

    slurm = compose_config(["hydra/launcher=slurm"], return_hydra_config=True).hydra.launcher
    assert slurm._target_.endswith("SlurmLauncher")
    assert (slurm.tasks_per_node, slurm.timeout_min) == (1, 240)
    concurrent = compose_config(["hydra/launcher=concurrent"],
                                return_hydra_config=True).hydra.launcher
    assert concurrent._target_.endswith("JoblibLauncher") and concurrent.n_jobs == 2
