"""The stage-two training cell: MindSpore's ``BoostTrainOneStepCell`` with three fixes.

1. ``BoostTrainOneStepCell._no_sens_impl`` has no ``return``, so no one sees the loss:
   ``LossReturningBoostCell`` returns it (docs/design.md#boost-cell-returns-no-loss).
2. With several ranks ``DimReduce`` broadcasts per rank (fails on CPU) and floor-divides the
   loss: ``FixedDimReduce`` sums with one AllReduce and divides with ``/``
   (docs/design.md#dimreduce-multi-rank).
3. The line search leaves BatchNorm's moving statistics moved by its trial passes:
   ``FixedDimReduce`` restores the non-trainable parameters after each trial
   (docs/design.md#dimreduce-batchnorm).
"""

from typing import Any, Tuple

import numpy as np
from mindspore import ParameterTuple, nn, ops
from mindspore.boost import BoostTrainOneStepCell

# MindSpore's own graph functions, so the fixed methods do exactly what the originals do.
from mindspore.boost.dim_reduce import DimReduce, _pca_projection, _save_weight, _scale_grad
from mindspore.ops import composite as C


class _AllReduceEach(nn.Cell):
    """AllReduce(SUM) of every tensor of a tuple: the sum over ranks of each rank's part."""

    def __init__(self) -> None:
        super().__init__()
        self.allreduce = ops.AllReduce()
        self.hyper_map = C.HyperMap()

    def construct(self, parts: Any) -> Any:
        return self.hyper_map(self.allreduce, parts)


class FixedDimReduce(DimReduce):
    """DimReduce with fixes 2 and 3 of the module docstring; otherwise MindSpore's own."""

    keep_stats = False

    def keep_statistics(self, params: Any) -> None:
        """Restore ``params`` (BatchNorm's moving statistics) after each line-search trial."""
        if params:
            self.stats = ParameterTuple(params)
            self.stats_clone = self.stats.clone(prefix="stats_clone", init="same")
            self.keep_stats = True

    def _set_local_pca_mat(
        self, pca_mat_local: Any, n_components: int, parameter_tuple: Any
    ) -> None:
        super()._set_local_pca_mat(pca_mat_local, n_components, parameter_tuple)
        if self.rank_size > 1:
            # DimReduce.construct adds broadcast(part) over this list onto zeros.
            self.broadcast_list = nn.CellList([_AllReduceEach()])

    def _generate_gk(
        self, weight: Any, loss: Any, old_grad: Any, loss_scale: Any
    ) -> Tuple[Any, Any, Any]:
        weight = ops.depend(weight, loss)
        old_grad = ops.depend(old_grad, weight)
        old_grad = self.hyper_map(ops.partial(_scale_grad, loss_scale), old_grad)
        old_loss = self.allreduce(loss) / self.rank_size if self.rank_size > 1 else loss
        gk_local = self.hyper_map(_pca_projection, self.pca_list_local, old_grad)
        gk_local = ops.addn(gk_local)
        gk_pad = self.allgather(gk_local) if self.rank_size > 1 else gk_local
        gk_pad = ops.reshape(gk_pad, (-1, 1))
        gk = gk_pad[0 : self.n_components, :]
        return gk, old_loss, gk_local

    def _find_rho(
        self,
        gk: Any,
        dk: Any,
        dn: Any,
        old_loss: Any,
        weight: Any,
        weight_clone: Any,
        rho: Any,
        *inputs: Any,
    ) -> Any:
        res = self.false_flag
        sn = self.hyper_map(ops.partial(self.mul, -1 * rho), dn)
        sn = ops.depend(sn, old_loss)
        if self.keep_stats:
            sn = ops.depend(sn, self.hyper_map(_save_weight, self.stats_clone, self.stats))
        update = self.optimizer(sn)
        new_loss = ops.depend(self.network(*inputs), update)
        if self.keep_stats:
            saved = ops.depend(self.stats_clone, new_loss)
            new_loss = ops.depend(new_loss, self.hyper_map(_save_weight, self.stats, saved))
        if self.rank_size > 1:
            new_loss = self.allreduce(new_loss) / self.rank_size
        old_loss_delta = old_loss + self.sigma * rho * ops.squeeze(
            self.matmul(ops.transpose(gk, (1, 0)), dk)
        )
        if old_loss_delta > new_loss:
            _save_weight(self.sk, rho * dk)
            res = self.true_flag
        weight_clone = ops.depend(weight_clone, old_loss_delta)
        restore = self.hyper_map(_save_weight, weight, weight_clone)
        return ops.depend(res, restore)


class LossReturningBoostCell(BoostTrainOneStepCell):
    """``BoostTrainOneStepCell`` whose no-sens path returns the loss (fix 1 above) and whose
    DimReduce is ``FixedDimReduce`` (fixes 2 and 3)."""

    def __init__(self, network: Any, optimizer: Any, sens: Any = None):
        # DimReduce is a Cell with auto_prefix: assigning it the optimizer renames the
        # network's own parameters to "optimizer.<name>", so checkpoints of stage two would
        # no longer load into the network. The names are put back below
        # (docs/design.md#dimreduce-renames-parameters).
        names = {id(p): p.name for p in network.get_parameters()}
        super().__init__(network, optimizer, sens)
        if self.enable_dim_reduce:
            old = self.dim_reduce
            # Rebuilt from the tensors MindSpore already loaded: pca_list_local holds this
            # rank's rows of the PCA matrix, split per parameter.
            self.dim_reduce: DimReduce = FixedDimReduce(
                old.network,
                old.optimizer,
                self.weights,
                np.concatenate([part.asnumpy() for part in old.pca_list_local], axis=1),
                old.n_components,
                float(old.rho_list[1].asnumpy()),
                old.gamma,
                old.alpha,
                old.sigma,
                old.rank,
                old.rank_size,
            )
            self.dim_reduce.keep_statistics(network.untrainable_params())
        for param in network.get_parameters():
            param.name = names.get(id(param), param.name)

    def _no_sens_impl(self, *inputs: Any) -> Any:
        loss = self.network(*inputs)
        sens = ops.fill(loss.dtype, loss.shape, self.sens)
        grads = self.grad_no_sens(self.network, self.weights)(*inputs)
        grads = self.grad_reducer(grads)
        if self.use_grad_accumulation:
            return self.gradient_accumulation_process(loss, grads, sens, *inputs)
        if self.enable_dim_reduce:
            return ops.depend(
                loss, self.dim_reduce(loss, grads, sens, self.weights, self.weights_clone, *inputs)
            )
        return ops.depend(loss, self.optimizer(grads))
