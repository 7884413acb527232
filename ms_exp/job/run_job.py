"""One training job: built objects from a validated config, trained with ``Model.fit``.

Data flows one way: config -> runtime context -> datasets -> network, loss, optimizer ->
callbacks -> ``Model.fit`` (train, then evaluate after every epoch) -> artifacts and metrics
in the job's MLflow run.
"""
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from ms_exp.tracking import provenance
from ms_exp.job.console import tee_output
from ms_exp.job.launch import COMMAND_FILE, is_distributed, launch, log_dir, save_command
from ms_exp.checkpoint.resume import (ResumePoint, clear_resume_point, find_resume_point,
                           read_run_record, write_run_record)
from ms_exp.tracking.finished import DIGEST_TAG, config_digest, find_finished, skip_note
from ms_exp.tracking.lifecycle import tracked_run
from ms_exp.tracking.store import resolve_tracking_uri, ui_command
from ms_exp.tracking.sweep import child_run_name, parent_run_id
from ms_exp.tracking.params import flatten

RESOLVED_CONFIG = "config.yaml"
RESULT_FILE = "result.json"


@dataclass
class JobResult:
    run_dir: Path
    run_id: Optional[str]
    final_eval: Dict[str, float]
    best_value: Optional[float]  # of best_metric, the eval metric best.ckpt maximises
    last_checkpoint: Optional[Path]
    best_checkpoint: Optional[Path]
    best_metric: str = "accuracy"

    def save(self) -> None:
        """Rank 0 of a distributed job hands its result to the launching process."""
        fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        partial = self.run_dir / (RESULT_FILE + ".partial")
        partial.write_text(json.dumps(fields, indent=2))
        os.replace(partial, self.run_dir / RESULT_FILE)

    @classmethod
    def load(cls, run_dir: Path) -> "JobResult":
        fields = json.loads((Path(run_dir) / RESULT_FILE).read_text())
        for key in ("run_dir", "last_checkpoint", "best_checkpoint"):
            fields[key] = Path(fields[key]) if fields[key] else None
        return cls(**fields)


def default_run_name(cfg: DictConfig) -> str:
    return f"{cfg.model.name}-{cfg.dataset.name}-{cfg.parallel.mode}"


def run_job(cfg: DictConfig, run_dir: Path, hydra_dir: Optional[Path] = None,
            overrides: List[str] = ()) -> JobResult:
    """Train, evaluate and checkpoint one job, recorded as one MLflow run, in this process
    or, for a distributed job, in the ranks msrun starts."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.boost.mode == "dim_reduce":
        from ms_exp.boost.stage_one import fill_stage_one

        # Recorded as found (run id, paths), so ranks and re-runs need no MLflow lookup.
        fill_stage_one(cfg)
    tracking = cfg.tracking
    uri = resolve_tracking_uri(tracking.uri)
    digest = config_digest(cfg, run_dir)
    if tracking.enabled and tracking.skip_finished:
        earlier = _finished_before(cfg, run_dir, uri, digest, overrides)
        if earlier is not None:
            return earlier
    own_dir = run_dir
    resume = find_resume_point(cfg, own_dir, digest, uri)
    run_dir = _prepare_run_dir(own_dir, resume)
    config_file = run_dir / RESOLVED_CONFIG
    # What the run trains, not how this command reached it: a re-run (--from-run) or the
    # ranks reading it must not resume again.
    OmegaConf.save(_without_resume(cfg), config_file, resolve=True)
    write_run_record(run_dir, digest=digest, status="RUNNING")
    run_name, tags, parent = _run_identity(cfg, run_dir, overrides, uri, digest)
    status = "FAILED"
    with tee_output(run_dir / "console.log"), \
            tracked_run(tracking.enabled, uri, tracking.experiment_name, run_name, tags,
                        parent_run_id=parent,
                        run_id=_resumed_run_id(resume, tracking),
                        offline_dir=run_dir) as tracker:
        if resume is None:
            resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
            tracker.log_params(flatten(resolved))
        else:
            _announce_resume(resume, own_dir, tracker)
        tracker.log_artifact(config_file, "config")
        if hydra_dir is not None and Path(hydra_dir).is_dir():
            tracker.log_artifacts(Path(hydra_dir), "hydra")
        tracker.record_provenance(cfg.dataset, run_dir, provenance.command_line())
        if tracking.rerun_of:
            tracker.set_tags({"ms_exp.rerun_of": tracking.rerun_of})
        try:
            if is_distributed(cfg.parallel):
                result = _train_with_msrun(cfg, run_dir, tracker, uri)
            else:
                result = train_in_process(cfg, run_dir, tracker)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            write_run_record(run_dir, status=status)
            _log_outputs(tracker, run_dir, cfg)
        _report(result, tracker, uri)
        return result


def _prepare_run_dir(own_dir: Path, resume: Optional[ResumePoint]) -> Path:
    """The directory the job trains in: its own, or the one of the run it resumes, where it
    leaves the resume point for the ranks (ms_exp/checkpoint/resume.py)."""
    if resume is None:
        clear_resume_point(own_dir)
        return own_dir
    resume.save()
    return resume.run_dir


def _announce_resume(resume: ResumePoint, own_dir: Path, tracker) -> None:
    where = "" if own_dir == resume.run_dir else \
        f" (this command's own folder {own_dir} keeps Hydra's record only)"
    print(f"resuming the run in {resume.run_dir} from {resume.checkpoint}{where}", flush=True)
    # MLflow refuses a param that changes value: the run keeps the params it started with,
    # and the resumption is a tag.
    tracker.set_tags({"ms_exp.resumed_from": f"{resume.checkpoint} (epoch {resume.epoch}, "
                      f"step {resume.step_in_epoch} of it)"})


def _without_resume(cfg: DictConfig) -> DictConfig:
    saved = cfg.copy()
    saved.trainer.resume = None
    return saved


def _resumed_run_id(resume: Optional[ResumePoint], tracking) -> Optional[str]:
    """The MLflow run the resumed run directory trained into, which the job appends to;
    None: a new run (tracking was off, or the job died before its first step)."""
    if resume is None or not tracking.enabled:
        return None
    return read_run_record(resume.run_dir).get("run_id")


def _run_identity(cfg: DictConfig, run_dir: Path, overrides: List[str], uri: str,
                  digest: str):
    """The MLflow run's name, tags and parent: in a multirun a child of the sweep's parent
    run, named by its swept values."""
    tags = {
        DIGEST_TAG: digest,
        "ms_exp.parallel_mode": cfg.parallel.mode,
        "ms_exp.device_num": str(cfg.parallel.device_num),
        "ms_exp.dataset": cfg.dataset.name,
        "ms_exp.model": cfg.model.name,
        "ms_exp.run_dir": str(run_dir.resolve()),
        "ms_exp.overrides": " ".join(overrides),
    }
    parent = parent_run_id(uri, cfg.tracking.experiment_name)
    run_name = cfg.tracking.run_name or default_run_name(cfg)
    if parent:
        tags["ms_exp.sweep.id"] = parent
        run_name = child_run_name(list(overrides)) or run_name
    return run_name, tags, parent


def _finished_before(cfg: DictConfig, run_dir: Path, uri: str, digest: str,
                     overrides: List[str]) -> Optional[JobResult]:
    """The result of a FINISHED run with this config, if there is one (skip_finished)."""
    from mlflow import MlflowClient

    from ms_exp.tracking.recorder import detect_outages_quickly, is_unreachable

    detect_outages_quickly()    # seconds, not MLflow's minutes of retries, for a dead server
    client = MlflowClient(uri)
    try:
        earlier = find_finished(client, cfg.tracking.experiment_name, digest)
    except Exception as error:
        if not is_unreachable(error):
            raise
        print(f"ms_exp: warning: tracking.skip_finished: {uri} is unreachable, so whether "
              "this config already finished is unknown; training it", file=sys.stderr,
              flush=True)
        return None
    if earlier is None:
        return None
    print(skip_note(earlier), flush=True)
    parent = parent_run_id(uri, cfg.tracking.experiment_name)
    if parent:
        client.set_tag(parent, f"ms_exp.sweep.skipped.{earlier.info.run_id}",
                       " ".join(overrides)[:5000])
    final_eval = {k: v for k, v in earlier.data.metrics.items() if k.startswith("eval/")}
    return JobResult(run_dir=run_dir, run_id=earlier.info.run_id, final_eval=final_eval,
                     best_value=None, last_checkpoint=None, best_checkpoint=None)


def _train_with_msrun(cfg: DictConfig, run_dir: Path, tracker, uri: str) -> JobResult:
    """A distributed job: its ranks started as parallel.launcher.style says (msrun by
    default; ms_exp/job/launch.py), the commands printed, saved and tagged."""
    from ms_exp.job.launch import launch_style

    commands = save_command(cfg.parallel, run_dir)
    style = launch_style(cfg.parallel)
    shown = commands.replace("\n", "\n  ")
    print(f"starting {cfg.parallel.device_num} ranks with {style} (also in "
          f"{run_dir / COMMAND_FILE}):\n  {shown}", flush=True)
    tracker.log_artifact(run_dir / COMMAND_FILE, "launch")
    tracker.set_tags({"ms_exp.launch_command": commands[:5000]})
    env = {}
    if tracker.enabled:
        # MLflow's own variables: rank 0 attaches to this run instead of starting one (with
        # the server unreachable, to the job's journal: ms_exp/tracking/journal.py).
        from ms_exp.tracking.journal import JOURNAL_VARIABLE

        env = {key: value for key, value in {
            "MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": tracker.run_id,
            "MLFLOW_EXPERIMENT_ID": tracker.experiment_id,
            JOURNAL_VARIABLE: str(tracker.journal or "")}.items() if value}
    launch(cfg.parallel, run_dir, env)
    return JobResult.load(run_dir)


def train_in_process(cfg: DictConfig, run_dir: Path, tracker) -> JobResult:
    from ms_exp.train.context import init_env

    runtime = init_env(cfg.trainer, cfg.parallel, cfg.checkpoint.strategy)
    return train(cfg, run_dir, tracker, runtime)


def train(cfg: DictConfig, run_dir: Path, tracker, runtime) -> JobResult:
    """One rank's training: build everything for ``runtime`` and run ``Model.fit``."""
    # MindSpore is imported only once the config is known to be good.
    from mindspore.train import LossMonitor

    from ms_exp.checkpoint.files import (BestCheckpoint, TimedModelCheckpoint,
                                   create_checkpoint_callbacks, last_checkpoint, rank_dir,
                                   save_interval_steps)
    from ms_exp.data import Shard, create_datasets
    from ms_exp.train.loop_control import FlushAfterCheckpoint, StartAtStep, StopOnSignal
    from ms_exp.train.metrics import best_metric, classification_metrics
    from ms_exp.train.monitors import FitTimeMonitor
    from ms_exp.models import create_network
    from ms_exp.train.loops import create_loop, fit_arguments, loss_names as step_loss_names
    from ms_exp.train.optimizer import create_optimizer
    from ms_exp.placement.tables import create_placement
    from ms_exp.train.progress import ProgressBar, wants_progress_bar
    from ms_exp.tracking.callback import MlflowMetrics
    from ms_exp.tracking.lifecycle import StepBoundary

    tracker.set_tags({"ms_exp.device_target": runtime.device_target,
                      "ms_exp.mode": runtime.mode,
                      "ms_exp.parallel_emulated": str(runtime.emulated).lower()})
    shard = Shard(runtime.group_size, runtime.rank_id) if runtime.shard_data else Shard()
    train_set, eval_set, spec = create_datasets(cfg.dataset, shard)
    steps_per_epoch = train_set.get_dataset_size()
    epochs = cfg.trainer.epochs
    print(f"dataset={cfg.dataset.name}: {spec.train_size} training and {spec.eval_size} "
          f"held-out samples of shape {spec.image_shape}, {spec.num_classes} classes, "
          f"{steps_per_epoch} steps per epoch", flush=True)

    placement = create_placement(cfg.placement)
    network = create_network(cfg.model, spec, placement)
    _report_placement(cfg, network, placement, runtime.device_target, tracker)
    wide_deep = cfg.model.name == "wide_deep"
    strategies = cfg.parallel.strategies if runtime.parallel_mode == "semi_auto" else {}
    if strategies and not runtime.emulated:
        from ms_exp.parallel.emulation import apply_strategies

        apply_strategies(network, strategies)
    optimizer = None
    # AutoBoost brings its own SGD(learning_rate=1); Wide&Deep its FTRL and (Lazy)Adam.
    if cfg.boost.mode != "dim_reduce" and not wide_deep:
        from ms_exp.train.precision import optimizer_loss_scale

        optimizer = create_optimizer(cfg.optimizer, network, steps_per_epoch, epochs,
                                     optimizer_loss_scale(cfg.amp, cfg.trainer.loop.value))
    loss_names = ()
    if wide_deep:
        from ms_exp.models.wide_deep import LOSS_NAMES

        model = _wide_deep_model(cfg.model, network, placement)
        loss_names = LOSS_NAMES
    elif cfg.boost.mode == "dim_reduce":
        model = _dim_reduce_model(cfg, network, spec.num_classes, runtime, run_dir, tracker)
    else:
        # Model, or the functional Trainer (trainer.loop): the same fit and callbacks.
        model = create_loop(cfg, network, optimizer,
                            classification_metrics(spec.num_classes), spec.num_classes,
                            run_dir / "amp" / f"rank_{runtime.rank_id}")
        loss_names = step_loss_names(cfg)
        _report_loop(cfg, tracker)

    ckpt_dir = rank_dir(run_dir, runtime.rank_id)
    start_step = 0
    resume = ResumePoint.load(run_dir)
    if resume is not None:
        from ms_exp.checkpoint.resume import restore

        start_step = restore(resume, model.train_network, train_set, ckpt_dir,
                             steps_per_epoch)
    mlflow_metrics = MlflowMetrics(tracker, cfg.dataset.batch_size * runtime.group_size,
                                   cfg.tracking.log_every_n_steps, loss_names)
    interval = cfg.trainer.loss_print_interval
    if loss_names:
        from ms_exp.train.monitors import LossPartsMonitor

        monitor = LossPartsMonitor(loss_names, interval)
    else:
        monitor = LossMonitor(interval)
    callbacks = [monitor, FitTimeMonitor(), mlflow_metrics]
    callbacks += create_checkpoint_callbacks(cfg.checkpoint, network, ckpt_dir,
                                             steps_per_epoch, runtime.parallel_mode,
                                             best_metric(cfg.model.name), start_step)
    if cfg.checkpoint.snapshots.per_epoch and runtime.rank_id == 0:
        callbacks.append(_snapshot_callback(cfg, network, run_dir, steps_per_epoch, tracker))
    if runtime.emulated:
        from ms_exp.parallel.emulation import SemiAutoLayouts

        ckpt_cfg = cfg.checkpoint
        callbacks.append(SemiAutoLayouts(
            network, strategies, runtime.group_size, runtime.rank_id, ckpt_dir,
            ckpt_cfg.prefix, ckpt_cfg.strategy.save_file,
            slice_files=ckpt_cfg.save and not ckpt_cfg.integrated_save,
            save_steps=save_interval_steps(ckpt_cfg, steps_per_epoch)))
    if wants_progress_bar(cfg.trainer.progress_bar.value) and runtime.rank_id == 0:
        callbacks.append(ProgressBar(steps_per_epoch, epochs))

    saver = next((cb for cb in callbacks if isinstance(cb, TimedModelCheckpoint)), None)
    if start_step:
        callbacks.insert(0, StartAtStep(start_step))
    if saver is not None:
        callbacks.append(FlushAfterCheckpoint(saver, tracker))
    callbacks.append(StopOnSignal(saver))

    # The MLflow run is created by the sidecar meanwhile (ms_exp/tracking/sidecar.py); a
    # store that cannot be reached stops the job here, before training.
    tracker.wait_for_run()
    if runtime.rank_id == 0 and tracker.run_id:
        # Where a resumed job appends (ms_exp/checkpoint/resume.py); read without asking MLflow.
        write_run_record(run_dir, run_id=tracker.run_id)
    try:
        if start_step < epochs * steps_per_epoch:
            model.fit(epochs, train_set, eval_set, valid_frequency=1, callbacks=callbacks,
                      initial_epoch=start_step // steps_per_epoch,
                      **fit_arguments(cfg.trainer, runtime.device_target))
        else:
            print(f"the checkpoint is at the last step ({start_step}): nothing left to train",
                  flush=True)
    finally:
        StepBoundary.reset()
        if cfg.boost.mode == "dim_reduce" and runtime.rank_id == 0:
            from ms_exp.boost.pca import remove_work_dir

            remove_work_dir(run_dir)

    # Step 0: one total per run, not a training curve.
    tracker.log_metrics({"system/peak_host_memory_mb": peak_host_memory_mb()}, step=0)
    overflows = getattr(model, "overflow_steps", None)     # the functional loop counts them
    if overflows is not None:
        tracker.log_metrics({"train/overflow_steps": overflows}, step=0)
    if saver is not None:
        tracker.log_metrics({"checkpoint/save_time_s": saver.save_time_s}, step=0)
    best = next((cb for cb in callbacks if isinstance(cb, BestCheckpoint)), None)
    final_eval = mlflow_metrics.eval_history[-1] if mlflow_metrics.eval_history else {}
    return JobResult(
        run_dir=run_dir, run_id=tracker.run_id, final_eval=final_eval,
        best_value=best.best if best else None, best_metric=best_metric(cfg.model.name),
        last_checkpoint=last_checkpoint(ckpt_dir, cfg.checkpoint.prefix)
        if cfg.checkpoint.save else None,
        best_checkpoint=best.path if best and best.path.exists() else None)


def peak_host_memory_mb() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _report_placement(cfg: DictConfig, network, placement, device_target: str,
                      tracker) -> None:
    """Say where the parameters are: the console line, and for host tables which
    parameters and how many bytes (tag ms_exp.placement.host_params, metric
    placement/host_table_mb)."""
    from ms_exp.placement.tables import describe_placement, host_tables

    tables = host_tables(network, placement)
    names = [table.name for table in tables]
    host_bytes = sum(table.nbytes for table in tables)
    print(describe_placement(cfg.placement, device_target, host_bytes), flush=True)
    tracker.set_tags({"ms_exp.placement": cfg.placement.mode})
    if names:
        tracker.set_tags({"ms_exp.placement.host_params": ",".join(names)})
        tracker.log_metrics({"placement/host_table_mb": host_bytes / 2**20}, step=0)


def _report_loop(cfg: DictConfig, tracker) -> None:
    """The loop and its precision on the console and as tags (the params hold them too)."""
    from ms_exp.train.precision import needs_overflow_check

    amp = cfg.amp
    scale = amp.loss_scale.value
    if scale != "none":
        scale = f"{scale} {amp.loss_scale_value:g}" + (
            " (overflowing steps skipped)" if needs_overflow_check(amp) else "")
    print(f"trainer.loop={cfg.trainer.loop.value}, amp level {amp.level.value}, "
          f"loss scale {scale}", flush=True)
    tracker.set_tags({"ms_exp.loop": cfg.trainer.loop.value})


def _wide_deep_model(model_cfg, network, placement):
    """``Model`` over the model zoo's two-optimizer train step, evaluated by AUC."""
    import mindspore as ms

    from ms_exp.models.wide_deep import create_train_step, evaluation

    return ms.Model(create_train_step(model_cfg, network, placement), **evaluation(network))


def _snapshot_callback(cfg: DictConfig, network, run_dir: Path, steps_per_epoch: int, tracker):
    from ms_exp.boost.snapshots import SNAPSHOT_DIR
    from ms_exp.checkpoint.files import WeightSnapshots
    from ms_exp.config.errors import require

    snapshots = cfg.checkpoint.snapshots
    require(snapshots.per_epoch <= steps_per_epoch, "checkpoint.snapshots.per_epoch",
            snapshots.per_epoch, f"at most the {steps_per_epoch} steps of an epoch")
    directory = (run_dir / SNAPSHOT_DIR).resolve()
    tracker.set_tags({"ms_exp.snapshots.dir": str(directory)})
    return WeightSnapshots(snapshots, network, directory, steps_per_epoch)


def _dim_reduce_model(cfg: DictConfig, network, num_classes: int, runtime, run_dir: Path,
                      tracker):
    from ms_exp.boost.dim_reduce import build_dim_reduce_model, load_stage_one_weights
    from ms_exp.train.metrics import classification_metrics
    from ms_exp.train.optimizer import create_loss

    boost = cfg.boost
    load_stage_one_weights(network, Path(boost.pretrained_weight_path))
    snapshots = Path(boost.weight_load_dir) if boost.weight_load_dir else None
    model, plan = build_dim_reduce_model(boost, snapshots, network,
                                         create_loss(cfg.loss, num_classes),
                                         classification_metrics(num_classes), runtime, run_dir)
    if runtime.rank_id != 0:
        return model
    where = f" ({plan.cache})" if plan.cache else ""
    print(f"PCA matrix: {plan.source}{where}; {boost.n_components} components", flush=True)
    tracker.set_tags({"ms_exp.pca.source": plan.source,
                      "ms_exp.pca.cache": str(plan.cache or boost.pca_mat_path or "")})
    if plan.source == "computed":
        # The matrix belongs to stage one: log it there once (here if stage one has no run).
        owner = boost.stage_one_run_id or tracker.run_id
        tracker.log_artifact_to(owner, plan.cache, "pca")
    return model


def _log_outputs(tracker, run_dir: Path, cfg: DictConfig) -> None:
    """Logs and checkpoints into the run, also after a failure (they explain it)."""
    for log in sorted(run_dir.glob("*.log")):
        tracker.log_artifact(log, "logs")
    ranks_logs = log_dir(cfg.parallel, run_dir) if is_distributed(cfg.parallel) else None
    if ranks_logs is not None and ranks_logs.is_dir():
        tracker.log_artifacts(ranks_logs, "logs/ranks")
    _log_snapshots(tracker, run_dir, cfg)
    strategy = Path(cfg.checkpoint.strategy.save_file or "")
    if strategy.name and strategy.is_file():
        tracker.log_artifact(strategy, "strategy")
    _log_checkpoint_bytes(tracker, run_dir, cfg)
    ckpt_root = run_dir / "checkpoints"
    choice = cfg.tracking.log_checkpoints.value
    if choice == "none" or not ckpt_root.is_dir():
        return
    if choice == "all":
        tracker.log_artifacts(ckpt_root, "checkpoints")
        return
    from ms_exp.checkpoint.files import BEST_NAME, last_checkpoint

    for rank in sorted(p for p in ckpt_root.iterdir() if p.is_dir()):
        for path in (last_checkpoint(rank, cfg.checkpoint.prefix), rank / BEST_NAME):
            if path is not None and path.is_file():
                tracker.log_artifact(path, f"checkpoints/{rank.name}")


def _log_checkpoint_bytes(tracker, run_dir: Path, cfg: DictConfig) -> None:
    """``checkpoint/bytes_rank_<r>`` for every rank folder, measured here in the launching
    process: all ranks write under the one run directory."""
    if not cfg.checkpoint.save:
        return
    from ms_exp.checkpoint.files import checkpoint_bytes

    sizes = checkpoint_bytes(run_dir, cfg.checkpoint.prefix)
    if sizes:
        tracker.log_metrics({f"checkpoint/bytes_rank_{rank}": size
                             for rank, size in sizes.items()}, step=0)


def _log_snapshots(tracker, run_dir: Path, cfg: DictConfig) -> None:
    from ms_exp.boost.snapshots import SNAPSHOT_DIR, snapshot_files

    directory = run_dir / SNAPSHOT_DIR
    files = snapshot_files(directory)
    if not files:
        return
    tracker.set_tags({"ms_exp.snapshots.count": str(len(files))})
    if cfg.tracking.log_checkpoints.value != "none":
        for path in files:
            tracker.log_artifact(path, SNAPSHOT_DIR)


def _report(result: JobResult, tracker, uri: str) -> None:
    tracker.set_tags({
        "ms_exp.checkpoint.last": _artifact_name(result.last_checkpoint),
        "ms_exp.checkpoint.best": _artifact_name(result.best_checkpoint),
    })
    lines = [f"outputs: {result.run_dir.resolve()}"]
    if result.final_eval:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(result.final_eval.items()))
        lines.append(f"final evaluation: {shown}")
    if result.last_checkpoint:
        lines.append(f"last checkpoint: {result.last_checkpoint}")
    if result.best_checkpoint:
        lines.append(f"best checkpoint: {result.best_checkpoint} "
                     f"({result.best_metric} {result.best_value:.4f})")
    if tracker.enabled and tracker.run_id is not None:
        lines.append(f"MLflow run {tracker.run_id} (experiment {tracker.experiment_id}) "
                     f"in {uri}")
        lines.append(f"open it with: {ui_command(uri)}")
        lines.append("  then browse to http://127.0.0.1:5000/#/experiments/"
                     f"{tracker.experiment_id}/runs/{tracker.run_id}")
    if tracker.enabled and tracker.offline_journal is not None:
        from ms_exp.tracking.journal import offline_note

        lines.append(offline_note(uri, tracker.offline_journal, tracker.run_id))
    print("\n".join(lines), flush=True)


def _artifact_name(path: Optional[Path]) -> str:
    if path is None:
        return ""
    return f"checkpoints/{path.parent.name}/{path.name}"
