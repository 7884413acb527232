"""The ``Model`` a rank fits: built by the boost or model option that has a train step of
its own (``own_train_step``: dim-reduce's stage two, Wide&Deep's two optimizers), else by
ms_exp's loops (``trainer.loop``) from the configured optimizer, loss, amp and loss parts."""

from pathlib import Path
from typing import Any, Tuple

from omegaconf import DictConfig

from ms_exp.boost.options import boost_option
from ms_exp.data.spec import DataSpec
from ms_exp.models.option import ModelBuild
from ms_exp.models.options import model_option
from ms_exp.placement.tables import Placement
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.learning_rate import LearningRates
from ms_exp.train.announce import announce_loop
from ms_exp.train.context import Runtime
from ms_exp.train.grad_norm import grad_norm_enabled, store_grad_norm
from ms_exp.train.loops import create_loop
from ms_exp.train.loops import loss_names as step_loss_names
from ms_exp.train.losses import create_loss
from ms_exp.train.metrics import eval_metrics
from ms_exp.train.optimizer import create_optimizer
from ms_exp.train.precision import optimizer_loss_scale


def build_model(
    cfg: DictConfig,
    network: Any,
    placement: Placement,
    spec: DataSpec,
    runtime: Runtime,
    run_dir: Path,
    tracker: RunTracker,
    steps_per_epoch: int,
) -> Tuple[Any, Tuple[str, ...]]:
    """The model to fit and the names of the losses its train step returns (``()``: one)."""
    model_opt = model_option(cfg.model)
    own_step = boost_option(cfg.boost).own_train_step or model_opt.own_train_step
    metrics = eval_metrics(cfg, spec.num_classes)
    if own_step is not None:
        # It brings its own optimizer (AutoBoost's SGD(learning_rate=1); Wide&Deep's FTRL
        # and (Lazy)Adam).
        model = own_step(
            ModelBuild(
                cfg,
                network,
                placement,
                spec.num_classes,
                create_loss(cfg.loss, spec.num_classes),
                metrics,
                runtime,
                run_dir,
                tracker,
            )
        )
        return model, model_opt.loss_names
    optimizer = create_optimizer(
        cfg.optimizer,
        network,
        steps_per_epoch,
        cfg.trainer.epochs,
        optimizer_loss_scale(cfg.amp, cfg.trainer.loop.value),
    )
    # What MlflowMetrics logs as train/lr and train/grad_norm; read through the optimizer,
    # which Model and the functional loop hand the callbacks.
    optimizer.ms_exp_learning_rates = LearningRates(optimizer)
    if grad_norm_enabled(cfg.tracking):
        optimizer.ms_exp_grad_norm = store_grad_norm(optimizer)
    # Model, or the functional Trainer (trainer.loop): the same fit and callbacks.
    model = create_loop(
        cfg,
        network,
        optimizer,
        metrics,
        spec.num_classes,
        run_dir / "amp" / f"rank_{runtime.rank_id}",
    )
    announce_loop(cfg, tracker)
    return model, step_loss_names(cfg)
