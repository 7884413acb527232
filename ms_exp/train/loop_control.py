"""Callbacks that move where ``Model.fit`` starts and stops: a resumed run starts at the
step after its checkpoint, an interrupted one stops at a step boundary with a checkpoint."""

from pathlib import Path
from typing import Any, Optional

from mindspore.train import Callback

from ms_exp.checkpoint.callbacks import TimedModelCheckpoint
from ms_exp.tracking.lifecycle import StepBoundary, Terminated
from ms_exp.train.stop_step import agreed_stop_step, propose_stop_step


class StartAtStep(Callback):
    """Counts steps on from ``step``: ``Model.fit(initial_epoch=...)`` starts at an epoch
    but counts from 0, and every callback (checkpoint names, MLflow steps, LossMonitor)
    reads ``cur_step_num``. Must come first among the callbacks."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def on_train_begin(self, run_context: Any) -> None:
        run_context.original_args().cur_step_num = self.step


class StopOnSignal(Callback):
    """Acts on a SIGINT/SIGTERM held by ms_exp.tracking.lifecycle until the step ended:
    saves a checkpoint of that step with ``saver`` (when checkpoints are saved) and raises
    Terminated, which ends the MLflow run KILLED. Must come after the other callbacks, so the
    step's metrics and regular checkpoint are written first.

    With ``stop_file`` (a distributed job) the ranks stop after the step they agree on there
    (ms_exp/train/stop_step.py), one after the signal, also a rank that saw no signal."""

    def __init__(
        self, saver: Optional[TimedModelCheckpoint] = None, stop_file: Optional[Path] = None
    ):
        super().__init__()
        self.saver = saver
        self.stop_file = stop_file
        self.stop_at: Optional[int] = None

    def on_train_begin(self, run_context: Any) -> None:
        StepBoundary.armed = True

    def on_train_step_end(self, run_context: Any) -> None:
        if self.stop_file is None:
            if StepBoundary.pending:
                self._stop(run_context)
            return
        step = run_context.original_args().cur_step_num
        if self.stop_at is None:
            if StepBoundary.pending:
                self.stop_at = propose_stop_step(self.stop_file, step + 1)
            else:
                self.stop_at = agreed_stop_step(self.stop_file)
        if self.stop_at is not None and step >= self.stop_at:
            self._stop(run_context)

    def on_train_end(self, run_context: Any) -> None:
        # A signal during the last evaluation: the final checkpoint is written by now.
        if StepBoundary.pending or self.stop_at is not None:
            self._stop(run_context)
        StepBoundary.reset()

    def _stop(self, run_context: Any) -> None:
        message = (
            StepBoundary.pending
            or f"another rank received a signal: all stop after step {self.stop_at}"
        )
        StepBoundary.reset()
        if self.saver is not None:
            self.saver.save_now(run_context)
            print(f"interrupted: checkpoint {self.saver.latest_ckpt_file_name} saved", flush=True)
        raise Terminated(message)
