"""The training loop of ``trainer.loop``: MindSpore's ``Model`` or the tutorial's functional
Trainer (ms_exp/train/functional.py), both built from the same network, loss, optimizer and
``amp`` section and driven through the same ``fit`` call."""

import os
from pathlib import Path
from typing import Any, Dict, Tuple

from omegaconf import DictConfig

from ms_exp.config.amp import needs_overflow_check
from ms_exp.config.schema import loss_parts
from ms_exp.train.losses import TOTAL, create_loss_parts, create_training_loss


def loss_names(cfg: DictConfig) -> Tuple[str, ...]:
    """Names of the values a train step reports when there are several: the total first.
    Model's TrainOneStepCell reports the total only."""
    if cfg.trainer.loop.value == "functional" and cfg.loss.parts:
        return (TOTAL, *loss_parts(cfg.loss))
    return ()


def create_loop(
    cfg: DictConfig,
    network: Any,
    optimizer: Any,
    metrics: Dict[str, Any],
    num_classes: int,
    rewrite_dir: Path,
) -> Any:
    """``Model(network, loss_fn, optimizer, metrics, amp_level, ...)`` or the functional
    Trainer; either has ``train_network`` and ``fit``."""
    # amp level O1 rewrites the network's source into ./rewritten_network (MindSpore's
    # rewrite package writes to the working directory): into this rank's folder of the run,
    # not the user's working directory (docs/design.md#amp-o1-rewritten-network).
    if cfg.amp.level.value != "O1":
        return _create_loop(cfg, network, optimizer, metrics, num_classes)
    before = os.getcwd()
    Path(rewrite_dir).mkdir(parents=True, exist_ok=True)
    os.chdir(rewrite_dir)
    try:
        return _create_loop(cfg, network, optimizer, metrics, num_classes)
    finally:
        os.chdir(before)


def _create_loop(
    cfg: DictConfig, network: Any, optimizer: Any, metrics: Dict[str, Any], num_classes: int
) -> Any:
    from ms_exp.train.precision import model_arguments

    if cfg.trainer.loop.value == "model":
        import mindspore as ms

        return ms.Model(
            network,
            loss_fn=create_training_loss(cfg.loss, num_classes),
            optimizer=optimizer,
            metrics=metrics,
            boost_level=cfg.boost.level,
            **model_arguments(cfg.amp),
        )
    from ms_exp.train.functional import FunctionalTrainer
    from ms_exp.train.precision import cast_network, loss_scaler

    amp = cfg.amp
    # As the tutorial's Trainer: every step's gradients are checked; with a fixed scale and
    # no drop_overflow_update the step is applied all the same, as Model applies it.
    skip = needs_overflow_check(amp) or amp.loss_scale.value == "none"
    return FunctionalTrainer(
        cast_network(network, amp),
        create_loss_parts(cfg.loss, num_classes),
        optimizer,
        loss_scaler(amp),
        skip,
        metrics,
        # the steps Model's loss-scale cell reports on
        report_scale=needs_overflow_check(amp),
    )


def fit_arguments(trainer_cfg: DictConfig, device_target: str) -> Dict[str, Any]:
    """``dataset_sink_mode``/``sink_size`` for ``fit``. The CPU has no sink mode: MindSpore
    trains without it but keeps ``sink_size`` as the epoch's length for the callbacks while
    the epoch runs over the whole dataset (step numbers in the logs go wrong), so on CPU
    ms_exp leaves both out and says so (docs/design.md#cpu-no-sink-mode)."""
    if not trainer_cfg.dataset_sink_mode:
        return {"dataset_sink_mode": False}
    if device_target == "CPU":
        print(
            "trainer.dataset_sink_mode=true: the CPU has no dataset sink mode, so this run "
            "trains without it (every epoch the whole dataset, callbacks after every "
            "step); on Ascend/GPU it sinks "
            + (
                "the whole dataset"
                if trainer_cfg.sink_size == -1
                else f"{trainer_cfg.sink_size} steps"
            )
            + " per call",
            flush=True,
        )
        return {"dataset_sink_mode": False}
    return {"dataset_sink_mode": True, "sink_size": trainer_cfg.sink_size}
