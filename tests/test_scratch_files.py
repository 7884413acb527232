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
