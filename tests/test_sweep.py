"""A multirun is one MLflow parent run with every job's run as its child (the
``mlflow.parentRunId`` tag the UI nests by); the parent ends FINISHED, FAILED or KILLED
with its jobs, never RUNNING, and runs after it are nobody's children. ``python -m
ms_exp.report`` makes a real sweep's table and plots again, logged into its parent run; every
job records what its checkpoints cost (``checkpoint/save_time_s``, ``checkpoint/bytes_rank_<r>``).

One sweep (``lr_sweep``: four jobs, two at a time in joblib's worker processes, on a fresh
store) serves every test that reads a finished sweep; the test that re-runs it with
``tracking.skip_finished=true`` comes last."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import FAST, main_in_process, migrated_store, run_cli
from mlflow import MlflowClient

from ms_exp import report
from ms_exp.tracking import sweep

# Two training steps a job, on a small network.
DATA = (
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)
TINY = (*FAST, "trainer.epochs=1", *DATA)
PLOTS = {"eval_accuracy_vs_optimizer.lr.png", "train_loss.png"}


def parent_and_children(client, runs=None):
    runs = client.search_runs(["1"]) if runs is None else runs
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = [r for r in runs if r is not parents[0]]
    return parents[0], children


def with_store(folder: Path) -> Path:
    """``folder`` with a copy of the migrated empty MLflow store, as ``train()`` gives a job:
    where a store's first use is not the behaviour (it is in ``lr_sweep``), no test pays its
    migrations."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "mlflow.db").exists():
        shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return folder


def summary_rows(client, run_id, tmp_path):
    path = client.download_artifacts(run_id, "report/summary.csv", str(tmp_path))
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


LRS = ("0.01", "0.02", "0.05", "0.1")
SWEEP = (*TINY, "hydra/launcher=concurrent", f"optimizer.lr={','.join(LRS)}")


@pytest.fixture(scope="module")
def lr_sweep(tmp_path_factory):
    """Four jobs over optimizer.lr, two at a time in joblib's worker processes, the store
    created by none of them beforehand: ``(result, client, parent, children)``, its runs
    as the sweep left them (and every run of the store then in ``result.everywhere``)."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = run_cli("ms_exp.run", ["-m", *SWEEP], cwd)
    assert result.rc == 0, result.stdout[-2000:] + result.stderr[-2000:]
    client = result.store
    result.everywhere = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parent, children = parent_and_children(client)
    return result, client, parent, children


@pytest.mark.e2e
def test_sweep_is_one_parent_run_with_the_jobs_as_children(lr_sweep, tmp_path):
    result, client, parent, children = lr_sweep
    cwd = result.cwd
    assert len(children) == 4
    assert {c.data.tags.get("mlflow.parentRunId") for c in children} == {parent.info.run_id}
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name.startswith("sweep-run-")
    assert parent.data.metrics == {
        "sweep/jobs": 4.0,
        "sweep/finished_jobs": 4.0,
        "sweep/failed_jobs": 0.0,
        "sweep/pruned_jobs": 0.0,
        "sweep/skipped_jobs": 0.0,
    }
    # The sweep's overrides are the parent's params; each child is named by its values
    # and tagged with the sweep's id.
    assert parent.data.params == {
        **dict(o.split("=", 1) for o in TINY),
        "optimizer.lr": ",".join(LRS),
    }
    assert sorted(c.info.run_name for c in children) == [f"lr={lr}" for lr in LRS]
    assert {c.data.tags["ms_exp.sweep.id"] for c in children} == {parent.info.run_id}
    tags = parent.data.tags
    assert tags["ms_exp.sweep.overrides"] == " ".join([*TINY, f"optimizer.lr={','.join(LRS)}"])
    assert "-m trainer.progress_bar=never" in tags["ms_exp.command"]
    assert "ms_exp.sweep.failed_jobs" not in tags
    # The job folders are multirun/<date>/<time>/0 to /3.
    assert {str(Path(c.data.tags["ms_exp.run_dir"]).parent) for c in children} == {
        tags["ms_exp.sweep.dir"]
    }
    assert sorted(
        Path(c.data.tags["ms_exp.run_dir"]).relative_to(cwd).parts[::3] for c in children
    ) == [("multirun", str(n)) for n in range(4)]

    # The sweep ends saying where its jobs, its report and its parent run are.
    run_id, experiment = parent.info.run_id, parent.info.experiment_id
    report_dir = Path(client.get_run(run_id).info.artifact_uri[len("file://") :]) / "report"
    end = result.stdout.splitlines()[-9:]
    assert end[:4] == [
        f"sweep folder: {tags['ms_exp.sweep.dir']} (a folder per job, by number)",
        "sweep report: eval_accuracy_vs_optimizer.lr.png, summary.csv, summary.md, train_loss.png",
        f"  in {report_dir}",
        f"MLflow parent run {run_id} (experiment {experiment}, FINISHED, 4 of 4 jobs "
        f"finished) in sqlite:///{cwd.resolve() / 'mlflow.db'}",
    ]
    assert (report_dir / "summary.md").is_file()
    assert end[4].startswith("report again: ") and end[4].endswith(f" -m ms_exp.report {run_id}")
    assert end[5].startswith("open it with: ") and "ui --backend-store-uri" in end[5]
    ui = "http://127.0.0.1:5000/#"
    view = "workflowType=machine_learning"  # MLflow 3's training view, not its GenAI one
    assert end[6] == f"  then browse to {ui}/experiments/{experiment}/runs/{run_id}?{view}"
    # The jobs best first on one compare page, and the runs table of the jobs alone.
    compare = re.fullmatch(
        rf"  compare its jobs: {re.escape(ui)}/compare-runs\?runs=(\S+)"
        rf"&experiments=(\S+)&{view}",
        end[7],
    )
    assert compare, end[7]
    ranked = json.loads(unquote(compare.group(1)))
    assert json.loads(unquote(compare.group(2))) == [experiment]
    accuracy = {c.info.run_id: c.data.metrics["eval/accuracy"] for c in children}
    assert sorted(ranked) == sorted(accuracy)
    assert [accuracy[r] for r in ranked] == sorted(accuracy.values(), reverse=True)
    assert end[8] == (
        f"  its jobs in a table, swept keys and eval/accuracy as columns: "
        f"{ui}/experiments/{experiment}/runs?viewStateShareKey={run_id}&{view}"
    )
    shared = json.loads(client.get_experiment(experiment).tags[f"mlflow.sharedViewState.{run_id}"])
    assert shared["searchFilter"] == f"tags.`mlflow.parentRunId` = '{run_id}'"
    assert shared["selectedColumns"][:2] == ["params.`optimizer.lr`", "metrics.`eval/accuracy`"]
    # As printed, in a shell of the PATH the sweep ran with: the command says `python` where
    # that PATH finds this interpreter by the name (its virtual environment activated), else
    # its path. Both kinds of shell: test_security.py's
    # test_printed_python_command_runs_without_an_activated_environment.
    again = subprocess.run(
        end[4][len("report again: ") :],
        shell=True,
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and f"({run_id}): 4 jobs" in again.stdout, again.stderr

    rows = summary_rows(client, parent.info.run_id, tmp_path)
    assert {"run_id", "run_name", "status", "optimizer.lr", "eval/accuracy", "train/loss"} <= set(
        rows[0]
    )
    assert sorted(r["optimizer.lr"] for r in rows) == list(LRS)
    assert {r["run_id"] for r in rows} == {c.info.run_id for c in children}
    by_id = {c.info.run_id: c for c in children}
    for row in rows:
        assert row["status"] == "FINISHED"
        assert float(row["eval/accuracy"]) == by_id[row["run_id"]].data.metrics["eval/accuracy"]
        assert float(row["train/loss"]) == by_id[row["run_id"]].data.metrics["train/loss"]


@pytest.mark.e2e
def test_report_of_a_sweep_folder_is_logged_into_its_parent_run(lr_sweep, tmp_path):
    result, client, parent, children = lr_sweep
    # In-process: the command line itself runs in the test above ("report again").
    report_run = main_in_process(
        "ms_exp.report", [parent.data.tags["ms_exp.sweep.dir"]], result.cwd
    )
    assert report_run.rc == 0, report_run.stderr[-3000:]
    assert "| run_name | job | status | optimizer.lr | eval/accuracy |" in report_run.stdout
    assert "mlflow ui --backend-store-uri" in report_run.stdout

    run_id = parent.info.run_id
    logged = {Path(a.path).name for a in client.list_artifacts(run_id, "report")}
    assert logged == {"summary.csv", "summary.md", *PLOTS}
    rows = summary_rows(client, run_id, tmp_path)
    by_id = {c.info.run_id: c for c in children}
    assert {r["run_id"] for r in rows} == set(by_id)
    accuracies = [float(r["eval/accuracy"]) for r in rows]
    assert accuracies == sorted(accuracies, reverse=True)
    for row in rows:
        child = by_id[row["run_id"]]
        metrics = child.data.metrics
        assert row["status"] == "FINISHED" and row["error"] == ""
        assert row["optimizer.lr"] == child.data.params["optimizer.lr"]
        for column in ("eval/accuracy", "eval/loss", "train/loss"):
            assert float(row[column]) == metrics[column]
        assert float(row["ckpt_save_s"]) == metrics["checkpoint/save_time_s"] > 0
        assert int(row["ckpt_bytes_rank_0"]) == metrics["checkpoint/bytes_rank_0"] > 0
        assert float(row["duration_s"]) > 0
    markdown = Path(client.download_artifacts(run_id, "report/summary.md", str(tmp_path)))
    assert markdown.read_text() in report_run.stdout + "\n"


@pytest.mark.e2e
def test_report_by_parent_id_or_job_folder_and_another_metric(lr_sweep, tmp_path):
    result, client, parent, _ = lr_sweep
    run_id = parent.info.run_id
    by_id = main_in_process("ms_exp.report", [run_id, "--metric", "train/loss"], result.cwd)
    assert by_id.rc == 0, by_id.stderr[-3000:]
    assert f"({run_id}): 4 jobs, by train/loss, lowest first" in by_id.stdout
    rows = summary_rows(client, run_id, tmp_path)
    losses = [float(r["train/loss"]) for r in rows]
    assert losses == sorted(losses)
    assert "train_loss_vs_optimizer.lr.png" in {
        Path(a.path).name for a in client.list_artifacts(run_id, "report")
    }

    job = Path(parent.data.tags["ms_exp.sweep.dir"]) / "1"
    by_job = main_in_process("ms_exp.report", [str(job)], result.cwd)
    assert by_job.rc == 0, by_job.stderr[-3000:]
    assert f"({run_id}): 4 jobs, by eval/accuracy" in by_job.stdout


def one_line_error(rc: int, stdout: str, stderr: str) -> str:
    assert rc == 2 and stdout == "", stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ms_exp.report: error: "), stderr
    return lines[0]


@pytest.mark.e2e
def test_what_is_no_sweep_is_refused_in_one_line(lr_sweep, workdir, capsys):
    """In-process, to spare an MLflow import per case; the command line is the same."""
    result, _, parent, children = lr_sweep
    store = ["--tracking-uri", f"sqlite:///{result.cwd / 'mlflow.db'}"]

    def error(*args) -> str:
        return one_line_error(report.main(list(args)), *capsys.readouterr())

    unknown = main_in_process("ms_exp.report", ["0123abcd"], result.cwd)
    assert "no run '0123abcd'" in one_line_error(unknown.rc, unknown.stdout, unknown.stderr)
    assert "no sweep recorded for folder" in error(str(workdir), *store)
    assert f"its sweep is run {parent.info.run_id}" in error(children[0].info.run_id, *store)
    assert "logged 'eval/acc'" in error(parent.info.run_id, "--metric", "eval/acc", *store)
    # No store in the working directory: refused, and none created.
    assert "no MLflow store at" in error(parent.info.run_id)
    assert not (workdir / "mlflow.db").exists()


@pytest.mark.e2e
def test_every_job_records_what_its_checkpoints_cost(lr_sweep):
    _, _, _, children = lr_sweep
    for child in children:
        metrics = child.data.metrics
        rank_0 = Path(child.data.tags["ms_exp.run_dir"]) / "checkpoints" / "rank_0"
        # One checkpoint per epoch, none after the evaluation (best.ckpt is not counted).
        (saved,) = rank_0.glob("checkpoint-*.ckpt")
        assert metrics["checkpoint/bytes_rank_0"] == saved.stat().st_size
        assert 0 < metrics["checkpoint/save_time_s"] < 60


# The second job's data reader fails after the command line was validated; then, in the
# same process, a plain run, which must not become a child of the failed sweep, a plain run
# that fails, (in a folder of its own) a sweep that records nothing, and (in lr_sweep's
# folder) lr_sweep again with tracking.skip_finished=true.
FAILING_SWEEP = """
import json, os, sys
import ms_exp.data
from ms_exp.run import main

read = ms_exp.data.create_datasets

def reader(dataset_cfg, *args, **kwargs):
    if dataset_cfg.data_seed == 1:
        raise OSError("disk went away")
    return read(dataset_cfg, *args, **kwargs)

ms_exp.data.create_datasets = reader
rerun_folder, *args = sys.argv[1:]  # main() rewrites sys.argv for Hydra
try:
    main(["-m", *args, "dataset.data_seed=0,1"])
    code = 0
except SystemExit as exit:
    code = exit.code
left = os.environ.get("MS_EXP_PARENT_RUN_ID")
single = main([*args, "tracking.run_name=after"])
try:
    main([*args, "dataset.data_seed=1", "tracking.run_name=failed"])
    failed = 0
except SystemExit as exit:
    failed = exit.code
os.mkdir("untracked")
os.chdir("untracked")
untracked = main(["-m", *args, "tracking.enabled=false"])
os.chdir(rerun_folder)
print("=== rerun", flush=True)
rerun = main(["-m", *args, "optimizer.lr=0.01,0.1,0.2", "tracking.skip_finished=true"])
print("=== rerun end", flush=True)
print("RESULT " + json.dumps({"sweep": code, "left": left, "single": single, "failed": failed,
                              "untracked": untracked, "rerun": rerun}))
"""


@pytest.fixture(scope="module")
def later_commands(lr_sweep, tmp_path_factory):
    """FAILING_SWEEP's process: ``(what it ended with, its folder)``."""
    folder = with_store(tmp_path_factory.mktemp("failing"))
    done = subprocess.run(
        [sys.executable, "-c", FAILING_SWEEP, str(lr_sweep[0].cwd), *TINY],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, folder


@pytest.mark.e2e
def test_failed_job_fails_the_sweep_and_a_later_run_is_no_child(later_commands, tmp_path):
    done, folder = later_commands
    line = [text for text in done.stdout.splitlines() if text.startswith("RESULT ")]
    assert line, done.stdout[-2000:] + done.stderr[-3000:]
    # Hydra runs the whole batch, then exits 1 for the failed job.
    assert json.loads(line[0][len("RESULT ") :]) == {
        "sweep": 1,
        "left": None,
        "single": 0,
        "failed": 1,
        "untracked": 0,
        "rerun": 0,
    }
    assert "OSError: disk went away" in done.stderr
    # Neither the sweep's failed job nor a failed single run upsets the sweep's callback.
    assert "Callback" not in done.stderr and "MissingMandatoryValue" not in done.stderr

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    parent, others = parent_and_children(client)
    assert parent.info.status == "FAILED"
    assert parent.data.metrics == {
        "sweep/jobs": 2.0,
        "sweep/finished_jobs": 1.0,
        "sweep/failed_jobs": 1.0,
        "sweep/pruned_jobs": 0.0,
        "sweep/skipped_jobs": 0.0,
    }
    # The job's overrides as Hydra's basic sweeper writes them (false as False).
    job = " ".join(TINY).replace("=false", "=False")
    assert parent.data.tags["ms_exp.sweep.failed_jobs"] == f"#1 {job} dataset.data_seed=1"
    (after,) = [r for r in others if r.info.run_name == "after"]
    assert "mlflow.parentRunId" not in after.data.tags and after.info.status == "FINISHED"
    (single_failed,) = [r for r in others if r.info.run_name == "failed"]
    assert "mlflow.parentRunId" not in single_failed.data.tags
    children = {
        r.data.params["dataset.data_seed"]: r for r in others if r not in (after, single_failed)
    }
    assert {seed: c.info.status for seed, c in children.items()} == {"0": "FINISHED", "1": "FAILED"}
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children.values())
    rows = summary_rows(client, parent.info.run_id, tmp_path)
    assert {r["dataset.data_seed"]: r["status"] for r in rows} == {"0": "FINISHED", "1": "FAILED"}
    assert (
        f"MLflow parent run {parent.info.run_id} (experiment 1, FAILED, 1 of 2 jobs "
        f"finished) in sqlite:///{folder.resolve() / 'mlflow.db'}" in done.stdout
    )

    # A sweep without tracking records nothing.
    untracked = folder / "untracked"
    assert list(untracked.glob("multirun/*/*/0"))  # its job ran there
    assert not (untracked / "mlflow.db").exists() and not (untracked / "mlartifacts").exists()


@pytest.mark.parametrize("num", [1, "???"])
def test_a_failed_job_is_counted_without_a_callback_warning(num, recwarn):
    # Through Hydra's own dispatcher, which turns a callback that raises into a warning.
    import cloudpickle
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    callback = sweep.SweepRun()
    callback.tracker = object()  # a tracked sweep is running
    callbacks = Callbacks()
    callbacks.callbacks.append(callback)
    config = OmegaConf.create({"hydra": {"job": {"num": num}}})
    failed = JobReturn(overrides=["optimizer.lr=0.1"], status=JobStatus.FAILED)
    callbacks.on_job_end(config=config, job_return=JobReturn(status=JobStatus.COMPLETED))
    callbacks.on_job_end(config=config, job_return=failed)
    assert [str(w.message) for w in recwarn] == []
    assert (callback.jobs, callback.failed) == (2, ["#1 optimizer.lr=0.1"])
    # A launcher's worker gets a pickled copy with each job: it holds no parent run.
    copy = cloudpickle.loads(cloudpickle.dumps(callback))
    callbacks.callbacks[:] = [copy]
    callbacks.on_job_end(config=config, job_return=failed)
    assert (copy.tracker, copy.jobs, callback.tracker is not None) == (None, 2, True)
    # A single run (no sweep running) is not counted at all.
    alone = sweep.SweepRun()
    callbacks.callbacks[:] = [alone]
    callbacks.on_job_end(config=config, job_return=failed)
    assert (alone.jobs, alone.failed, [str(w.message) for w in recwarn]) == (0, [], [])


@pytest.mark.e2e
def test_interrupted_sweep_is_killed_with_its_running_job(tmp_path):
    # Ctrl-C. (Once MindSpore runs, its native handler turns SIGINT into SIGTERM anyway.)
    # Two steps an epoch, a loss line each: the second epoch shows within a few steps.
    args = [
        sys.executable,
        "-m",
        "ms_exp.run",
        "-m",
        *FAST,
        *DATA,
        "trainer.epochs=1000",
        "trainer.loss_print_interval=1",
        "checkpoint=none",
        "optimizer.lr=0.01,0.1",
    ]
    process = subprocess.Popen(
        args,
        cwd=with_store(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.time() + 240
    for line in process.stdout:
        if line.startswith("epoch: 2 "):
            break
        assert time.time() < deadline
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=120)[0]
    assert process.returncode == 130, rest[-3000:]

    parent, children = parent_and_children(MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"))
    assert parent.info.status == "KILLED"
    assert [c.info.status for c in children] == ["KILLED"]  # the second job never started
    # One job had started (its run is KILLED); none finished or failed.
    assert parent.data.metrics == {
        "sweep/jobs": 1.0,
        "sweep/finished_jobs": 0.0,
        "sweep/failed_jobs": 0.0,
        "sweep/pruned_jobs": 0.0,
        "sweep/skipped_jobs": 0.0,
    }


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


@pytest.mark.e2e
def test_concurrent_jobs_on_a_fresh_store_lose_no_runs(lr_sweep):
    """``lr_sweep``'s four jobs, two at a time in joblib's worker processes, the store
    created by none of them beforehand: one parent, four children, nothing misfiled in
    "Default"."""
    result, _, parent, children = lr_sweep
    assert len(result.everywhere) == 5
    assert {r.info.run_id for r in result.everywhere} == {
        parent.info.run_id,
        *(c.info.run_id for c in children),
    }
    assert sorted(c.info.run_name for c in children) == [f"lr={lr}" for lr in LRS]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert parent.info.status == "FINISHED" and parent.data.metrics["sweep/jobs"] == 4
    # Two at a time, really: some job started before another ended.
    spans = sorted((c.info.start_time, c.info.end_time) for c in children)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


@pytest.mark.e2e
def test_rerunning_a_sweep_skips_the_jobs_that_already_finished(lr_sweep, later_commands):
    """Two of ``lr_sweep``'s values again and a new one (in FAILING_SWEEP's process, which
    reports its exit status): it adds a sweep to that store."""
    _, client, first_parent, first_children = lr_sweep
    done, _ = later_commands
    assert '"rerun": 0' in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    again = done.stdout.split("=== rerun\n", 1)[1].split("=== rerun end\n", 1)[0]
    assert again.count("already finished with this config") == 2
    sweeps = client.search_runs(
        ["1"], "tags.`ms_exp.sweep` = 'true'", order_by=["attributes.start_time DESC"]
    )
    assert [s.info.run_id for s in sweeps[1:]] == [first_parent.info.run_id]
    latest = sweeps[0]
    children = client.search_runs(["1"], f"tags.mlflow.parentRunId = '{latest.info.run_id}'")
    assert [c.info.run_name for c in children] == ["lr=0.2"]
    assert latest.data.metrics["sweep/skipped_jobs"] == 2
    assert latest.data.metrics["sweep/jobs"] == 3
    skipped = {k for k in latest.data.tags if k.startswith("ms_exp.sweep.skipped.")}
    assert skipped == {
        f"ms_exp.sweep.skipped.{c.info.run_id}"
        for c in first_children
        if c.data.params["optimizer.lr"] in ("0.01", "0.1")
    }


def test_launcher_presets_compose_to_hydras_plugins():
    from ms_exp.preflight.compose import compose_config

    slurm = compose_config(["hydra/launcher=slurm"], return_hydra_config=True).hydra.launcher
    assert slurm._target_.endswith("SlurmLauncher")
    assert (slurm.tasks_per_node, slurm.timeout_min) == (1, 240)
    concurrent = compose_config(
        ["hydra/launcher=concurrent"], return_hydra_config=True
    ).hydra.launcher
    assert concurrent._target_.endswith("JoblibLauncher") and concurrent.n_jobs == 2


def test_a_job_the_sweeper_composed_to_check_it_is_not_composed_again_to_launch(monkeypatch):
    from types import SimpleNamespace

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.plugins.sweeper import Sweeper
    from omegaconf import OmegaConf

    from ms_exp.config.hydra_internals import sweep_jobs_composed_once

    composed = []  # each composition, as (overrides, config)

    def compose(self, master_config, sweep_overrides):
        composed.append((sweep_overrides, OmegaConf.create({"job": sweep_overrides})))
        return composed[-1][1]

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", compose)
    loader, master = ConfigLoaderImpl.__new__(ConfigLoaderImpl), OmegaConf.create()
    sweeper = SimpleNamespace(hydra_context=SimpleNamespace(config_loader=loader), config=master)
    with sweep_jobs_composed_once():
        Sweeper.validate_batch_is_legal(sweeper, [["lr=1"], ["lr=2"]])
        launched = [loader.load_sweep_config(master, [f"lr={n}"]) for n in (1, 2, 1)]
    assert [overrides for overrides, _ in composed] == [["lr=1"], ["lr=2"], ["lr=1"]]
    assert launched[:2] == [config for _, config in composed[:2]]  # the checked ones
    assert launched[2] is composed[2][1]  # asked again: composed again
    assert ConfigLoaderImpl.load_sweep_config is compose  # put back after the block
