"""Resuming: a run killed again and again ends with the weights of one never killed, and
nothing half-written is ever loaded."""
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import FAST, assert_same_training_state, train
from mlflow import MlflowClient

from ms_exp.checkpoint.files import load_verified

# 3 epochs of 44 steps, a checkpoint every 5 steps, the last two kept.
JOB = ("trainer.epochs=3", "checkpoint.save_checkpoint_steps=5",
       "checkpoint.keep_checkpoint_max=2", "trainer.loss_print_interval=1")
TOTAL_STEPS = 3 * 44
STEP_LINE = re.compile(r"epoch: (\d+) step: (\d+), loss is")


def weights(path: Path) -> dict:
    return {name: value.asnumpy() for name, value in load_verified(path).items()}


def _start(cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ms_exp.run", *FAST, *JOB,
                             "trainer.resume=auto"], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _run_until_step(process: subprocess.Popen, step: int) -> str:
    """Read the job's output until it reports global step ``step`` (or ends)."""
    seen = []
    for line in process.stdout:
        seen.append(line)
        match = STEP_LINE.match(line)
        if match and (int(match[1]) - 1) * 44 + int(match[2]) >= step:
            break
    return "".join(seen)


def _finish(process: subprocess.Popen, signum: int) -> str:
    process.send_signal(signum)
    return process.communicate(timeout=120)[0]


@pytest.mark.e2e
def test_resume_after_ten_sigkills_gives_the_uninterrupted_weights(tmp_path):
    reference = train(tmp_path / "reference", *JOB)
    expected = weights(reference.run_dir / "checkpoints/rank_0/checkpoint-3_44.ckpt")

    work = tmp_path / "killed"
    work.mkdir()
    rng = random.Random(20261121)
    # Three moments during start-up (before any checkpoint, or during the MLflow run's
    # creation), seven at random steps of training, in order so that training advances.
    delays = [rng.uniform(0.2, 3.0) for _ in range(3)]
    steps = sorted(rng.sample(range(2, TOTAL_STEPS - 2), 7))
    logs = []
    for moment in [("after", d) for d in delays] + [("step", s) for s in steps]:
        process = _start(work)
        if moment[0] == "after":
            time.sleep(moment[1])
        else:
            logs.append(_run_until_step(process, moment[1]))
        process.kill()
        logs.append(process.communicate(timeout=60)[0])
        assert process.returncode == -signal.SIGKILL, logs[-1][-2000:]

    # A save killed half-way: the newest checkpoint name holds a truncated file.
    (run_dir,) = {p.parent for p in work.glob("outputs/*/*/run.json")
                  if (p.parent / "checkpoints/rank_0").is_dir()
                  and any((p.parent / "checkpoints/rank_0").glob("checkpoint-*.ckpt"))}
    folder = run_dir / "checkpoints/rank_0"
    newest = max(folder.glob("checkpoint-*.ckpt"), key=lambda p: p.stat().st_mtime)
    epoch, step = map(int, re.match(r"checkpoint-(\d+)_(\d+)", newest.name).groups())
    torn = folder / f"checkpoint-{epoch}_{step + 1}.ckpt"
    torn.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])

    process = _start(work)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 0, output[-3000:]
    assert f"checkpoint {torn} is damaged" in output
    assert f"resumed from {newest}" in output
    assert torn.with_name(torn.name + ".damaged").is_file() and not torn.exists()

    final = weights(run_dir / "checkpoints/rank_0/checkpoint-3_44.ckpt")
    # Weights, optimizer moments (up to denormals), global step, learning rate.
    assert_same_training_state(final, expected)

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs(["1"])
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == 1
    run = finished[0]
    # Attempts killed before their first checkpoint had runs of their own: KILLED, none
    # left RUNNING.
    others = {r.info.run_id: r.info.status for r in runs if r.info.run_id != run.info.run_id}
    assert set(others.values()) <= {"KILLED"}, others
    assert run.data.tags["ms_exp.run_dir"] == str(run_dir)
    assert "ms_exp.resumed_from" in run.data.tags
    # Every step once: none lost before a checkpoint, none logged again after it.
    steps_logged = Counter(m.step for m in client.get_metric_history(run.info.run_id,
                                                                      "train/loss"))
    assert steps_logged == Counter(range(1, TOTAL_STEPS + 1))
    assert run.data.metrics["eval/accuracy"] == pytest.approx(
        reference.store.search_runs(["1"])[0].data.metrics["eval/accuracy"])


@pytest.mark.e2e
def test_resume_auto_without_an_unfinished_run_starts_a_new_one(tmp_path):
    first = train(tmp_path, "trainer.epochs=1", "trainer.resume=auto")
    assert "no unfinished run of this config" in first.stdout
    second = train(tmp_path, "trainer.epochs=1", "trainer.resume=auto")
    assert second.run_dir != first.run_dir     # the first one FINISHED: not continued
    assert len(second.store.search_runs(["1"])) == 2


@pytest.mark.e2e
def test_explicit_checkpoint_then_run_id_extend_the_same_run(tmp_path):
    first = train(tmp_path, "trainer.epochs=1", "checkpoint.save_checkpoint_steps=10")
    folder = first.run_dir / "checkpoints/rank_0"
    # From a checkpoint file, with more epochs than the run had: the run goes on from it.
    second = train(tmp_path, "trainer.epochs=2", "checkpoint.save_checkpoint_steps=10",
                   f"trainer.resume={folder / 'checkpoint-1_20.ckpt'}")
    assert f"resumed from {folder / 'checkpoint-1_20.ckpt'}: epoch 1, step 20" in second.stdout
    assert second.run_dir == first.run_dir and second.run_id == first.run_id
    assert (folder / "checkpoint-2_44.ckpt").is_file()
    # From an MLflow run id: its newest checkpoint, the end of epoch 2.
    third = train(tmp_path, "trainer.epochs=3", "checkpoint.save_checkpoint_steps=10",
                  f"trainer.resume={first.run_id}")
    assert f"resumed from {folder / 'checkpoint-2_44.ckpt'}: epoch 2, step 88" in third.stdout
    assert third.run_id == first.run_id
    run = third.store.get_run(first.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["ms_exp.resumed_from"] == "checkpoint-2_44.ckpt (epoch 2, step 44 of it)"
    steps = [m.step for m in third.store.get_metric_history(first.run_id, "eval/accuracy")]
    # Every epoch's evaluation, across the three jobs; epoch 1 twice: the second job went
    # back to step 20 and trained the rest of it again.
    assert steps == [44, 44, 88, 132]
    assert len(third.store.search_runs(["1"])) == 1
