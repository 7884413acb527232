"""Console lines for networks that return several losses, in the hybrid-training
tutorial's format: ``epoch: 1 step: 1, wide_loss is 0.6873926, deep_loss is 0.8878349``.

MindSpore's ``LossMonitor`` prints only the first output of such a network."""
from typing import Sequence

import numpy as np
from mindspore.train import Callback


def loss_parts(net_outputs, names: Sequence[str]) -> dict:
    """``{name: value}`` for the train step's outputs, one per name."""
    return {name: float(np.asarray(out.asnumpy()).reshape(-1)[0])
            for name, out in zip(names, net_outputs)}


class LossPartsMonitor(Callback):
    def __init__(self, names: Sequence[str], per_print_times: int = 1):
        super().__init__()
        self.names = tuple(names)
        self.per_print_times = per_print_times

    def on_train_step_end(self, run_context):
        params = run_context.original_args()
        step_in_epoch = (params.cur_step_num - 1) % params.batch_num + 1
        if params.cur_step_num % self.per_print_times:
            return
        parts = loss_parts(params.net_outputs, self.names)
        bad = [name for name, value in parts.items() if not np.isfinite(value)]
        if bad:
            # As LossMonitor does for its one loss: a diverged run should stop, not go on.
            raise ValueError(f"epoch: {params.cur_epoch_num} step: {step_in_epoch}: "
                             f"{', '.join(bad)} is {parts[bad[0]]}; training stopped")
        shown = ", ".join(f"{name} is {value}" for name, value in parts.items())
        print(f"epoch: {params.cur_epoch_num} step: {step_in_epoch}, {shown}", flush=True)
