"""Mixed precision and loss scaling from the ``amp`` section, the same for both loops.

``trainer.loop=model`` hands them to ``Model`` (amp_level, keep_batchnorm_fp32,
loss_scale_manager), as stage one of the dimension-reduction tutorial does;
``trainer.loop=functional`` applies the same casts to the network and scales the loss with
``mindspore.amp``'s loss scalers, as the training-flow tutorial's Trainer does.
"""
import mindspore as ms
from mindspore import nn
from mindspore.amp import DynamicLossScaler, StaticLossScaler
from mindspore.train import DynamicLossScaleManager, FixedLossScaleManager


def needs_overflow_check(amp_cfg) -> bool:
    """Steps whose gradients overflow are skipped (MindSpore's loss-scale update cell)."""
    kind = amp_cfg.loss_scale.value
    return kind == "dynamic" or (kind == "fixed" and amp_cfg.drop_overflow_update)


def model_arguments(amp_cfg) -> dict:
    """``Model`` keyword arguments. ``loss_scale: none`` is passed as ``None`` explicitly:
    left out, amp_level O2 would bring MindSpore's default DynamicLossScaleManager."""
    kind = amp_cfg.loss_scale.value
    if kind == "fixed":
        manager = FixedLossScaleManager(amp_cfg.loss_scale_value,
                                        drop_overflow_update=amp_cfg.drop_overflow_update)
    elif kind == "dynamic":
        manager = DynamicLossScaleManager(amp_cfg.loss_scale_value, amp_cfg.scale_factor,
                                          amp_cfg.scale_window)
    else:
        manager = None
    arguments = {"amp_level": amp_cfg.level.value, "loss_scale_manager": manager}
    if amp_cfg.keep_batchnorm_fp32 is not None:
        arguments["keep_batchnorm_fp32"] = amp_cfg.keep_batchnorm_fp32
    return arguments


def optimizer_loss_scale(amp_cfg, loop: str) -> float:
    """The optimizer's ``loss_scale``: with a fixed scale and no overflow check, Model's
    TrainOneStepCell scales the gradients and the optimizer divides them again (the
    tutorial's ``Momentum(..., loss_scale=1024)``). Everywhere else the scaled step itself
    unscales them, and the optimizer must not."""
    fixed_without_check = amp_cfg.loss_scale.value == "fixed" and not amp_cfg.drop_overflow_update
    return amp_cfg.loss_scale_value if loop == "model" and fixed_without_check else 1.0


def cast_network(network: nn.Cell, amp_cfg) -> nn.Cell:
    """The functional loop's network, cast as ``Model`` casts it for the same ``amp``
    section (mindspore.train.amp.build_train_network): O1 by the white list, O2 and O3
    all float16 with batch norm kept in float32 where keep_batchnorm_fp32 says so (by
    default for O2). The network's outputs are cast back to float32 by the caller."""
    level = amp_cfg.level.value
    if level == "O0":
        return network
    if level == "O1":
        return ms.amp.auto_mixed_precision(network, "O1")
    keep_bn = amp_cfg.keep_batchnorm_fp32
    if keep_bn is None:
        keep_bn = level == "O2"
    network.to_float(ms.float16)
    if keep_bn:
        for _, cell in network.cells_and_names():
            if isinstance(cell, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
                cell.to_float(ms.float32)
    return network


def loss_scaler(amp_cfg):
    """The functional loop's loss scaler; ``none`` is the tutorial's StaticLossScaler(1)."""
    kind = amp_cfg.loss_scale.value
    if kind == "dynamic":
        return DynamicLossScaler(amp_cfg.loss_scale_value, amp_cfg.scale_factor,
                                 amp_cfg.scale_window)
    return StaticLossScaler(amp_cfg.loss_scale_value if kind == "fixed" else 1.0)
