"""Console monitors: the loss lines of networks with several losses, and epoch times that
an evaluation inside ``Model.fit`` does not corrupt."""

import time
from typing import Any, Sequence

import numpy as np
from mindspore.train import Callback, TimeMonitor

from ms_exp.tracking.callback import loss_parts


class LossPartsMonitor(Callback):
    """The hybrid-training tutorial's lines for a network returning several losses:
    ``epoch: 1 step: 1, wide_loss is 0.6873926, deep_loss is 0.8878349``. MindSpore's
    ``LossMonitor`` prints only the first of them."""

    def __init__(self, names: Sequence[str], per_print_times: int = 1):
        super().__init__()
        self.names = tuple(names)
        self.per_print_times = per_print_times

    def on_train_step_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        step_in_epoch = (params.cur_step_num - 1) % params.batch_num + 1
        if params.cur_step_num % self.per_print_times:
            return
        parts = loss_parts(params.net_outputs, self.names)
        bad = [name for name, value in parts.items() if not np.isfinite(value)]
        if bad:
            # As LossMonitor does for its one loss: a diverged run should stop, not go on.
            raise ValueError(
                f"epoch: {params.cur_epoch_num} step: {step_in_epoch}: "
                f"{', '.join(bad)} is {parts[bad[0]]}; training stopped"
            )
        shown = ", ".join(f"{name} is {value}" for name, value in parts.items())
        print(f"epoch: {params.cur_epoch_num} step: {step_in_epoch}, {shown}", flush=True)


class FitTimeMonitor(TimeMonitor):
    """``TimeMonitor`` whose "Train epoch time" is the epoch's training time.

    ``Model.fit`` evaluates before it ends the train epoch, and the eval epoch's begin resets
    MindSpore's clock; here the train epoch's start survives the evaluation, moved on by
    its duration."""

    epoch_time: float  # TimeMonitor's: when its epoch began (time.time())

    def on_eval_epoch_begin(self, run_context: Any) -> None:
        train_start = self.epoch_time
        super().on_eval_epoch_begin(run_context)
        self._paused_train_start = train_start

    def on_eval_epoch_end(self, run_context: Any) -> None:
        eval_start = self.epoch_time
        super().on_eval_epoch_end(run_context)
        if hasattr(self, "_paused_train_start"):
            self.epoch_time = self._paused_train_start + (time.time() - eval_start)
            del self._paused_train_start
