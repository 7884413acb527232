"""Checks of the ``_target_`` components a job builds besides its network and data: each
must import and take its arguments; the loss (or each of ``loss.parts``), callbacks and
metrics are built (cheap) to check what they return, the optimizer and ``hydra.callbacks``
checked to subclass mindspore.nn.Optimizer and Hydra's Callback. Only a config naming a
target imports it (and so MindSpore)."""

import inspect
from typing import Any, Dict, List, Tuple

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from ms_exp.boost.options import boost_option
from ms_exp.config.amp import needs_overflow_check
from ms_exp.config.errors import ConfigError, InvalidConfig, require, value_error
from ms_exp.config.schema import (
    CALLBACK_TARGET,
    LOSS_TARGET,
    METRIC_TARGET,
    OPTIMIZER_REQUIRED,
    OPTIMIZER_TARGET,
    CallbackEntry,
    LossConfig,
    LossPart,
    OptimizerConfig,
    callback_rank_zero_only,
    loss_own_keys,
    own_keys,
)
from ms_exp.config.targets import (
    TARGET,
    build,
    config_arguments,
    fit_arguments,
    load_target,
    parameters,
    target_path,
)
from ms_exp.models.options import model_option
from ms_exp.preflight.training import NAME, typed_loss_parts

# An optimizer's arguments that ms_exp computes: set beside a target they would win over it.
PASSED_BY_MS_EXP = {
    "params": "the trainable parameters (groups: optimizer.group_params=true)",
    "learning_rate": "the schedule of optimizer.lr, optimizer.schedule, ...",
    "loss_scale": "amp's fixed loss scale when the optimizer must divide by it "
    "(amp.loss_scale, amp.loss_scale_value)",
}


def validate_components(cfg: DictConfig, training: bool = True) -> None:
    """The components a job builds (``training``), or an evaluation of its checkpoint
    builds: its loss and metrics."""
    validate_loss_targets(cfg)
    validate_metrics(cfg)
    if training:
        validate_optimizer_target(cfg)
        validate_callbacks(cfg.trainer)


def validate_loss_targets(cfg: DictConfig) -> None:
    """``loss``, or each of ``loss.parts``, that names a ``_target_``: a loss Cell."""
    parts = typed_loss_parts(cfg.loss)
    entries: List[Tuple[str, Any, type]] = [
        (f"loss.parts.{name}", part, LossPart) for name, part in parts.items()
    ]
    for key, node, schema in entries or [("loss", cfg.loss, LossConfig)]:
        if target_path(node) is None:
            continue
        from mindspore import nn

        build(
            key,
            node,
            own_keys=loss_own_keys(node, schema),
            provided=_num_classes(cfg, key, node),
            expected=(nn.Cell,),
            expected_text=LOSS_TARGET,
        )


def validate_optimizer_target(cfg: DictConfig) -> None:
    """``optimizer._target_``: an Optimizer subclass taking what ms_exp gives it."""
    opt = cfg.optimizer
    path = target_path(opt)
    if path is None:
        return
    key = f"optimizer.{TARGET}"
    for group, option in (("boost", boost_option(cfg.boost)), ("model", model_option(cfg.model))):
        require(
            option.own_train_step is None,
            key,
            path,
            f"null: {group}={option.name} trains with an optimizer of its own",
        )
    target = load_target("optimizer", path)
    from mindspore import nn

    if not (inspect.isclass(target) and issubclass(target, nn.Optimizer)):
        raise ConfigError(key, path, OPTIMIZER_TARGET, problem="is not an optimizer")
    # What ms_exp will pass (ms_exp/train/optimizer.py optimizer_arguments); the values
    # matter not, only which the signature takes.
    provided = {"params": [], "learning_rate": opt.lr, "momentum": opt.momentum, "loss_scale": 1.0}
    if not opt.group_params:
        provided["weight_decay"] = opt.weight_decay
    arguments = config_arguments(opt, own_keys(OptimizerConfig))
    for name, instead in PASSED_BY_MS_EXP.items():
        require(
            name not in arguments,
            f"optimizer.{name}",
            arguments.get(name),
            f"no optimizer.{name}: ms_exp passes {instead}",
        )
    fit_arguments("optimizer", path, target, arguments, provided, required=OPTIMIZER_REQUIRED)
    params = parameters(target)
    if params is None or "**" in params:  # cannot tell what it takes before building it
        return
    if opt.weight_decay and not opt.group_params:
        require(
            "weight_decay" in params,
            "optimizer.weight_decay",
            opt.weight_decay,
            f"0 with {key}={path}, which takes no weight_decay",
        )
    # As ms_exp/train/precision.py optimizer_loss_scale: with a fixed scale and no overflow
    # check, Model leaves the division by the scale to the optimizer.
    divides_loss_scale = (
        cfg.trainer.loop.value == "model"
        and cfg.amp.loss_scale.value == "fixed"
        and not needs_overflow_check(cfg.amp)
    )
    if divides_loss_scale and "loss_scale" not in params:
        raise ConfigError(
            key,
            path,
            "an optimizer taking loss_scale with amp.loss_scale=fixed and "
            "trainer.loop=model, or amp.drop_overflow_update=true, amp.loss_scale=dynamic "
            "or trainer.loop=functional (the scaled step unscales the gradients itself)",
            problem="takes no loss_scale",
        )


def validate_callbacks(trainer_cfg: DictConfig) -> None:
    """``trainer.callbacks``: each builds a mindspore.train.Callback (every one, whichever
    ranks will run it), its ``rank_zero_only`` a bool."""
    for name, node in (trainer_cfg.callbacks or {}).items():
        if node is None:  # removed by an experiment or a command line
            continue
        key = f"trainer.callbacks.{name}"
        _require_target(key, node, "my_project.callbacks.EpochLog")
        try:
            callback_rank_zero_only(node)
        except OmegaConfBaseException as error:
            raise InvalidConfig(value_error(f"{key}.rank_zero_only", error)) from None
        from mindspore.train import Callback

        build(
            key,
            node,
            own_keys=own_keys(CallbackEntry),
            expected=(Callback,),
            expected_text=CALLBACK_TARGET,
        )


def validate_hydra_callbacks(hydra_cfg: DictConfig) -> None:
    """``hydra.callbacks``: Hydra instantiates each before the job, and turns a failure into
    a traceback (a blocklisted or missing target) or a warning; each must be a Hydra
    Callback class taking the arguments given, checked here before Hydra starts."""
    from hydra.experimental.callback import Callback

    for name, node in (hydra_cfg.get("callbacks") or {}).items():
        key = f"hydra.callbacks.{name}"
        _require_target(key, node, "my_project.callbacks.Notify")
        path = str(target_path(node))
        target = load_target(key, path)
        if not (inspect.isclass(target) and issubclass(target, Callback)):
            raise ConfigError(
                f"{key}.{TARGET}",
                path,
                f"a Hydra callback class, a subclass "
                f"of hydra.experimental.callback.Callback ({path} is a {type(target).__name__})",
            )
        # Hydra's own keys (_recursive_, _convert_, ...) are not the target's arguments.
        arguments = {
            k: v
            for k, v in config_arguments(node).items()
            if not (k.startswith("_") and k.endswith("_"))
        }
        fit_arguments(key, path, target, arguments)


def validate_metrics(cfg: DictConfig) -> None:
    """``trainer.metrics``: each builds a mindspore.train.Metric, named as MLflow will
    show it (eval/<name>), for a model evaluated with the classification metrics."""
    metrics = {
        str(name): node for name, node in (cfg.trainer.metrics or {}).items() if node is not None
    }
    if not metrics:
        return
    option = model_option(cfg.model)
    require(
        option.evaluation is None,
        "trainer.metrics",
        ", ".join(metrics),
        f"none with model={option.name}, which is evaluated with metrics of its own",
    )
    for name, node in metrics.items():
        require(
            bool(NAME.fullmatch(name)) and not name.startswith("eval_"),
            "trainer.metrics",
            name,
            "metric names of letters, digits and _, starting "
            "with a letter, not with eval_ (MindSpore's own results)",
        )
        key = f"trainer.metrics.{name}"
        _require_target(key, node, "my_project.metrics.F1")
        from mindspore.train import Metric

        build(
            key,
            node,
            provided=_num_classes(cfg, key, node),
            expected=(Metric,),
            expected_text=METRIC_TARGET,
        )


def _require_target(key: str, node: Any, example: str) -> None:
    if not hasattr(node, "keys") or target_path(node) is None:
        raise ConfigError(
            key,
            node,
            f"a {TARGET} config with the target's arguments, e.g. +{key}.{TARGET}={example}",
        )


def _num_classes(cfg: DictConfig, key: str, node: Any) -> Dict[str, int]:
    """``num_classes`` for a target whose signature names it: the class count the dataset
    declares (a user's dataset is asked, as the network's checks ask it)."""
    params = parameters(load_target(key, target_path(node)))
    if params is None or "num_classes" not in params:
        return {}
    from ms_exp.data.build import declared_shape

    return {"num_classes": declared_shape(cfg.dataset)[1]}
