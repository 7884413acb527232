"""One rank's training, from the validated config to ``Model.fit`` and its result, for
stand-alone jobs and every launched rank (``ms_exp.worker``). MindSpore is imported only
here and below, once the config is known to be good."""

import contextlib
import time
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig

from ms_exp.boost.options import boost_option
from ms_exp.checkpoint.callbacks import record_breakpoints
from ms_exp.checkpoint.files import last_checkpoint, rank_dir
from ms_exp.checkpoint.resume import ResumePoint, restore
from ms_exp.checkpoint.transform import saves_shares
from ms_exp.data import Shard, create_datasets
from ms_exp.data.build import loader_settings
from ms_exp.data.options import dataset_name
from ms_exp.models import create_network
from ms_exp.models.options import model_option
from ms_exp.placement.tables import create_placement
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.lifecycle import StepBoundary
from ms_exp.train.announce import announce_placement
from ms_exp.train.callbacks import FitCallbacks, create_callbacks
from ms_exp.train.context import Runtime, collector_skips_older_objects, init_env
from ms_exp.train.loops import fit_arguments
from ms_exp.train.model_build import build_model
from ms_exp.train.result import JobResult


def train_in_process(cfg: DictConfig, run_dir: Path, tracker: RunTracker) -> JobResult:
    """A stand-alone job: this process is its only rank."""
    runtime = init_env(cfg.trainer, cfg.parallel, cfg.checkpoint.strategy)
    return train(cfg, run_dir, tracker, runtime)


@collector_skips_older_objects()
def train(cfg: DictConfig, run_dir: Path, tracker: RunTracker, runtime: Runtime) -> JobResult:
    """One rank's training: build everything for ``runtime`` and run ``Model.fit``."""
    tracker.set_tags(
        {
            "ms_exp.device_target": runtime.device_target,
            "ms_exp.mode": runtime.mode,
            "ms_exp.parallel_emulated": str(runtime.emulated).lower(),
        }
    )
    shard = Shard(runtime.group_size, runtime.rank_id) if runtime.shard_data else Shard()
    train_set, eval_set, spec = create_datasets(cfg.dataset, shard)
    steps_per_epoch = train_set.get_dataset_size()
    epochs = cfg.trainer.epochs
    print(
        f"dataset={dataset_name(cfg.dataset)}: {spec.train_size} training and {spec.eval_size} "
        f"held-out samples of shape {spec.image_shape}, {spec.num_classes} classes, "
        f"{steps_per_epoch} steps per epoch",
        flush=True,
    )
    if shard.num_shards > 1 and runtime.rank_id == 0:
        # Why a sharded run's accuracy trails a stand-alone run's of the same epochs.
        ranks, batch = shard.num_shards, loader_settings(cfg.dataset)["batch_size"]
        print(
            f"{ranks} ranks x batch {batch} = global batch {ranks * batch}: each rank trains "
            f"{steps_per_epoch} steps per epoch on its 1/{ranks} of the training data, where "
            f"stand-alone takes about {ranks * spec.train_size // batch} steps of batch {batch}, "
            "so accuracy after the same epochs is lower than stand-alone's",
            flush=True,
        )

    option = model_option(cfg.model)
    placement = create_placement(cfg.placement)
    network = create_network(cfg.model, spec, placement)
    announce_placement(cfg, network, placement, runtime.device_target, tracker)
    strategies = cfg.parallel.strategies if runtime.parallel_mode == "semi_auto" else {}
    if strategies and not runtime.emulated:
        from ms_exp.parallel.emulation import apply_strategies

        apply_strategies(network, strategies)
    model, loss_names = build_model(
        cfg, network, placement, spec, runtime, run_dir, tracker, steps_per_epoch
    )

    ckpt_dir = rank_dir(run_dir, runtime.rank_id)
    start_step = 0
    resume = ResumePoint.load(run_dir)
    if resume is not None:
        start_step = restore(
            resume,
            model.train_network,
            train_set,
            ckpt_dir,
            steps_per_epoch,
            shares=saves_shares(cfg),
        )
    fit = create_callbacks(
        cfg,
        network,
        runtime,
        run_dir,
        ckpt_dir,
        tracker,
        steps_per_epoch,
        start_step,
        loss_names,
        option.best_metric,
        strategies,
        resume.not_to_log_again if resume is not None else None,
    )

    if resume is not None and _evaluation_missing(start_step, steps_per_epoch, resume.logged):
        _evaluate_epoch(model, eval_set, fit, start_step, steps_per_epoch)
    after_fit = boost_option(cfg.boost).after_fit
    fit_started = time.time()
    try:
        if start_step < epochs * steps_per_epoch:
            model.fit(
                epochs,
                train_set,
                eval_set,
                valid_frequency=1,
                callbacks=fit.callbacks,
                initial_epoch=start_step // steps_per_epoch,
                **fit_arguments(cfg.trainer, runtime.device_target),
            )
        else:
            print(
                f"the checkpoint is at the last step ({start_step}): nothing left to train",
                flush=True,
            )
        fit.run_created.wait()
    except BaseException:
        # A run stopped in its first step is still the one a resume appends to; the
        # training error stays the one raised.
        with contextlib.suppress(Exception):
            fit.run_created.wait()
        if fit.steps_done is not None:
            record_breakpoints(ckpt_dir, cfg.checkpoint.prefix, fit.steps_done.step, fit_started)
        raise
    finally:
        StepBoundary.reset()
        if after_fit is not None and runtime.rank_id == 0:
            after_fit(run_dir)

    # One total per attempt of the run (step 0: its first start, 1: its first resume...),
    # not a training curve.
    attempt = resume.attempt if resume is not None else 0
    tracker.log_metrics({"system/peak_host_memory_mb": peak_host_memory_mb()}, step=attempt)
    if fit.saver is not None:
        tracker.log_metrics({"checkpoint/save_time_s": fit.saver.save_time_s}, step=attempt)
    best = fit.best
    history = fit.metrics.eval_history
    return JobResult(
        run_dir=run_dir,
        run_id=tracker.run_id,
        final_eval=history[-1] if history else {},
        best_value=best.best if best else None,
        best_metric=option.best_metric,
        last_checkpoint=last_checkpoint(ckpt_dir, cfg.checkpoint.prefix)
        if cfg.checkpoint.save
        else None,
        best_checkpoint=best.path if best and best.path.exists() else None,
        pruned_epoch=fit.pruning.pruned_epoch if fit.pruning else None,
    )


def _evaluation_missing(start_step: int, steps_per_epoch: int, logged: Mapping[str, int]) -> bool:
    """Whether the checkpoint resumed from ends an epoch whose evaluation is not in the run
    (a resumed ``Model.fit`` starts with the next epoch, so it would never be evaluated)."""
    ends_epoch = start_step > 0 and start_step % steps_per_epoch == 0
    return ends_epoch and logged.get("eval", -1) < start_step


def _evaluate_epoch(
    model: Any, eval_set: Any, fit: FitCallbacks, step: int, steps_per_epoch: int
) -> None:
    epoch = step // steps_per_epoch
    print(f"epoch {epoch} was not evaluated before the run stopped: evaluating it now", flush=True)
    results = model.eval(eval_set, dataset_sink_mode=False)
    fit.metrics.global_step = step
    fit.metrics.record_eval(results)
    fit.metrics.record_epoch(epoch)  # its time is unknown: that attempt was cut short
    if fit.best is not None:
        fit.best.consider(results, epoch)


def peak_host_memory_mb() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
