"""Mixed precision and loss scaling from the ``amp`` section, the same for both loops.

``trainer.loop=model`` hands them to ``Model``, as the dimension-reduction tutorial's stage
one; ``trainer.loop=functional`` casts the network and uses ``mindspore.amp``'s loss
scalers, as the training-flow tutorial's Trainer.
"""

from typing import Any, Dict

from omegaconf import DictConfig

from ms_exp.config.amp import needs_overflow_check


def model_arguments(amp_cfg: DictConfig) -> Dict[str, Any]:
    """``Model`` keyword arguments. ``loss_scale: none`` is passed as ``None`` explicitly:
    left out, amp_level O2 would bring MindSpore's default DynamicLossScaleManager."""
    from mindspore.train import DynamicLossScaleManager, FixedLossScaleManager

    kind = amp_cfg.loss_scale.value
    if kind == "fixed":
        manager = FixedLossScaleManager(
            amp_cfg.loss_scale_value, drop_overflow_update=amp_cfg.drop_overflow_update
        )
    elif kind == "dynamic":
        manager = DynamicLossScaleManager(
            amp_cfg.loss_scale_value, amp_cfg.scale_factor, amp_cfg.scale_window
        )
    else:
        manager = None
    arguments: Dict[str, Any] = {"amp_level": amp_cfg.level.value, "loss_scale_manager": manager}
    if amp_cfg.keep_batchnorm_fp32 is not None:
        arguments["keep_batchnorm_fp32"] = amp_cfg.keep_batchnorm_fp32
    return arguments


def optimizer_loss_scale(amp_cfg: DictConfig, loop: str) -> float:
    """The optimizer's ``loss_scale``: with a fixed scale and no overflow check, Model's
    TrainOneStepCell scales the gradients and the optimizer divides them again (the
    tutorial's ``Momentum(..., loss_scale=1024)``). Everywhere else the scaled step itself
    unscales them, and the optimizer must not."""
    fixed_without_check = amp_cfg.loss_scale.value == "fixed" and not needs_overflow_check(amp_cfg)
    return amp_cfg.loss_scale_value if loop == "model" and fixed_without_check else 1.0


def cast_network(network: Any, amp_cfg: DictConfig) -> Any:
    """The functional loop's network, cast exactly as ``Model`` casts it for the same ``amp``
    section, by MindSpore's own (private) step of ``build_train_network``; the caller casts
    the outputs to float32, as Model's loss cell does."""
    from mindspore.train.amp import _auto_mixed_precision_process, _config_level

    level = amp_cfg.level.value
    config = dict(_config_level[level])
    if amp_cfg.keep_batchnorm_fp32 is not None:
        config["keep_batchnorm_fp32"] = amp_cfg.keep_batchnorm_fp32
    return _auto_mixed_precision_process(network, config, level)


def loss_scaler(amp_cfg: DictConfig) -> Any:
    """The functional loop's loss scaler; ``none`` is the tutorial's StaticLossScaler(1)."""
    from mindspore.amp import DynamicLossScaler, StaticLossScaler

    kind = amp_cfg.loss_scale.value
    if kind == "dynamic":
        return DynamicLossScaler(
            amp_cfg.loss_scale_value, amp_cfg.scale_factor, amp_cfg.scale_window
        )
    return StaticLossScaler(amp_cfg.loss_scale_value if kind == "fixed" else 1.0)
