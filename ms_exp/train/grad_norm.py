"""``train/grad_norm``: the global L2 norm of each step's gradients, as the optimizer is
given them.

The optimizer call is the one place every train step hands over the gradients (reduced and
unscaled), so the optimizer's class is swapped for a subclass whose ``construct`` first
stores the norm into a Parameter, held by a plain object so that it stays out of every
checkpoint (docs/design.md#grad-norm-probe). A fixed scale the optimizer's own
``loss_scale`` divides divides the norm too; an overflowed step stores nothing.
"""

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, ops
from omegaconf import DictConfig


def grad_norm_enabled(tracking_cfg: DictConfig) -> bool:
    """``tracking.log_grad_norm`` where there is a run to log it in."""
    return bool(tracking_cfg.log_grad_norm) and bool(tracking_cfg.enabled)


class GradNormProbe:
    """Where the optimizer leaves the last step's norm."""

    def __init__(self) -> None:
        self.value = Parameter(Tensor(0.0, ms.float32), name="grad_norm", requires_grad=False)

    def read(self) -> float:
        return float(np.asarray(self.value.asnumpy()).reshape(-1)[0])


class _StoresGradNorm:
    """Mixed in before the optimizer's class; ``grad_norm_probe`` set on the instance."""

    loss_scale: float  # the optimizer's
    grad_norm_probe: GradNormProbe

    def construct(self, gradients: Any) -> Any:
        squares = [ops.reduce_sum(ops.square(g.astype(ms.float32))) for g in gradients]
        norm = ops.sqrt(ops.addn(squares)) / self.loss_scale
        stored = ops.assign(self.grad_norm_probe.value, norm)
        # super() without arguments recurses in graph mode: the class is named.
        # The optimizer's class comes after this one (store_grad_norm).
        return ops.depend(super(_StoresGradNorm, self).construct(gradients), stored)  # type: ignore[misc]


def store_grad_norm(optimizer: Any) -> GradNormProbe:
    """Make ``optimizer`` store each step's gradient norm; the probe to read it from."""
    cls = type(optimizer)
    optimizer.__class__ = type(cls.__name__, (_StoresGradNorm, cls), {"__module__": cls.__module__})
    probe = GradNormProbe()
    object.__setattr__(optimizer, "grad_norm_probe", probe)
    return probe
