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


@pytest.mark.parametrize("module, inside, args", [
    ("ms_exp.eval", "ms_exp.eval.check_checkpoint_flag", ["--checkpoint", "last"]),
    ("ms_exp.ckpt", "ms_exp.ckpt.run_sources", ["merge", "somewhere"]),
])
def test_sigterm_removes_the_commands_temporary_folder_and_exits_130(
        tmp_path, monkeypatch, module, inside, args):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(inside, terminated_once_inside)
    before = signal.getsignal(signal.SIGTERM)
    result = main_in_process(module, args, tmp_path)
    assert result.rc == 130, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "ms_exp: interrupted (received signal SIGTERM); its temporary files were removed")
    assert list(scratch.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before     # the handler is given back


def test_a_merge_removes_the_scratch_folder_a_killed_merge_left_beside_its_output(tmp_path):
    """SIGKILL runs no handler: the scratch folder (a merged checkpoint without its CRC)
    stays beside ``--output`` until the next merge there, which removes the ones whose
    merging process is gone and leaves a running merge's alone."""
    import subprocess
    import sys

    from ms_exp.checkpoint.scratch import remove_abandoned
    from ms_exp.checkpoint.transform import SCRATCH_PREFIX

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    left = tmp_path / f"{SCRATCH_PREFIX}{gone}-k2j4"
    (left / "dst" / "rank_0").mkdir(parents=True)
    (left / "dst" / "rank_0" / "checkpoint0.ckpt").write_bytes(b"half")
    running = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-a8x1"
    running.mkdir()
    remove_abandoned(SCRATCH_PREFIX, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name]

