"""The learning rate an optimizer used at a step, for ``train/lr``.

MindSpore's optimizer reads its rate at ``global_step`` and then advances it: the rate of
step ``n`` (1-based, as the callbacks count) is the schedule at index ``n - 1``. A per-step
schedule is copied to numpy once and read without touching the device; a constant rate is
read when logged (a callback may change it). With group learning rates, the first group's.
"""

from typing import Any

import numpy as np
from mindspore import Tensor, int32
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

# Private to MindSpore: the cell a list or Tensor of per-step rates becomes (a gather of
# its ``learning_rate`` Parameter at global_step), mindspore/nn/optim/optimizer.py.
from mindspore.nn.optim.optimizer import _IteratorLearningRate


class LearningRates:
    """The learning rate ``optimizer`` used at each step."""

    def __init__(self, optimizer: Any) -> None:
        rate = optimizer.learning_rate
        if getattr(optimizer, "is_group_lr", False):
            rate = rate[0]
        self._table = None
        self._schedule = None
        self._parameter: Any = None  # a Parameter, when neither of the two above
        if isinstance(rate, _IteratorLearningRate):
            self._table = np.asarray(rate.learning_rate.asnumpy(), dtype=np.float64).reshape(-1)
        elif isinstance(rate, LearningRateSchedule):
            self._schedule = rate
        else:
            self._parameter = rate

    def at(self, step: int) -> float:
        """The rate of step ``step`` (1-based: the first step is 1)."""
        index = max(step - 1, 0)
        if self._table is not None:
            # Beyond its end MindSpore's gather gives the last rate's neighbour, 0 on CPU;
            # a schedule always covers the steps trained (optimizer.decay_epochs >= epochs).
            return float(self._table[min(index, len(self._table) - 1)])
        if self._schedule is not None:
            return float(np.asarray(self._schedule(Tensor(index, int32)).asnumpy()).reshape(-1)[0])
        return float(np.asarray(self._parameter.asnumpy()).reshape(-1)[0])
