"""Kills at the exact moments where a run's records could disagree (tests/faults.py), and
a disk that fills mid-run: after each, the run resumes to one FINISHED MLflow run holding
every step's metrics once and its final evaluation."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import FAST, skip_where_missing, train
from mlflow import MlflowClient

FAULTS = Path(__file__).with_name("faults.py")
# 3 epochs of 44 steps, a checkpoint at the end of each.
JOB = (
    *FAST,
    "trainer.epochs=3",
    "checkpoint.save_checkpoint_steps=44",
    "hydra.run.dir=run",
    "trainer.resume=auto",
)


def _with_fault(cwd: Path, fault: str, argument: str, *overrides: str):
    return subprocess.run(
        [sys.executable, str(FAULTS), fault, argument, "--", *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _steps(client, run_id: str, key: str) -> Counter:
    return Counter(metric.step for metric in client.get_metric_history(run_id, key))


@pytest.mark.e2e
def test_kills_right_after_checkpoints_and_after_the_run_finished_leave_every_step_once(tmp_path):
    # Killed after epoch 2's checkpoint, before its evaluation; then after the final
    # checkpoint, before the final evaluation.
    for step in (88, 132):
        killed = _with_fault(tmp_path, "kill-after-checkpoint", str(step), *JOB)
        assert killed.returncode == -9, killed.stderr[-3000:]
    # The job that resumes it evaluates epoch 3, ends the MLflow run FINISHED and is killed
    # right then, before its run record says so.
    resumed = _with_fault(tmp_path, "kill-after-mlflow-finished", "-", *JOB)
    assert resumed.returncode == -9, resumed.stderr[-3000:]
    assert "epoch 3 was not evaluated before the run stopped: evaluating it now" in resumed.stdout
    assert "nothing left to train" in resumed.stdout
    # The last line of the job reports the final evaluation the resumed job made.
    assert "final evaluation: eval/accuracy" in resumed.stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FINISHED"
    # The run record is written FINISHED only after MLflow's: here it still says RUNNING.
    assert json.loads((tmp_path / "run/run.json").read_text())["status"] == "RUNNING"
    # How the attempts ended is history, not how the run ended.
    assert "ms_exp.ended_by" not in run.data.tags and "ms_exp.error" not in run.data.tags
    assert run.data.tags["ms_exp.earlier_end"].count("(killed?)") == 2
    checkpoints = sorted((tmp_path / "run/checkpoints/rank_0").glob("checkpoint-*.ckpt"))
    stamps = [path.stat().st_mtime_ns for path in checkpoints]

    # A kill after the MLflow run finished is resumed, not started again.
    again = train(tmp_path, *JOB)
    assert "nothing left to train" in again.stdout
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FINISHED"
    assert _steps(client, run.info.run_id, "train/loss") == Counter(range(1, 133))
    assert _steps(client, run.info.run_id, "eval/accuracy") == Counter([44, 88, 132])
    assert _steps(client, run.info.run_id, "train/epoch") == Counter([44, 88, 132])
    assert "ms_exp.ended_by" not in run.data.tags and "ms_exp.error" not in run.data.tags
    assert [path.stat().st_mtime_ns for path in checkpoints] == stamps  # not retrained
    assert json.loads((tmp_path / "run/run.json").read_text())["status"] == "FINISHED"
    # What describes one attempt is logged at that attempt's step (0: the first start), so
    # four starts hold no repeated step (they repeated step 0 before).
    assert json.loads((tmp_path / "run/run.json").read_text())["attempts"] == 4
    for key in ("checkpoint/bytes_rank_0", "checkpoint/save_time_s", "system/peak_host_memory_mb"):
        steps = _steps(client, run.info.run_id, key)
        assert set(steps.values()) == {1} and set(steps) <= {0, 1, 2, 3}, (key, steps)


@pytest.fixture
def small_disk(tmp_path):
    """A 72 MiB tmpfs with 65 MiB free: enough for the preflight's 64 MiB, too little for
    the checkpoints of the jobs below (44 of 2.4 MB: full at about step 108 of 176)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    # Mounting needs root: as a user, through sudo, as .ci/run installs its packages.
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    mounted = subprocess.run(
        [*sudo, "mount", "-t", "tmpfs", "-o", "size=72m,mode=1777", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        skip_where_missing(f"a tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    (disk / "ballast").write_bytes(b"\0" * (7 << 20))
    yield disk
    subprocess.run([*sudo, "umount", "-l", str(disk)], check=True)


@pytest.mark.e2e
def test_a_disk_that_fills_mid_run_ends_it_failed_with_the_cause_in_one_line(tmp_path, small_disk):
    store = tmp_path / "mlflow.db"  # on a disk with space, as the artifacts are
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ms_exp.run",
            *FAST,
            "trainer.epochs=4",
            "checkpoint.save_checkpoint_steps=4",
            "checkpoint.keep_checkpoint_max=1000",
            f"hydra.run.dir={small_disk / 'run'}",
            f"tracking.uri=sqlite:///{store}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "CRITICAL" not in result.stderr
    client = MlflowClient(f"sqlite:///{store}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FAILED"
    assert "No space left on device" in run.data.tags["ms_exp.error"]
    # What could still be uploaded was: the logs that say what happened.
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "logs")}
    assert "logs/console.log" in logged
    assert not list((small_disk / "run").glob("*.partial")), "a half-written file is left"


@pytest.mark.e2e
def test_a_full_disk_holding_the_store_too_leaves_a_run_that_resumes_once_there_is_space(
    tmp_path, small_disk
):
    job = (
        *FAST,
        "trainer.epochs=4",
        "checkpoint.save_checkpoint_steps=4",
        "checkpoint.keep_checkpoint_max=1000",
        f"hydra.run.dir={small_disk / 'run'}",
        f"tracking.uri=sqlite:///{small_disk / 'mlflow.db'}",
        "trainer.resume=auto",
    )
    full = subprocess.run(
        [sys.executable, "-m", "ms_exp.run", *job],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert full.returncode == 1, full.stderr[-3000:]
    assert full.stderr.splitlines()[-1] == (
        f"ms_exp: error: {small_disk / 'run'}: No space left on device; free some space, "
        f"then continue the run in {small_disk / 'run'} with trainer.resume=auto"
    )
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    # Nothing could record FAILED: the record keeps its last whole version, RUNNING.
    assert json.loads((small_disk / "run/run.json").read_text())["status"] == "RUNNING"
    assert not list((small_disk / "run").glob("*.partial"))

    # Space again: the disk grows (a tmpfs can), as if old files had been cleared.
    subprocess.run(["mount", "-o", "remount,size=400m", str(small_disk)], check=True)
    resumed = train(tmp_path, *job)
    assert "resuming the run in" in resumed.stdout
    client = MlflowClient(f"sqlite:///{small_disk / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FINISHED"
    assert _steps(client, run.info.run_id, "eval/accuracy") == Counter([44, 88, 132, 176])
