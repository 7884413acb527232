"""``ms_exp.eval`` and ``ms_exp.ckpt`` stopped by SIGTERM (a scheduler's, ``kill``) remove
their temporary folders (eval's checkpoint copies, the merge's scratch) and exit 130, as
``ms_exp.run`` does; killed before, they left them behind for good. The signal is sent from
inside the command, once its temporary folder exists, so the moment is exact."""

import os
import signal
import tempfile

import pytest
from conftest import main_in_process


def terminated_once_inside(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    raise AssertionError("SIGTERM did not stop the command")


@pytest.mark.parametrize(
    "module, inside, args",
    [
        ("ms_exp.eval", "ms_exp.eval.check_checkpoint_flag", ["--checkpoint", "last"]),
        ("ms_exp.ckpt", "ms_exp.ckpt.run_sources", ["merge", "somewhere"]),
    ],
)
def test_sigterm_removes_the_commands_temporary_folder_and_exits_130(
    tmp_path, monkeypatch, module, inside, args
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(inside, terminated_once_inside)
    # Sent before MindSpore's runtime started, a SIGTERM is one (ms_exp.tracking.lifecycle).
    monkeypatch.setattr("ms_exp.tracking.lifecycle._mindspore_loaded", lambda: False)
    before = signal.getsignal(signal.SIGTERM)
    result = main_in_process(module, args, tmp_path)
    assert result.rc == 130, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "ms_exp: stopped by SIGTERM; its temporary files were removed"
    )
    assert list(scratch.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is given back


def test_a_merge_removes_the_scratch_folder_a_killed_merge_left_beside_its_output(tmp_path):
    """SIGKILL runs no handler: the scratch folder (a merged checkpoint without its CRC)
    stays beside ``--output`` until the next merge there, which removes the ones whose
    merging process is gone and leaves a running merge's alone."""
    import subprocess
    import sys

    from ms_exp.checkpoint.scratch import remove_abandoned
    from ms_exp.checkpoint.transform import SCRATCH_PREFIX

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    left = tmp_path / f"{SCRATCH_PREFIX}{gone}-k2j4"
    (left / "dst" / "rank_0").mkdir(parents=True)
    (left / "dst" / "rank_0" / "checkpoint0.ckpt").write_bytes(b"half")
    running = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-a8x1"
    running.mkdir()
    remove_abandoned(SCRATCH_PREFIX, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name]


HOLD = """
import sys
from pathlib import Path
from ms_exp.tracking.run_folder import hold_folder
hold_folder(Path(sys.argv[1]), "hydra.run.dir")
print("held", flush=True)
sys.stdin.read()
"""


def test_the_next_job_in_a_run_folder_removes_what_a_killed_job_left_half_written(
    tmp_path, monkeypatch
):
    """``run.<pid>.partial`` (the run record, its writer killed before the rename) and a
    checkpoint's ``.tmp`` (MindSpore's, its writer stopped by a full disk): the next job
    removes them as it writes the run record, once it holds the folder. A .partial whose
    process runs, and any .tmp while another process holds the folder (a rank writing
    the record), are left alone."""
    import subprocess
    import sys

    from ms_exp.tracking import run_folder
    from ms_exp.tracking.run_folder import hold_folder, release_folder, write_run_record

    run_dir = tmp_path / "run"
    rank_0 = run_dir / "checkpoints" / "rank_0"
    rank_0.mkdir(parents=True)
    (rank_0 / "checkpoint-3_20.ckpt").write_bytes(b"whole")
    (rank_0 / "checkpoint-3_24.tmp").write_bytes(b"")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (run_dir / f"run.{gone}.partial").write_text("{")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)],
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        (run_dir / f"run.{holder.pid}.partial").write_text("{")
        write_run_record(run_dir, digest="d", status="RUNNING")  # as a rank does
        assert [p.name for p in run_dir.glob("run.*.partial")] == [f"run.{holder.pid}.partial"]
        assert (rank_0 / "checkpoint-3_24.tmp").exists()
    finally:
        holder.communicate("", timeout=60)
    monkeypatch.setattr(run_folder, "_cleared", set())  # the next job: another process
    hold_folder(run_dir, "hydra.run.dir")
    try:
        write_run_record(run_dir, status="RUNNING")
    finally:
        release_folder(run_dir)
    assert list(run_dir.glob("run.*.partial")) == [] and (run_dir / "run.json").is_file()
    assert sorted(p.name for p in rank_0.iterdir()) == ["checkpoint-3_20.ckpt"]
