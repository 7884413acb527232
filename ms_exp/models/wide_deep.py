"""Wide&Deep, as MindSpore's model zoo (recommend/wide_and_deep) builds it.

Every sample is ``field_size`` (id, weight) pairs. The wide part is a linear model, the deep
part an MLP over the weighted embeddings; their logits add up. Training follows the model
zoo's ``TrainStepWrap``; ``placement=host_device`` keeps the tables and their sparse
optimizers (FTRL, LazyAdam) on the host.
"""

from typing import Any, Dict, List, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common.initializer import Uniform
from mindspore.train import Metric
from omegaconf import DictConfig

from ms_exp.placement.tables import Placement

# Parameters whose name contains this belong to the wide part (the model zoo's split).
WIDE = "wide"


class WideDeepModel(nn.Cell):
    """``(ids, weights)`` of shape (batch, fields) -> (logits (batch, 1), deep embeddings)."""

    def __init__(
        self,
        vocab_size: int,
        field_size: int,
        emb_dim: int,
        deep_layers: List[int],
        keep_prob: float,
        init_range: float,
        placement: Placement,
    ):
        super().__init__()
        self.field_size, self.emb_dim = field_size, emb_dim
        table = dict(
            param_init=Uniform(init_range),
            target=placement.embedding_target,
            sparse=placement.host_tables,
        )
        self.wide_embedding = nn.EmbeddingLookup(vocab_size, 1, **table)
        self.wide_bias = Parameter(Tensor(np.zeros(1, np.float32)), name="wide_bias")
        self.deep_embedding = nn.EmbeddingLookup(vocab_size, emb_dim, **table)
        layers = []
        width = field_size * emb_dim
        for size in deep_layers:
            layers.append(nn.Dense(width, size, activation="relu"))
            if keep_prob < 1.0:
                layers.append(nn.Dropout(p=1.0 - keep_prob))
            width = size
        layers.append(nn.Dense(width, 1))
        self.deep_layers = nn.SequentialCell(layers)

    def construct(self, ids: Any, weights: Any) -> Tuple[Any, Any]:
        mask = weights.reshape(-1, self.field_size, 1)
        wide = ops.reduce_sum(self.wide_embedding(ids) * mask, 1) + self.wide_bias
        embeddings = self.deep_embedding(ids) * mask
        deep = self.deep_layers(embeddings.reshape(-1, self.field_size * self.emb_dim))
        return wide + deep, embeddings


class WideDeepLoss(nn.Cell):
    """``(ids, weights, label)`` -> ``(wide_loss, deep_loss)``.

    The model zoo's L2 over the whole deep table has a dense gradient that host tables
    cannot take (docs/design.md#host-table-dense-gradient) and would touch every row each
    step; here the L2 is over the batch's embeddings, so both placements train one loss."""

    def __init__(self, network: WideDeepModel, l2_coef: float):
        super().__init__(auto_prefix=False)  # keeps the network's parameter names
        self.network = network
        self.l2_coef = l2_coef
        self.log_loss = ops.SigmoidCrossEntropyWithLogits()

    def construct(self, ids: Any, weights: Any, label: Any) -> Tuple[Any, Any]:
        logits, embeddings = self.network(ids, weights)
        wide_loss = self.log_loss(logits, label).mean()
        deep_loss = wide_loss + self.l2_coef * ops.reduce_sum(ops.square(embeddings)) / 2
        return wide_loss, deep_loss


class _OneLoss(nn.Cell):
    def __init__(self, loss_cell: WideDeepLoss, index: int):
        super().__init__(auto_prefix=False)
        self.loss_cell, self.index = loss_cell, index

    def construct(self, ids: Any, weights: Any, label: Any) -> Any:
        return self.loss_cell(ids, weights, label)[self.index]


class WideDeepTrainStep(nn.Cell):
    """One step: FTRL on the wide parameters with ``wide_loss``'s gradient, Adam/LazyAdam
    on the deep ones with ``deep_loss``'s, both scaled by ``loss_scale`` (the model zoo's
    ``sens``). Returns both losses. In data parallel the gradients are averaged over the
    ranks (``DistributedGradReducer`` gathers sparse row gradients)."""

    def __init__(
        self,
        loss_cell: WideDeepLoss,
        placement: Placement,
        wide_lr: float,
        deep_lr: float,
        loss_scale: float,
    ):
        super().__init__(auto_prefix=False)
        self.loss_cell = loss_cell
        self.loss_cell.set_train()
        params = loss_cell.trainable_params()
        self.wide_params = ParameterTuple([p for p in params if WIDE in p.name])
        self.deep_params = ParameterTuple([p for p in params if WIDE not in p.name])
        self.wide_optimizer = nn.FTRL(
            self.wide_params,
            learning_rate=wide_lr,
            l1=1e-8,
            l2=1e-8,
            initial_accum=1.0,
            loss_scale=loss_scale,
        )
        deep_optimizer = nn.LazyAdam if placement.host_tables else nn.Adam
        self.deep_optimizer = deep_optimizer(
            self.deep_params, learning_rate=deep_lr, eps=1e-8, loss_scale=loss_scale
        )
        placement.place_sparse_optimizer(self.wide_optimizer)
        placement.place_sparse_optimizer(self.deep_optimizer)
        self.wide_grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.deep_grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.wide_loss = _OneLoss(loss_cell, 0)
        self.deep_loss = _OneLoss(loss_cell, 1)
        self.loss_scale = loss_scale
        # Both None, or both reducers (MindSpore's, untyped).
        self.reduce_wide: Any = None
        self.reduce_deep: Any = None
        if ms.get_auto_parallel_context("parallel_mode") == ms.ParallelMode.DATA_PARALLEL:
            from mindspore.communication import get_group_size

            mean = ms.get_auto_parallel_context("gradients_mean")
            self.reduce_wide = nn.DistributedGradReducer(self.wide_params, mean, get_group_size())
            self.reduce_deep = nn.DistributedGradReducer(self.deep_params, mean, get_group_size())

    def construct(self, ids: Any, weights: Any, label: Any) -> Tuple[Any, Any]:
        wide_loss, deep_loss = self.loss_cell(ids, weights, label)
        wide_sens = ops.fill(wide_loss.dtype, wide_loss.shape, self.loss_scale)
        deep_sens = ops.fill(deep_loss.dtype, deep_loss.shape, self.loss_scale)
        wide_grads = self.wide_grad(self.wide_loss, self.wide_params)(
            ids, weights, label, wide_sens
        )
        deep_grads = self.deep_grad(self.deep_loss, self.deep_params)(
            ids, weights, label, deep_sens
        )
        if self.reduce_wide is not None:
            wide_grads = self.reduce_wide(wide_grads)
            deep_grads = self.reduce_deep(deep_grads)
        return (
            ops.depend(wide_loss, self.wide_optimizer(wide_grads)),
            ops.depend(deep_loss, self.deep_optimizer(deep_grads)),
        )


class PredictWithSigmoid(nn.Cell):
    """The eval network: ``(log loss, click probabilities, labels)``, read by ``Model``
    with eval_indexes [0, 1, 2] (evaluation)."""

    def __init__(self, network: WideDeepModel):
        super().__init__(auto_prefix=False)
        self.network = network
        self.log_loss = ops.SigmoidCrossEntropyWithLogits()

    def construct(self, ids: Any, weights: Any, label: Any) -> Tuple[Any, Any, Any]:
        logits, _ = self.network(ids, weights)
        return self.log_loss(logits, label).mean(), ops.sigmoid(logits), label


def evaluation(network: WideDeepModel) -> Dict[str, Any]:
    """``Model`` keywords that evaluate ``network`` by AUC and log loss (``loss``, as a
    classifier's), for training and for ms_exp.eval alike."""
    return {
        "eval_network": PredictWithSigmoid(network),
        "metrics": {"auc": AUC(), "loss": nn.Loss()},
        "eval_indexes": [0, 1, 2],  # the eval network's [loss, prediction, label]
    }


def wide_deep(
    input_shape: Sequence[int],
    vocab_size: int,
    placement: Placement,
    emb_dim: int = 80,
    deep_layers: Sequence[int] = (1024, 512, 256, 128),
    keep_prob: float = 1.0,
    init_range: float = 0.01,
) -> WideDeepModel:
    """The ``model=wide_deep`` option's target: tables of ``vocab_size`` rows (the option's
    ``vocab_size``, else the dataset's ids) for samples of ``input_shape`` = (fields,)."""
    field_size = int(input_shape[0])
    return WideDeepModel(
        vocab_size, field_size, emb_dim, list(deep_layers), keep_prob, init_range, placement
    )


def create_train_step(
    model_cfg: DictConfig, network: WideDeepModel, placement: Placement
) -> WideDeepTrainStep:
    return WideDeepTrainStep(
        WideDeepLoss(network, model_cfg.l2_coef),
        placement,
        wide_lr=model_cfg.wide_lr,
        deep_lr=model_cfg.deep_lr,
        loss_scale=model_cfg.loss_scale,
    )


class AUC(Metric):
    """Area under the ROC curve (``roc_auc_score``, as the model zoo's AUCMetric) over every
    sample of the evaluation: it ranks all samples together, so batches cannot be averaged."""

    def __init__(self) -> None:
        super().__init__()
        self.clear()

    def clear(self) -> None:
        self._probs: List[Any] = []
        self._labels: List[Any] = []

    def update(self, *inputs: Any) -> None:
        self._probs.append(self._convert_data(inputs[0]).reshape(-1))
        self._labels.append(self._convert_data(inputs[1]).reshape(-1))

    def eval(self) -> float:
        from sklearn.metrics import roc_auc_score

        if not self._probs:
            raise RuntimeError("AUC.eval() before any update()")
        labels, probs = np.concatenate(self._labels), np.concatenate(self._probs)
        if labels.min() == labels.max():  # one class only: the AUC is undefined
            return float("nan")
        return float(roc_auc_score(labels, probs))
