"""The callbacks a rank hands ``fit``, in the order they must run. Each rank runs its own;
what writes a file all ranks share (snapshots, the emulated strategy file, ``best.ckpt``,
the progress bar, MLflow's metrics) is rank 0's alone."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

from mindspore.train import Callback, LossMonitor
from omegaconf import DictConfig

from ms_exp.checkpoint.callbacks import (
    BestCheckpoint,
    StepsDone,
    TimedModelCheckpoint,
    WeightSnapshots,
    create_checkpoint_callbacks,
    save_interval_steps,
)
from ms_exp.checkpoint.snapshots import SNAPSHOT_DIR
from ms_exp.config.errors import require
from ms_exp.config.schema import CALLBACK_TARGET, CallbackEntry, callback_rank_zero_only, own_keys
from ms_exp.config.targets import build
from ms_exp.data.build import loader_settings
from ms_exp.search.trial import current_trial, sweep_metric
from ms_exp.tracking.callback import MlflowMetrics
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.run_folder import write_run_record
from ms_exp.train.context import Runtime
from ms_exp.train.device_memory import DeviceMemory
from ms_exp.train.loop_control import StartAtStep, StopOnSignal
from ms_exp.train.monitors import FitTimeMonitor, LossPartsMonitor
from ms_exp.train.progress import ProgressBar, wants_progress_bar
from ms_exp.train.pruning import ReportToTrial
from ms_exp.train.stop_step import stop_step_file

# Parallel modes whose parameters may be split over the ranks (where MindSpore runs them).
SHARDED_MODES = ("semi_auto", "auto")


@dataclass
class FitCallbacks:
    callbacks: List[Callback]
    run_created: "RunCreated"
    metrics: MlflowMetrics  # keeps every evaluation's results
    saver: Optional[TimedModelCheckpoint]  # None: checkpoint=none
    best: Optional[BestCheckpoint]  # None: no best.ckpt kept
    pruning: Optional[ReportToTrial] = None  # a job of an Optuna sweep
    steps_done: Optional[StepsDone] = None  # checkpoint.exception_save: the breakpoint's step


def create_callbacks(
    cfg: DictConfig,
    network: Any,
    runtime: Runtime,
    run_dir: Path,
    ckpt_dir: Path,
    tracker: RunTracker,
    steps_per_epoch: int,
    start_step: int,
    loss_names: Sequence[str],
    best_metric: str,
    strategies: Any,
    already_logged: Optional[Mapping[str, int]] = None,
) -> FitCallbacks:
    """``already_logged``: the last step of each group of curves the MLflow run has (a
    resumed run's, ms_exp/tracking/logged_steps.py)."""
    interval = cfg.trainer.loss_print_interval
    monitor = LossPartsMonitor(loss_names, interval) if loss_names else LossMonitor(interval)
    global_batch = loader_settings(cfg.dataset)["batch_size"] * runtime.group_size
    metrics = MlflowMetrics(
        tracker, global_batch, cfg.tracking.log_every_n_steps, loss_names, already_logged
    )
    run_created = RunCreated(tracker, run_dir if runtime.rank_id == 0 else None)
    callbacks = [
        run_created,
        monitor,
        FitTimeMonitor(),
        metrics,
        DeviceMemory(tracker, runtime.device_target),
    ]
    callbacks += create_checkpoint_callbacks(
        cfg.checkpoint,
        network,
        ckpt_dir,
        steps_per_epoch,
        runtime.parallel_mode,
        best_metric,
        start_step,
        runtime.rank_id,
        sharded=runtime.parallel_mode in SHARDED_MODES and not runtime.emulated,
        # the metrics of the steps a checkpoint holds are in MLflow before it exists
        before_save=tracker.flush,
    )
    snapshots = cfg.checkpoint.snapshots
    if snapshots.per_epoch and runtime.rank_id == 0:
        require(
            snapshots.per_epoch <= steps_per_epoch,
            "checkpoint.snapshots.per_epoch",
            snapshots.per_epoch,
            f"at most the {steps_per_epoch} steps of an epoch",
        )
        directory = (run_dir / SNAPSHOT_DIR).resolve()
        tracker.set_tags({"ms_exp.snapshots.dir": str(directory)})
        callbacks.append(WeightSnapshots(snapshots, network, directory, steps_per_epoch))
    if runtime.emulated:
        from ms_exp.parallel.emulation import SemiAutoLayouts

        ckpt_cfg = cfg.checkpoint
        callbacks.append(
            SemiAutoLayouts(
                network,
                strategies,
                runtime.group_size,
                runtime.rank_id,
                ckpt_dir,
                ckpt_cfg.prefix,
                ckpt_cfg.strategy.save_file,
                slice_files=ckpt_cfg.save and not ckpt_cfg.integrated_save,
                save_steps=save_interval_steps(ckpt_cfg, steps_per_epoch),
            )
        )
    if wants_progress_bar(cfg.trainer.progress_bar.value) and runtime.rank_id == 0:
        callbacks.append(ProgressBar(steps_per_epoch, cfg.trainer.epochs))
    callbacks += user_callbacks(cfg.trainer, runtime.rank_id)

    saver = next((cb for cb in callbacks if isinstance(cb, TimedModelCheckpoint)), None)
    best = next((cb for cb in callbacks if isinstance(cb, BestCheckpoint)), None)
    steps_done = None
    if saver is not None and cfg.checkpoint.get("exception_save", False):
        steps_done = StepsDone(start_step)
        callbacks.insert(0, steps_done)
    if start_step:
        callbacks.insert(0, StartAtStep(start_step))
    # A stand-alone job of an Optuna sweep reports to its trial; the ranks of a distributed
    # job could not agree on when to stop (a pruner is refused for them: search/checks.py).
    link, pruning = current_trial(), None
    if link is not None and runtime.group_size == 1:
        pruning = ReportToTrial(link, sweep_metric(cfg), cfg.trainer.epochs)
        callbacks.append(pruning)
    callbacks.append(
        StopOnSignal(saver, stop_step_file(run_dir) if runtime.group_size > 1 else None)
    )
    return FitCallbacks(callbacks, run_created, metrics, saver, best, pruning, steps_done)


class RunCreated(Callback):
    """Waits for the job's MLflow run at the end of the first step, not before it: the
    sidecar creates the run (importing MLflow) while MindSpore compiles the graph. A store
    that cannot be opened stops the job there, before the step's lines and records. Rank
    0 then writes the run's id into the run record (``run_dir``), where a resumed job finds
    the run it appends to; read without asking MLflow."""

    def __init__(self, tracker: RunTracker, run_dir: Optional[Path]):
        self.tracker, self.run_dir, self.done = tracker, run_dir, False

    def on_train_step_end(self, run_context: Any) -> None:
        self.wait()

    def wait(self) -> None:
        if self.done:
            return
        self.done = True
        self.tracker.wait_for_run()
        if self.run_dir is not None and self.tracker.run_id:
            write_run_record(self.run_dir, run_id=self.tracker.run_id)


def user_callbacks(trainer_cfg: DictConfig, rank_id: int = 0) -> List[Callback]:
    """``trainer.callbacks`` of rank ``rank_id``, built in their order: every entry on
    every rank, as MindSpore runs each rank's callbacks, but those set ``rank_zero_only``
    (built on rank 0 alone); an entry set to null is left out."""
    return [
        build(
            f"trainer.callbacks.{name}",
            node,
            own_keys=own_keys(CallbackEntry),
            expected=(Callback,),
            expected_text=CALLBACK_TARGET,
        )
        for name, node in (trainer_cfg.callbacks or {}).items()
        if node is not None and (rank_id == 0 or not callback_rank_zero_only(node))
    ]
