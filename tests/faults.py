"""``python tests/faults.py FAULT ARG -- overrides...``: ``python -m ms_exp.run overrides...``
with a fault at a known moment, so a test can kill a job exactly where a real kill could
land.

- ``kill-after-checkpoint STEP``: SIGKILL once the numbered checkpoint of global step STEP
  is written (before anything that follows it in that step: the epoch's evaluation, the
  removal of old checkpoints).
- ``kill-after-mlflow-finished -``: SIGKILL once the job's MLflow run is ended FINISHED.
"""

import os
import signal
import sys


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_checkpoint(step: str) -> None:
    from ms_exp.checkpoint.callbacks import TimedModelCheckpoint

    written = TimedModelCheckpoint._remove_old

    def remove_old(self):
        if self._last_triggered_step == int(step):
            _kill()
        written(self)

    TimedModelCheckpoint._remove_old = remove_old


def kill_after_mlflow_finished(_: str) -> None:
    from ms_exp.tracking.sidecar import SidecarTracker

    finish = SidecarTracker.finish

    def finished(self, status):
        finish(self, status)
        if status == "FINISHED":
            _kill()

    SidecarTracker.finish = finished


if __name__ == "__main__":
    fault, argument, separator, *overrides = sys.argv[1:]
    assert separator == "--", sys.argv
    globals()[fault.replace("-", "_")](argument)
    from ms_exp.run import main

    sys.argv = ["ms_exp.run", *overrides]
    sys.exit(main(overrides))
