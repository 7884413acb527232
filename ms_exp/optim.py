"""Optimizer, learning-rate schedule and loss from the ``optimizer`` and ``loss`` sections."""
import math
from typing import List

from mindspore import nn


def learning_rates(cfg, steps_per_epoch: int, epochs: int) -> List[float]:
    """One learning rate per step, as the model zoo's lr generators make them: linear warmup
    from ``min_lr`` to ``lr`` over ``warmup_epochs``, then constant, linear or cosine decay
    to ``min_lr`` over the remaining steps."""
    total = steps_per_epoch * epochs
    warmup = min(steps_per_epoch * cfg.warmup_epochs, total)
    rates = [cfg.min_lr + (cfg.lr - cfg.min_lr) * (step + 1) / warmup for step in range(warmup)]
    decay_steps = total - warmup
    schedule = cfg.schedule.value
    for step in range(decay_steps):
        progress = step / decay_steps
        if schedule == "constant":
            rate = cfg.lr
        elif schedule == "linear":
            rate = cfg.lr - (cfg.lr - cfg.min_lr) * progress
        else:  # cosine
            rate = cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))
        rates.append(rate)
    return rates


def create_optimizer(cfg, params, steps_per_epoch: int, epochs: int):
    if cfg.schedule.value == "constant" and cfg.warmup_epochs == 0:
        lr = cfg.lr  # a scalar keeps the checkpoint free of a per-step lr table
    else:
        lr = learning_rates(cfg, steps_per_epoch, epochs)
    name = cfg.name.value
    if name == "sgd":
        return nn.SGD(params, learning_rate=lr, weight_decay=cfg.weight_decay)
    if name == "momentum":
        return nn.Momentum(params, learning_rate=lr, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay)
    return nn.Adam(params, learning_rate=lr, weight_decay=cfg.weight_decay)


def create_loss(cfg):
    if cfg.name.value == "cross_entropy":
        return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    # The training-flow tutorial's loss; MindSpore's version has no label smoothing.
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
