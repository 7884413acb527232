"""The loss from the ``loss`` section: one of the named losses (label smoothing as the
model zoo ResNet's ``src/CrossEntropySmooth.py``), or several named parts
(``loss.parts``), as the training-flow tutorial's Trainer has ``loss = loss1 + loss2``: the
loss is the weighted sum, and each part is reported on its own (``train/<part>`` in
MLflow, ``<part> is ...`` on the console)."""
from typing import Tuple

from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype

TOTAL = "loss"  # the name of the weighted sum among the reported values



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

    def construct(self, logits, labels):
        target = ops.one_hot(labels, logits.shape[1], self.on_value, self.off_value)
        return self.ce(logits, target)


def create_loss(cfg, num_classes: int):
    """The loss ``cfg`` names (``loss``, or one of ``loss.parts``) for ``num_classes``."""
    name = cfg.name.value
    if name == "cross_entropy":
        return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    if name == "cross_entropy_smooth":
        return CrossEntropySmooth(num_classes, smooth_factor=cfg.label_smoothing)
    # The training-flow tutorial's loss; MindSpore's version has no label smoothing.
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

class LossParts(nn.Cell):
    """``(total, part_1, ..., part_n)`` of ``(logits, labels)``; total = sum of
    weight_i * part_i. The parts are reported unweighted."""

    def __init__(self, parts, weights):
        super().__init__()
        self.parts = nn.CellList(parts)
        self.weights = tuple(float(w) for w in weights)

    def construct(self, logits, labels):
        values = ()
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

    def construct(self, logits, labels):
        return self.parts(logits, labels)[0]


def part_names(loss_cfg) -> Tuple[str, ...]:
    return tuple(loss_cfg.parts.keys())


def create_loss_parts(loss_cfg, num_classes: int) -> LossParts:
    """Every configured part; without ``loss.parts``, the one loss of ``loss.name``."""
    if not loss_cfg.parts:
        return LossParts([create_loss(loss_cfg, num_classes)], [1.0])
    parts = list(loss_cfg.parts.values())
    return LossParts([create_loss(part, num_classes) for part in parts],
                     [part.weight for part in parts])


def create_training_loss(loss_cfg, num_classes: int) -> nn.Cell:
    """The ``loss_fn`` of ``Model``: the configured loss, or the weighted sum of its parts."""
    if not loss_cfg.parts:
        return create_loss(loss_cfg, num_classes)
    return TotalLoss(create_loss_parts(loss_cfg, num_classes))
