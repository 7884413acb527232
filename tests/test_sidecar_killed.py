"""The MLflow sidecar killed under a job: the job stops saying so (it used to point at an
error "printed above" that a killed process never prints)."""

import signal

import pytest
from conftest import migrated_store

from ms_exp.tracking.sidecar import SidecarTracker, TrackingFailed


@pytest.mark.e2e  # starts the sidecar, a process of its own that imports MLflow: seconds
def test_a_killed_sidecar_is_named_with_its_signal(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(migrated_store().read_bytes())
    tracker = SidecarTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sidecar", "r", {})
    tracker.wait_for_run()
    pid = tracker._process.pid
    tracker._process.send_signal(signal.SIGKILL)
    tracker._process.wait()
    with pytest.raises(TrackingFailed) as failed:
        tracker.finish("FINISHED")
    assert str(failed.value) == (
        f"the MLflow sidecar process (pid {pid}) was killed by SIGKILL before answering; "
        "the run keeps what it had delivered (continue it with trainer.resume=auto)"
    )
