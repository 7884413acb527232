"""Resuming: a run killed again and again ends with the weights of one never killed, and
nothing half-written is ever loaded. Which run and checkpoint a job continues from is
logic, tested on fabricated run folders; the kills at exact moments are in test_survival.py."""

import json
import os
import random
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import mindspore as ms
import pytest
from conftest import FAST, assert_same_training_state, main_in_process, train
from mindspore import nn
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ms_exp.checkpoint.files import load_verified, record_breakpoint
from ms_exp.checkpoint.resume import (
    ResumeError,
    ResumePoint,
    find_resume_point,
    newest_good_checkpoint,
    restore,
    unfinished_runs,
)
from ms_exp.config.errors import ConfigError
from ms_exp.data.build import declared_spec
from ms_exp.models import create_network
from ms_exp.preflight.compose import compose_config
from ms_exp.preflight.trainer import validate_resume_fits

# 2 epochs of 22 steps (batch 64), a checkpoint every 5 steps, the last two kept: every
# checkpoint but the epochs' last is in the middle of an epoch.
STEPS_PER_EPOCH = 22
JOB = (
    "trainer.epochs=2",
    "dataset.batch_size=64",
    "checkpoint.save_checkpoint_steps=5",
    "checkpoint.keep_checkpoint_max=2",
    "trainer.loss_print_interval=1",
)
TOTAL_STEPS = 2 * STEPS_PER_EPOCH
STEP_LINE = re.compile(r"epoch: (\d+) step: (\d+), loss is")


def weights(path: Path) -> dict:
    return {name: value.asnumpy() for name, value in load_verified(path).items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The job never killed (``resume=auto`` finding nothing to continue), with what the
    tests compare against read before any test extends its run."""
    result = train(tmp_path_factory.mktemp("reference"), *JOB, "trainer.resume=auto")
    final = result.run_dir / f"checkpoints/rank_0/checkpoint-2_{STEPS_PER_EPOCH}.ckpt"
    (run,) = result.store.search_runs(["1"])
    return SimpleNamespace(
        result=result, weights=weights(final), accuracy=run.data.metrics["eval/accuracy"]
    )


# The killed jobs save safetensors, asynchronously (the reference: .ckpt, synchronously):
# neither changes a weight, and the kills at exact moments in test_survival.py save .ckpt.
SAFETENSORS = "checkpoint.format=safetensors"
ASYNC = "checkpoint.async_save=true"


def _start(cwd: Path, resume: str = "auto") -> subprocess.Popen:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "ms_exp.run", *FAST, *JOB),
            *(SAFETENSORS, ASYNC, f"trainer.resume={resume}"),
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _run_until_step(process: subprocess.Popen, step: int) -> str:
    """Read the job's output until it reports global step ``step`` (or ends)."""
    seen = []
    for line in process.stdout:
        seen.append(line)
        match = STEP_LINE.match(line)
        if match and (int(match[1]) - 1) * STEPS_PER_EPOCH + int(match[2]) >= step:
            break
    return "".join(seen)


@pytest.mark.e2e
def test_resume_after_sigkills_at_random_moments_gives_the_uninterrupted_weights(
    reference, tmp_path
):
    # With nothing unfinished, resume=auto started a new run.
    assert "no unfinished run of this config" in reference.result.stdout

    work = tmp_path / "killed"
    work.mkdir()
    rng = random.Random(20261121)
    # One moment during start-up (before any checkpoint, or during the MLflow run's
    # creation), then one at a random step in each half of training, in order so that
    # training advances: in epoch 1, in epoch 2 (either may fall at the epochs' boundary).
    halves = [2, TOTAL_STEPS // 2, TOTAL_STEPS - 2]
    moments = [("after", rng.uniform(0.5, 3.0))] + [
        ("step", rng.randrange(low, high)) for low, high in zip(halves, halves[1:])
    ]
    logs = []
    for kind, when in moments:
        process = _start(work)
        if kind == "after":
            try:  # a random moment, not an event: a job ending before it fails below
                process.wait(timeout=when)
            except subprocess.TimeoutExpired:
                pass
        else:
            logs.append(_run_until_step(process, when))
        process.kill()
        logs.append(process.communicate(timeout=60)[0])
        assert process.returncode == -signal.SIGKILL, logs[-1][-2000:]

    # A save killed half-way: the newest checkpoint name holds a truncated file.
    (run_dir,) = {
        p.parent
        for p in work.glob("outputs/*/*/run.json")
        if (p.parent / "checkpoints/rank_0").is_dir()
        and any((p.parent / "checkpoints/rank_0").glob("checkpoint-*.safetensors"))
    }
    folder = run_dir / "checkpoints/rank_0"
    newest = max(folder.glob("checkpoint-*.safetensors"), key=lambda p: p.stat().st_mtime)
    epoch, step = map(int, re.match(r"checkpoint-(\d+)_(\d+)", newest.name).groups())
    # Each safetensors checkpoint has the digest ms_exp recorded; a torn one has none.
    assert (folder / f"{newest.name}.sha256").is_file()
    torn = folder / f"checkpoint-{epoch}_{step + 1}.safetensors"
    torn.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])

    # The last job names the run by its MLflow run id (the killed ones found it with
    # resume=auto): its newest checkpoint that reads back whole.
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    process = _start(work, resume=run_id)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 0, output[-3000:]
    assert f"checkpoint {torn} is damaged" in output
    assert f"resumed from {newest}: epoch {epoch}, step " in output
    assert torn.with_name(torn.name + ".damaged").is_file() and not torn.exists()

    final = weights(run_dir / f"checkpoints/rank_0/checkpoint-2_{STEPS_PER_EPOCH}.safetensors")
    # Weights, optimizer moments (up to denormals), global step, learning rate.
    assert_same_training_state(final, reference.weights)

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs(["1"])
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == 1
    run = finished[0]
    assert run.info.run_id == run_id
    # Attempts killed before their first checkpoint had runs of their own: KILLED, none
    # left RUNNING.
    others = {r.info.run_id: r.info.status for r in runs if r.info.run_id != run.info.run_id}
    assert set(others.values()) <= {"KILLED"}, others
    assert run.data.tags["ms_exp.run_dir"] == str(run_dir)
    assert "ms_exp.resumed_from" in run.data.tags
    # Every step once: none lost before a checkpoint, none logged again after it.
    steps_logged = Counter(m.step for m in client.get_metric_history(run.info.run_id, "train/loss"))
    assert steps_logged == Counter(range(1, TOTAL_STEPS + 1))
    assert run.data.metrics["eval/accuracy"] == pytest.approx(reference.accuracy)
    # The run's last checkpoint went to MLflow with its digest; evaluated from there, it
    # gives the run's final accuracy.
    logged = {a.path for a in client.list_artifacts(run_id, "checkpoints/rank_0")}
    last = f"checkpoints/rank_0/checkpoint-2_{STEPS_PER_EPOCH}.safetensors"
    best = "checkpoints/rank_0/best.safetensors"
    assert {last, f"{last}.sha256", best, f"{best}.sha256"} <= logged, logged
    evaluation = main_in_process("ms_exp.eval", ["--run-id", run_id], work)
    assert evaluation.rc == 0, evaluation.stderr[-2000:]
    printed = float(re.search(r"result: \{'accuracy': ([0-9.]+)", evaluation.stdout).group(1))
    assert printed == pytest.approx(run.data.metrics["eval/accuracy"], abs=1e-9)
    # ms_exp.runs names the run's checkpoints, safetensors files as .ckpt ones.
    best_run = main_in_process("ms_exp.runs", ["best"], work)
    assert best_run.rc == 0, best_run.stderr[-2000:]
    assert f"last checkpoint: {run_dir / last}" in best_run.stdout.splitlines()
    assert f"best checkpoint: {run_dir / best}" in best_run.stdout.splitlines()


@pytest.mark.e2e
def test_an_explicit_checkpoint_extends_the_same_run_with_more_epochs(reference):
    """(An MLflow run id as trainer.resume: the last job of the test above.) The second job
    saves safetensors: it reads the run's .ckpt and writes its own format from there on."""
    first = reference.result
    folder = first.run_dir / "checkpoints/rank_0"
    # From a checkpoint file, not the newest (2_18 of the kept 2_18 and 2_22), with more
    # epochs than the run had: the run goes on from it.
    older = folder / "checkpoint-2_18.ckpt"
    second = train(first.cwd, *JOB, "trainer.epochs=3", SAFETENSORS, f"trainer.resume={older}")
    assert f"resumed from {older}: epoch 2, step 40" in second.stdout
    assert second.run_dir == first.run_dir and second.run_id == first.run_id
    # The folder Hydra made for the second command held only its record: removed.
    assert [p.resolve() for p in first.cwd.glob("outputs/*/*")] == [first.run_dir.resolve()]
    # keep_checkpoint_max counts both formats: the two newest are the second job's.
    assert sorted(p.name for p in folder.glob("checkpoint-[0-9]*")) == [
        "checkpoint-3_21.safetensors",
        "checkpoint-3_21.safetensors.sha256",
        "checkpoint-3_22.safetensors",
        "checkpoint-3_22.safetensors.sha256",
    ]
    assert f"last checkpoint: {folder / 'checkpoint-3_22.safetensors'}" in second.stdout
    run = second.store.get_run(first.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["ms_exp.resumed_from"] == "checkpoint-2_18.ckpt (epoch 2, step 18 of it)"
    steps = [m.step for m in second.store.get_metric_history(first.run_id, "eval/accuracy")]
    # Every epoch's evaluation, across the two jobs; epoch 2 twice: the second job went
    # back to step 40 and trained the rest of it again (another config: logged again).
    assert steps == [22, 44, 44, 66]
    assert len(second.store.search_runs(["1"])) == 1


# -- which run and checkpoint a job continues from: fabricated run folders ------------------


def _checkpoint(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ms.save_checkpoint(nn.Dense(2, 2), str(path), crc_check=True)


def _run_folder(
    root: Path, name: str, digest: str, status: str, started: float, checkpoints=(), ranks: int = 1
) -> Path:
    """A run directory as a job leaves it: its run.json and checkpoints in each rank
    folder."""
    run_dir = root / "outputs" / "2026-11-25" / name
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps({"started": started, "digest": digest, "status": status, "updated": started})
    )
    for rank in range(ranks):
        for checkpoint in checkpoints:
            _checkpoint(run_dir / "checkpoints" / f"rank_{rank}" / checkpoint)
    return run_dir


def _cfg(resume, ranks: int = 1):
    return OmegaConf.create(
        {
            "trainer": {"resume": resume},
            "checkpoint": {"prefix": "checkpoint"},
            "parallel": {"device_num": ranks},
        }
    )


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_resume_auto_continues_the_newest_unfinished_run_of_the_config(workdir, capsys):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    new_dir = workdir / "outputs" / "2026-11-25" / "new"
    _run_folder(workdir, "finished", "d", "FINISHED", 5.0, ["checkpoint-1_10.ckpt"])
    _run_folder(workdir, "other-config", "e", "RUNNING", 6.0, ["checkpoint-1_10.ckpt"])
    killed = _run_folder(
        workdir,
        "killed",
        "d",
        "RUNNING",
        3.0,
        ["checkpoint-1_5.ckpt", "checkpoint-1_10.ckpt", "checkpoint-2_5.ckpt"],
    )
    failed = _run_folder(workdir, "failed", "d", "FAILED", 4.0)  # no checkpoint
    assert unfinished_runs(workdir / "outputs", "d") == [failed.resolve(), killed.resolve()]
    torn = killed / "checkpoints/rank_0/checkpoint-2_5.ckpt"
    _truncate(torn)

    point = find_resume_point(_cfg("auto"), new_dir, "d", uri)
    # The newest unfinished run has nothing to continue from: the one before it, from its
    # newest checkpoint that reads back whole; the torn one is renamed, never loaded.
    assert point == ResumePoint(killed.resolve(), "checkpoint-1_10.ckpt", 1, 10)
    out = capsys.readouterr().out
    assert f"{failed.resolve()} did not finish but has no good checkpoint" in out
    assert f"checkpoint {torn.resolve()} is damaged" in out
    assert not torn.exists() and torn.with_name(torn.name + ".damaged").is_file()
    assert "no unfinished run" not in out


def test_resume_auto_without_an_unfinished_run_starts_a_new_one(workdir, capsys):
    """A FINISHED run of the same config is not continued: the job starts a new run."""
    _run_folder(workdir, "finished", "d", "FINISHED", 5.0, ["checkpoint-1_44.ckpt"])
    new_dir = workdir / "outputs" / "2026-11-25" / "new"
    assert find_resume_point(_cfg("auto"), new_dir, "d", "sqlite:///unused.db") is None
    assert capsys.readouterr().out.strip() == (
        "trainer.resume=auto: no unfinished run of this config under "
        f"{workdir / 'outputs'}; starting a new run"
    )
    # Nor is an unset trainer.resume anything to continue.
    assert find_resume_point(_cfg(None), new_dir, "d", "sqlite:///unused.db") is None


def test_resume_auto_names_a_rank_folder_that_is_a_file_and_starts_a_new_run(workdir, capsys):
    broken = _run_folder(workdir, "broken", "d", "RUNNING", 5.0)
    (broken / "checkpoints").mkdir()
    (broken / "checkpoints/rank_0").write_text("not a folder\n")
    new_dir = workdir / "outputs" / "2026-11-25" / "new"
    assert find_resume_point(_cfg("auto"), new_dir, "d", "sqlite:///unused.db") is None
    assert capsys.readouterr().out.splitlines()[0] == (
        f"trainer.resume=auto: {broken.resolve()} did not finish but has no good checkpoint "
        f"to continue from ({broken.resolve()}/checkpoints/rank_0 is a file, not a folder)"
    )
    assert (broken / "checkpoints/rank_0").read_text() == "not a folder\n"


def test_an_explicit_checkpoint_or_run_directory_names_the_run_whatever_its_status(workdir):
    """(An MLflow run id names the run through its ms_exp.run_dir tag: the last job of
    test_resume_after_sigkills_at_random_moments_gives_the_uninterrupted_weights.)"""
    run_dir = _run_folder(
        workdir,
        "done",
        "d",
        "FINISHED",
        1.0,
        ["checkpoint-1_20.ckpt", "checkpoint-1_44.ckpt", "checkpoint-2_44.ckpt"],
    ).resolve()
    new_dir = workdir / "outputs" / "2026-11-25" / "new"
    uri = "sqlite:///unused.db"
    # A checkpoint file: that one, though newer ones exist, from another config too.
    named = run_dir / "checkpoints/rank_0/checkpoint-1_20.ckpt"
    assert find_resume_point(_cfg(str(named)), new_dir, "other", uri) == ResumePoint(
        run_dir, "checkpoint-1_20.ckpt", 1, 20
    )
    # A run directory: its newest.
    assert find_resume_point(_cfg(str(run_dir)), new_dir, "other", uri) == ResumePoint(
        run_dir, "checkpoint-2_44.ckpt", 2, 44
    )
    # A named checkpoint that does not read back whole is refused, not replaced.
    _truncate(named)
    with pytest.raises(
        ResumeError,
        match="no checkpoint checkpoint-1_20.ckpt that reads back whole in all 1 rank folders",
    ):
        find_resume_point(_cfg(str(named)), new_dir, "other", uri)
    assert not list(workdir.glob("*.db"))


def _run_of_the_default_network(root: Path) -> Path:
    """A FINISHED run folder holding two checkpoints of the default network (the MLP of
    hidden_size 512), the newer one torn."""
    cfg = compose_config([])
    network = create_network(cfg.model, declared_spec(cfg.dataset))
    run_dir = _run_folder(root, "done", "d", "FINISHED", 1.0).resolve()
    folder = run_dir / "checkpoints/rank_0"
    folder.mkdir(parents=True)
    for name in ("checkpoint-1_44.ckpt", "checkpoint-2_44.ckpt"):
        ms.save_checkpoint(network, str(folder / name), crc_check=True)
    _truncate(folder / "checkpoint-2_44.ckpt")
    return run_dir


@pytest.mark.parametrize("target", ["run folder", "checkpoint file"])
def test_a_resume_whose_checkpoint_does_not_fit_the_network_is_refused_before_it_starts(
    tmp_path, target
):
    """Another shape (model.hidden_size other than the run's) is refused by the preflight,
    in one line naming the parameter and both shapes: before, the job reopened the run,
    failed in restore with a traceback and ended the FINISHED run FAILED. The checkpoint
    compared is the one the job would continue from: a run folder's newest that reads back
    whole (the torn one is skipped, not renamed)."""
    run_dir = _run_of_the_default_network(tmp_path / "earlier")
    value = (
        run_dir if target == "run folder" else run_dir / "checkpoints/rank_0/checkpoint-1_44.ckpt"
    )
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    cwd = tmp_path / "cwd"
    result = main_in_process(
        "ms_exp.run", [*FAST, f"trainer.resume={value}", "model.hidden_size=64"], cwd
    )
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        f"ms_exp: error: trainer.resume='{value}': not allowed; expected a checkpoint of the "
        "network the config builds (layer1.weight is [64, 512] in checkpoint-1_44.ckpt, "
        "[64, 64] in the network: is an override such as model.* other than the run's?)"
    ]
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before
    assert list(cwd.iterdir()) == []  # no run folder, no MLflow store


def test_a_checkpoint_that_fits_or_holds_one_ranks_slice_passes_the_shape_check(tmp_path):
    """The same network passes; a sliced run's checkpoints hold each rank's slice, other
    shapes than the network's, and are not compared."""
    run_dir = _run_of_the_default_network(tmp_path)
    validate_resume_fits(compose_config([f"trainer.resume={run_dir}"]))
    validate_resume_fits(
        compose_config(
            [
                f"trainer.resume={run_dir}",
                "model.hidden_size=64",
                "parallel=semi_auto",
                "parallel.device_num=1",
                "checkpoint=sliced",
            ]
        )
    )
    with pytest.raises(ConfigError, match=r"layer1.weight is \[64, 512\]"):
        validate_resume_fits(compose_config([f"trainer.resume={run_dir}", "model.hidden_size=64"]))


def test_the_checkpoint_continued_from_is_one_every_rank_holds_whole(tmp_path, capsys):
    run_dir = _run_folder(
        tmp_path,
        "ranks",
        "d",
        "RUNNING",
        1.0,
        ["checkpoint-1_10.ckpt", "checkpoint-1_20.ckpt"],
        ranks=2,
    )
    # Rank 1 was killed before writing step 30, rank 0 wrote it.
    _checkpoint(run_dir / "checkpoints/rank_0/checkpoint-1_30.ckpt")
    assert newest_good_checkpoint(run_dir, "checkpoint", 2) == "checkpoint-1_20.ckpt"
    # Rank 1's step 20 is torn: step 10, which both hold whole.
    _truncate(run_dir / "checkpoints/rank_1/checkpoint-1_20.ckpt")
    assert newest_good_checkpoint(run_dir, "checkpoint", 2) == "checkpoint-1_10.ckpt"
    assert "checkpoint-1_20.ckpt is damaged" in capsys.readouterr().out
    assert (run_dir / "checkpoints/rank_0/checkpoint-1_20.ckpt").is_file()
    # Nothing whole in every rank: nothing to continue from.
    _truncate(run_dir / "checkpoints/rank_0/checkpoint-1_10.ckpt")
    assert newest_good_checkpoint(run_dir, "checkpoint", 2) is None


def _breakpoint(path: Path, epoch: int, step_in_epoch: int) -> None:
    """A breakpoint file as MindSpore's Model writes it (checkpoint.exception_save): no CRC,
    its step_num the step in the epoch."""
    append = {"epoch_num": epoch, "step_num": step_in_epoch}
    ms.save_checkpoint(nn.Dense(2, 2), str(path), append_dict=append)


def test_resume_auto_continues_from_a_breakpoint_file_newer_than_the_last_checkpoint(
    workdir, capsys
):
    failed = _run_folder(
        workdir, "failed", "d", "FAILED", 3.0, ["checkpoint-1_10.ckpt", "checkpoint-1_22.ckpt"]
    ).resolve()
    folder = failed / "checkpoints/rank_0"
    newer = folder / "checkpoint-2_3_breakpoint.ckpt"
    _breakpoint(newer, 2, 3)
    new_dir = workdir / "outputs" / "2026-11-25" / "new"
    point = find_resume_point(_cfg("auto"), new_dir, "d", "sqlite:///unused.db")
    assert point == ResumePoint(failed, newer.name, 2, 3)
    # Its step_num is the step in the epoch: the step continued from is the name's (22 + 3),
    # or the one ms_exp recorded when the error came before that step's update.
    dataset_steps = []
    train_set = SimpleNamespace(set_init_step=dataset_steps.append)
    assert restore(point, nn.Dense(2, 2), train_set, folder, STEPS_PER_EPOCH) == 25
    record_breakpoint(newer, 24)
    assert restore(point, nn.Dense(2, 2), train_set, folder, STEPS_PER_EPOCH) == 24
    assert dataset_steps == [25, 24]
    assert f"resumed from {newer}: epoch 2, step 24" in capsys.readouterr().out
    # One of the step of a numbered checkpoint (ms_exp's own stop saved both): the
    # numbered one, which carries a CRC.
    same = folder / "checkpoint-1_22_breakpoint.ckpt"
    _breakpoint(same, 1, 22)
    newer.unlink()
    assert newest_good_checkpoint(failed, "checkpoint", 1) == "checkpoint-1_22.ckpt"
    assert capsys.readouterr().out == (
        f"trainer.resume: {same} is not newer than checkpoint-1_22.ckpt, which carries a CRC: "
        "continuing from that\n"
    )


@pytest.mark.parametrize(
    "damage", ["truncated", "cut at an entry's end", "changed after its record"]
)
def test_a_damaged_breakpoint_file_is_named_and_the_last_checkpoint_continued_from(
    tmp_path, capsys, damage
):
    run_dir = _run_folder(tmp_path, "failed", "d", "FAILED", 1.0)
    regular = run_dir / "checkpoints/rank_0/checkpoint-1_10.ckpt"
    append = {"epoch_num": 1, "step_num": 10}
    regular.parent.mkdir(parents=True)
    ms.save_checkpoint(nn.Dense(2, 2), str(regular), crc_check=True, append_dict=append)
    damaged = run_dir / "checkpoints/rank_0/checkpoint-1_12_breakpoint.ckpt"
    _breakpoint(damaged, 1, 12)
    if damage == "truncated":
        _truncate(damaged)
    elif damage == "cut at an entry's end":
        # Without step_num, its last entry, it still parses: it lacks an entry the numbered
        # checkpoint has.
        whole = damaged.read_bytes()
        damaged.write_bytes(whole[: whole.rindex(b"step_num") - 4])
        assert "step_num" not in ms.load_checkpoint(str(damaged))
    else:
        record_breakpoint(damaged, 12)
        data = bytearray(damaged.read_bytes())
        data[-20] ^= 0xFF  # inside the last tensor's data: MindSpore's parse reads it
        damaged.write_bytes(bytes(data))
    assert newest_good_checkpoint(run_dir, "checkpoint", 1) == "checkpoint-1_10.ckpt"
    out = capsys.readouterr().out
    assert out.startswith(f"ms_exp: warning: checkpoint {damaged} is damaged (truncated")
    if damage == "cut at an entry's end":
        assert "it lacks 1 of the entries of checkpoint-1_10.ckpt, such as step_num" in out
    if damage == "changed after its record":
        assert "its SHA-256 differs from the one recorded in " in out
    assert out.endswith(f"; not resuming from it (kept as {damaged}.damaged)\n")


def test_a_resumed_job_leaves_out_the_steps_the_run_has_only_with_the_same_config():
    logged = {"step": 40, "eval": 22}
    point = ResumePoint(Path("/r"), "checkpoint-2_18.ckpt", 2, 18, logged=logged)
    assert point.not_to_log_again == {}
    assert (
        ResumePoint(
            Path("/r"), "checkpoint-2_18.ckpt", 2, 18, logged=logged, same_config=True
        ).not_to_log_again
        == logged
    )
