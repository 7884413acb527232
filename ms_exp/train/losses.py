"""The loss from the ``loss`` section: a built-in named loss (a ``_target_`` config of
``NAMED_LOSSES``, label smoothing as the model zoo ResNet's ``src/CrossEntropySmooth.py``),
any loss Cell by ``_target_``, or the weighted sum of ``loss.parts``, each reported on its own."""

from typing import Any, Sequence

from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype
from omegaconf import DictConfig

from ms_exp.config.schema import LOSS_TARGET, LossConfig, LossPart, loss_own_keys, loss_parts
from ms_exp.config.targets import TARGET, build, target_path

TOTAL = "loss"  # the name of the weighted sum among the reported values

# loss.name -> the ``_target_`` config it stands for, from the loss's own keys.
NAMED_LOSSES = {
    # The model-saving tutorial's loss.
    "cross_entropy": lambda cfg: {
        TARGET: "mindspore.nn.CrossEntropyLoss",
        "label_smoothing": cfg.label_smoothing,
    },
    # The training-flow tutorial's loss; MindSpore's version has no label smoothing.
    "softmax_cross_entropy": lambda cfg: {
        TARGET: "mindspore.nn.SoftmaxCrossEntropyWithLogits",
        "sparse": True,
        "reduction": "mean",
    },
    # The model zoo ResNet's; num_classes is passed (its signature names it).
    "cross_entropy_smooth": lambda cfg: {
        TARGET: "ms_exp.train.losses.CrossEntropySmooth",
        "smooth_factor": cfg.label_smoothing,
    },
}


class CrossEntropySmooth(nn.LossBase):
    """The model zoo ResNet's label-smoothing cross entropy: sparse labels become one-hot
    rows of ``1 - smooth_factor`` on the label and ``smooth_factor / (num_classes - 1)``
    elsewhere, then softmax cross entropy. (``nn.CrossEntropyLoss(label_smoothing=e)``
    spreads ``e / num_classes`` over every class, the label's included: not the same loss.)
    """

    def __init__(self, num_classes: int, smooth_factor: float = 0.0, reduction: str = "mean"):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"CrossEntropySmooth needs at least 2 classes, got {num_classes}")
        self.on_value = Tensor(1.0 - smooth_factor, mstype.float32)
        self.off_value = Tensor(smooth_factor / (num_classes - 1), mstype.float32)
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction=reduction)

    def construct(self, logits: Any, labels: Any) -> Any:
        target = ops.one_hot(labels, logits.shape[1], self.on_value, self.off_value)
        return self.ce(logits, target)


def create_loss(cfg: DictConfig, num_classes: int, key: str = "loss") -> nn.Cell:
    """The loss ``cfg`` names (``loss``, or the part ``key``, ``loss.parts.<name>``) for
    ``num_classes``: the user's ``_target_`` with its own arguments, else the built-in of
    ``cfg.name``."""
    user = target_path(cfg) is not None
    return build(
        key,
        cfg if user else NAMED_LOSSES[cfg.name.value](cfg),
        own_keys=loss_own_keys(cfg, LossConfig if key == "loss" else LossPart) if user else (),
        provided={"num_classes": num_classes},
        expected=(nn.Cell,),
        expected_text=LOSS_TARGET,
    )


class LossParts(nn.Cell):
    """``(total, part_1, ..., part_n)`` of ``(logits, labels)``; total = sum of
    weight_i * part_i. The parts are reported unweighted."""

    def __init__(self, parts: Sequence[Any], weights: Sequence[float]):
        super().__init__()
        self.parts = nn.CellList(parts)
        self.weights = tuple(float(w) for w in weights)

    def construct(self, logits: Any, labels: Any) -> Any:
        values = ()  # type: tuple
        for part in self.parts:
            values = values + (part(logits, labels),)
        total = values[0] * self.weights[0]
        for i in range(1, len(values)):
            total = total + values[i] * self.weights[i]
        return (total,) + values


class TotalLoss(nn.Cell):
    """The weighted sum alone: the ``loss_fn`` Model trains, the same math as the
    functional loop's."""

    def __init__(self, parts: LossParts):
        super().__init__()
        self.parts = parts

    def construct(self, logits: Any, labels: Any) -> Any:
        return self.parts(logits, labels)[0]


def create_loss_parts(loss_cfg: DictConfig, num_classes: int) -> LossParts:
    """Every configured part; without ``loss.parts``, the one loss of the section."""
    parts = loss_parts(loss_cfg)
    if not parts:
        return LossParts([create_loss(loss_cfg, num_classes)], [1.0])
    return LossParts(
        [create_loss(part, num_classes, f"loss.parts.{name}") for name, part in parts.items()],
        [part.weight for part in parts.values()],
    )


def create_training_loss(loss_cfg: DictConfig, num_classes: int) -> nn.Cell:
    """The ``loss_fn`` of ``Model``: the configured loss, or the weighted sum of its parts."""
    if not loss_parts(loss_cfg):
        return create_loss(loss_cfg, num_classes)
    return TotalLoss(create_loss_parts(loss_cfg, num_classes))
