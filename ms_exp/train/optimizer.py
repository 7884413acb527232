"""Optimizer and learning-rate schedule from the ``optimizer`` section.

Learning rates and parameter groups as the model zoo ResNet's ``get_lr`` and
``init_group_params``. The optimizer is any mindspore.nn.Optimizer subclass by
``_target_``, or a built-in ``optimizer.name`` (a ``_target_`` config of ``NAMED_OPTIMIZERS``).
"""

import math
from typing import Any, Dict, List

import numpy as np
from mindspore import nn
from omegaconf import DictConfig

from ms_exp.config.schema import OPTIMIZER_REQUIRED, OPTIMIZER_TARGET, OptimizerConfig, own_keys
from ms_exp.config.targets import TARGET, build, target_path

# optimizer.name -> the ``_target_`` config it stands for. ``optimizer.momentum`` reaches
# every target whose signature names it but sgd's (plain SGD).
NAMED_OPTIMIZERS = {
    "sgd": {TARGET: "mindspore.nn.SGD", "momentum": 0.0},
    "momentum": {TARGET: "mindspore.nn.Momentum"},
    "adam": {TARGET: "mindspore.nn.Adam"},
}

# Parameters whose name holds one of these get no weight decay with optimizer.group_params:
# batch norm's gamma and beta, and biases (the model zoo's init_group_params).
NO_DECAY_NAMES = ("beta", "gamma", "bias")


def learning_rates(cfg: DictConfig, steps_per_epoch: int, epochs: int) -> List[float]:
    """One learning rate per step of the schedule, as the model zoo's ``get_lr`` (``constant``,
    the cosine's warmup then ``lr``, has no counterpart; the cosine ends near 0 whatever
    min_lr). With ``decay_epochs`` beyond ``epochs`` the list covers the whole schedule and
    training reads its first steps."""
    total = steps_per_epoch * (cfg.decay_epochs or epochs)
    warmup = steps_per_epoch * cfg.warmup_epochs
    lr_max, lr_end = cfg.lr, cfg.min_lr
    lr_init = cfg.min_lr if cfg.lr_init is None else cfg.lr_init
    schedule = cfg.schedule.value
    decay = total - warmup
    rates = []
    for i in range(total):
        if i < warmup:
            done = i if schedule == "linear" else i + 1
            rate = lr_init + (lr_max - lr_init) * done / warmup
        elif schedule == "linear":
            rate = lr_max - (lr_max - lr_end) * (i - warmup) / decay
        elif schedule == "cosine":
            linear_decay = (total - i) / decay
            cosine_decay = 0.5 * (1 + math.cos(math.pi * 2 * 0.47 * i / decay))
            rate = lr_max * (linear_decay * cosine_decay + 0.00001)
        else:
            rate = lr_max
        rates.append(rate)
    return rates


def parameter_groups(network: nn.Cell, weight_decay: float) -> List[Dict[str, Any]]:
    """The model zoo's ``init_group_params``: weight decay on every trainable parameter but
    batch norm's and the biases, and ``order_params`` keeping the network's order (the
    optimizer state, and so the checkpoint, lists parameters as without groups)."""
    params = network.trainable_params()
    decayed = [p for p in params if not any(word in p.name for word in NO_DECAY_NAMES)]
    not_decayed = [p for p in params if any(word in p.name for word in NO_DECAY_NAMES)]
    return [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": not_decayed, "weight_decay": 0.0},
        {"order_params": params},
    ]


def create_optimizer(
    cfg: DictConfig, network: nn.Cell, steps_per_epoch: int, epochs: int, loss_scale: float = 1.0
) -> Any:
    """The optimizer of ``network``'s trainable parameters. ``loss_scale``: the fixed loss
    scale the gradients arrive multiplied by (``FixedLossScaleManager`` with
    ``drop_overflow_update=False`` leaves the division to the optimizer, as the tutorial's
    ``Momentum(..., loss_scale=1024)``)."""
    if cfg.schedule.value == "constant" and cfg.warmup_epochs == 0:
        lr = cfg.lr  # a scalar keeps the checkpoint free of a per-step lr table
    else:
        # An array, not a list: it is handed to the target as it is, never through a
        # config node per step (MindSpore makes the same float32 tensor of either).
        lr = np.asarray(learning_rates(cfg, steps_per_epoch, epochs), dtype=np.float32)
    params = (
        parameter_groups(network, cfg.weight_decay)
        if cfg.group_params
        else network.trainable_params()
    )
    # The user's ``_target_`` config with its own keys, else the built-in's.
    user = target_path(cfg) is not None
    return build(
        "optimizer",
        cfg if user else NAMED_OPTIMIZERS[cfg.name.value],
        own_keys=own_keys(OptimizerConfig) if user else (),
        provided=optimizer_arguments(cfg, params, lr, loss_scale),
        required=OPTIMIZER_REQUIRED,
        expected=(nn.Optimizer,),
        expected_text=OPTIMIZER_TARGET,
    )


def optimizer_arguments(cfg: DictConfig, params: Any, lr: Any, loss_scale: float) -> Dict[str, Any]:
    """ms_exp's values for the optimizer: ``params`` and ``learning_rate`` always; the
    rest when the target's signature names them. With parameter groups the groups carry
    the weight decay."""
    arguments: Dict[str, Any] = {
        "params": params,
        "learning_rate": lr,
        "momentum": cfg.momentum,
        "loss_scale": loss_scale,
    }
    if not cfg.group_params:
        arguments["weight_decay"] = cfg.weight_decay
    return arguments
