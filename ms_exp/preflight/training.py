"""Checks of how a rank trains: ``trainer.loop``, sink mode, ``amp``, ``optimizer``,
``loss`` and ``loss.parts``, against each other and against what the rest of the config
builds. The ``_target_`` components they name are checked in ms_exp/preflight/components.py."""

import dataclasses
import re
from typing import Dict, Optional

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from ms_exp.boost.options import boost_option
from ms_exp.config.amp import needs_overflow_check
from ms_exp.config.errors import ConfigError, InvalidConfig, one_of, require, value_error
from ms_exp.config.numbers import check_number
from ms_exp.config.schema import LossName, LossPart, OptimizerName, loss_part, own_keys
from ms_exp.config.targets import TARGET, TARGET_ARGUMENTS, target_path
from ms_exp.models.options import model_option

# Names of loss parts and metrics, logged as train/<name> and eval/<name>.
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
PART_KEYS = (*own_keys(LossPart), TARGET)


def validate_loop(cfg: DictConfig) -> None:
    trainer, amp = cfg.trainer, cfg.amp
    loop = trainer.loop.value
    require(
        trainer.sink_size == -1 or trainer.sink_size >= 1,
        "trainer.sink_size",
        trainer.sink_size,
        "-1 (the whole dataset) or an integer >= 1",
    )
    # Options that build their own train step inside Model: the functional loop, amp and
    # loss parts are not theirs.
    for group, option in (("boost", boost_option(cfg.boost)), ("model", model_option(cfg.model))):
        if option.own_train_step is None:
            continue
        why = f"{group}={option.name} trains with a step of its own inside Model"
        require(loop == "model", "trainer.loop", loop, f"model: {why}")
        require(amp.level.value == "O0", "amp.level", amp.level.value, f"O0: {why}")
        require(
            amp.loss_scale.value == "none", "amp.loss_scale", amp.loss_scale.value, f"none: {why}"
        )
        require(not cfg.loss.parts, "loss.parts", ", ".join(cfg.loss.parts), f"no parts: {why}")
    if loop == "functional":
        require(
            cfg.parallel.mode in ("stand_alone", "data"),
            "trainer.loop",
            loop,
            f"model with parallel={cfg.parallel.mode} (the functional loop's gradient "
            "reducer is data parallel's: use parallel=stand_alone or data)",
        )
        require(
            not trainer.dataset_sink_mode,
            "trainer.dataset_sink_mode",
            True,
            "false with trainer.loop=functional (sink mode is Model's)",
        )
    validate_amp(amp, loop, trainer.device_target)


def validate_amp(amp: DictConfig, loop: str, device_target: Optional[str]) -> None:
    level, kind = amp.level.value, amp.loss_scale.value
    if amp.keep_batchnorm_fp32 is not None:
        require(
            level in ("O2", "O3"),
            "amp.keep_batchnorm_fp32",
            amp.keep_batchnorm_fp32,
            f"null with amp.level={level}, which casts no batch norm to float16",
        )
    require(amp.loss_scale_value > 0, "amp.loss_scale_value", amp.loss_scale_value, "a number > 0")
    require(amp.scale_factor >= 2, "amp.scale_factor", amp.scale_factor, "an integer >= 2")
    require(amp.scale_window >= 1, "amp.scale_window", amp.scale_window, "an integer >= 1")
    if amp.drop_overflow_update:
        require(
            kind != "none",
            "amp.drop_overflow_update",
            True,
            "false with amp.loss_scale=none (no loss scale, no overflow check)",
        )
    if (
        loop == "model"
        and needs_overflow_check(amp)
        and resolved_device_target(device_target) == "CPU"
    ):
        shown = "dynamic" if kind == "dynamic" else "fixed with amp.drop_overflow_update=true"
        require(
            False,
            "amp.loss_scale",
            kind,
            f"none or fixed without drop_overflow_update on CPU with trainer.loop=model "
            f"(MindSpore's Model has no overflow check on CPU), or trainer.loop="
            f"functional for {shown}",
        )


def resolved_device_target(device_target: Optional[str]) -> str:
    """The device MindSpore will train on: the configured one, else the default of the
    installed package (imported here only for the checks that depend on it)."""
    if device_target and device_target != "None":
        return device_target
    import mindspore as ms

    return ms.get_context("device_target")


def typed_loss_parts(loss_cfg: DictConfig) -> Dict[str, DictConfig]:
    """``loss.parts`` read typed (ms_exp.config.schema.loss_part), but those set to null: a
    value of the wrong type, or a key LossPart does not declare in a part without
    ``_target_``, is refused."""
    parts = {}
    for name, part in (loss_cfg.parts or {}).items():
        key = f"loss.parts.{name}"
        if part is None:
            continue
        if not hasattr(part, "keys"):
            raise ConfigError(
                key,
                part,
                f"a part: {{name: ..., weight: ...}} or {{{TARGET}: "
                "..., weight: ..., its arguments}",
            )
        try:
            parts[str(name)] = typed = loss_part(part)
        except OmegaConfBaseException as error:
            raise InvalidConfig(value_error(f"{key}.{error.full_key}", error)) from None
        for declared in dataclasses.fields(LossPart):
            check_number(f"{key}.{declared.name}", declared.type, typed.get(declared.name))
        if target_path(typed) is None:
            for unknown in (str(k) for k in typed.keys() if k not in PART_KEYS):
                raise ConfigError(
                    f"{key}.{unknown}",
                    typed[unknown],
                    one_of(PART_KEYS) + TARGET_ARGUMENTS,
                    problem="unknown key",
                )
    return parts


def validate_optimizer(cfg: DictConfig, epochs: int) -> None:
    require(
        cfg.name is not None or target_path(cfg) is not None,
        "optimizer.name",
        None,
        f"a built-in optimizer ({', '.join(n.name for n in OptimizerName)}), or optimizer.{TARGET}",
    )
    require(cfg.lr > 0, "optimizer.lr", cfg.lr, "a number > 0")
    require(0 <= cfg.momentum < 1, "optimizer.momentum", cfg.momentum, "a number in [0, 1)")
    require(cfg.weight_decay >= 0, "optimizer.weight_decay", cfg.weight_decay, "a number >= 0")
    require(
        0 <= cfg.min_lr < cfg.lr,
        "optimizer.min_lr",
        cfg.min_lr,
        f"a number >= 0 and below optimizer.lr ({cfg.lr})",
    )
    schedule = cfg.schedule.value
    if cfg.decay_epochs is not None:
        require(
            schedule != "constant",
            "optimizer.decay_epochs",
            cfg.decay_epochs,
            "null with optimizer.schedule=constant, which does not decay",
        )
        require(
            cfg.decay_epochs >= epochs,
            "optimizer.decay_epochs",
            cfg.decay_epochs,
            f"null or at least trainer.epochs ({epochs}): training stops at or before "
            "the end of the schedule",
        )
    end, end_key = (
        (epochs, "trainer.epochs")
        if cfg.decay_epochs is None
        else (cfg.decay_epochs, "optimizer.decay_epochs")
    )
    require(
        0 <= cfg.warmup_epochs <= end,
        "optimizer.warmup_epochs",
        cfg.warmup_epochs,
        f"an integer from 0 to {end_key} ({end})",
    )
    if cfg.lr_init is not None:
        require(
            cfg.warmup_epochs > 0,
            "optimizer.lr_init",
            cfg.lr_init,
            "null without warmup (optimizer.warmup_epochs=0): it is where warmup starts",
        )
        require(
            0 <= cfg.lr_init <= cfg.lr,
            "optimizer.lr_init",
            cfg.lr_init,
            f"null or a number from 0 to optimizer.lr ({cfg.lr})",
        )
    if schedule == "cosine":
        # The model zoo's cosine ends at lr * 1e-5 whatever its lr_end.
        require(
            cfg.min_lr == 0,
            "optimizer.min_lr",
            cfg.min_lr,
            "0 with optimizer.schedule=cosine, which decays to about 0 as the model zoo's "
            "(optimizer.lr_init sets where warmup starts)",
        )


def validate_loss(loss_cfg: DictConfig) -> None:
    validate_loss_terms(loss_cfg, "loss")
    parts = typed_loss_parts(loss_cfg)
    if not parts:
        return
    require(
        loss_cfg.label_smoothing == 0,
        "loss.label_smoothing",
        loss_cfg.label_smoothing,
        "0 with loss.parts (set label_smoothing per part)",
    )
    require(
        target_path(loss_cfg) is None,
        f"loss.{TARGET}",
        target_path(loss_cfg),
        f"null with loss.parts (give each part its {TARGET})",
    )
    for name, part in parts.items():
        require(
            bool(NAME.fullmatch(str(name))) and name != "loss",
            "loss.parts",
            str(name),
            "part names of letters, digits and _, starting with a letter, "
            "other than 'loss' (the total is train/loss)",
        )
        require(part.weight >= 0, f"loss.parts.{name}.weight", part.weight, "a number >= 0")
        validate_loss_terms(part, f"loss.parts.{name}")
    require(
        any(part.weight > 0 for part in parts.values()),
        "loss.parts",
        ", ".join(parts.keys()),
        "at least one part with weight > 0",
    )


def validate_loss_terms(cfg: DictConfig, key: str) -> None:
    """A loss's name and label smoothing: ``loss`` itself or one of ``loss.parts``."""
    require(
        0 <= cfg.label_smoothing < 1,
        f"{key}.label_smoothing",
        cfg.label_smoothing,
        "a number in [0, 1)",
    )
    require(
        cfg.name is not None or target_path(cfg) is not None,
        f"{key}.name",
        None,
        f"a built-in loss ({', '.join(n.name for n in LossName)}), or {key}.{TARGET}",
    )
    if target_path(cfg) is None and cfg.name.value == "softmax_cross_entropy":
        require(
            cfg.label_smoothing == 0,
            f"{key}.label_smoothing",
            cfg.label_smoothing,
            f"0 with {key}.name=softmax_cross_entropy (use cross_entropy or "
            "cross_entropy_smooth to smooth labels)",
        )
