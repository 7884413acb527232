"""Callbacks that move where ``Model.fit`` starts and stops: a resumed run starts at the
step after its checkpoint, an interrupted one stops at a step boundary with a checkpoint."""
from mindspore.train import Callback

from ms_exp.tracking.lifecycle import StepBoundary, Terminated


class StartAtStep(Callback):
    """Counts steps on from ``step``: ``Model.fit(initial_epoch=...)`` starts at an epoch
    but counts from 0, and every callback (checkpoint names, MLflow steps, LossMonitor)
    reads ``cur_step_num``. Must come first among the callbacks."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def on_train_begin(self, run_context):
        run_context.original_args().cur_step_num = self.step


class StopOnSignal(Callback):
    """Acts on a SIGINT/SIGTERM held by ms_exp.tracking.lifecycle until the step ended:
    saves a checkpoint of that step with ``saver`` (when checkpoints are saved) and raises
    Terminated, which ends the MLflow run KILLED. Must come after the other callbacks, so the
    step's metrics and regular checkpoint are written first."""

    def __init__(self, saver=None):
        super().__init__()
        self.saver = saver

    def on_train_begin(self, run_context):
        StepBoundary.armed = True

    def on_train_step_end(self, run_context):
        if StepBoundary.pending:
            self._stop(run_context)

    def on_train_end(self, run_context):
        # A signal during the last evaluation: the final checkpoint is written by now.
        if StepBoundary.pending:
            self._stop(run_context)
        StepBoundary.reset()

    def _stop(self, run_context) -> None:
        message = StepBoundary.pending
        StepBoundary.reset()
        if self.saver is not None:
            self.saver.save_now(run_context)
            print(f"interrupted: checkpoint {self.saver.latest_ckpt_file_name} saved",
                  flush=True)
        raise Terminated(message)


class FlushAfterCheckpoint(Callback):
    """Once a checkpoint is written, wait until the metrics of the steps it holds are in the
    MLflow run: a run killed later and resumed from it then has no gap in its curves (the
    steps after the checkpoint are trained and logged again). Comes after ``saver``."""

    def __init__(self, saver, tracker):
        super().__init__()
        self.saver, self.tracker = saver, tracker
        self.flushed = saver.latest_ckpt_file_name

    def on_train_step_end(self, run_context):
        if self.saver.latest_ckpt_file_name != self.flushed:
            self.flushed = self.saver.latest_ckpt_file_name
            self.tracker.flush()
