"""The lines a finished job prints last: where its outputs, final evaluation, checkpoints
and MLflow run are, the command that opens the run in the MLflow UI, and a stage one's
stage two; the last and best checkpoints also become tags of the run (``ms_exp.eval
--checkpoint last|best``)."""

import re
import shlex
from pathlib import Path
from typing import Mapping, Optional, Sequence

from omegaconf import DictConfig

from ms_exp.boost.options import boost_option
from ms_exp.preflight.trainer import resumable
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.lifecycle import StoppedRun, stopped_by
from ms_exp.tracking.store import python_command
from ms_exp.tracking.ui_links import mlflow_executable, ui_lines
from ms_exp.train.result import JobResult


def report_result(
    result: JobResult, tracker: RunTracker, uri: str, models: Optional[Mapping[str, str]] = None
) -> None:
    """The job's last lines; ``models``: the ids of its logged MLflow models by name."""
    tracker.set_tags(
        {
            "ms_exp.checkpoint.last": _artifact_name(result.last_checkpoint),
            "ms_exp.checkpoint.best": _artifact_name(result.best_checkpoint),
        }
    )
    lines = [f"outputs: {result.run_dir.resolve()}"]
    if result.final_eval:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(result.final_eval.items()))
        lines.append(f"final evaluation: {shown}")
    if result.last_checkpoint:
        lines.append(f"last checkpoint: {result.last_checkpoint}")
    if result.best_checkpoint:
        lines.append(
            f"best checkpoint: {result.best_checkpoint} "
            f"({result.best_metric} {result.best_value:.4f})"
        )
    if tracker.enabled and tracker.run_id is not None:
        lines.append(f"MLflow run {tracker.run_id} (experiment {tracker.experiment_id}) in {uri}")
        lines += ui_lines(uri, str(tracker.experiment_id), tracker.run_id)
    if models:
        # The models by their models:/ URIs, and MLflow's command that predicts with the
        # first (``best`` when it was kept) on the input example saved with it.
        from ms_exp.job.model_package import MODELS_DIR

        shown = ", ".join(f"{name} models:/{model_id}" for name, model_id in models.items())
        name, model_id = next(iter(models.items()))
        example = result.run_dir.resolve() / MODELS_DIR / name / "serving_input_example.json"
        predict = [*shlex.split(mlflow_executable()), "models", "predict"]
        predict += ["-m", f"models:/{model_id}", "-i", str(example), "-t", "json"]
        command = shlex.join([*predict, "--env-manager", "local"])
        lines.append(f"MLflow models: {shown}")
        lines.append(f"  predict with: MLFLOW_TRACKING_URI={shlex.quote(uri)} {command}")
    if tracker.enabled and tracker.offline_journal is not None:
        from ms_exp.tracking.journal import offline_note

        lines.append(offline_note(uri, tracker.offline_journal, tracker.run_id))
    print("\n".join(lines), flush=True)


def _artifact_name(path: Optional[Path]) -> str:
    if path is None:
        return ""
    return f"checkpoints/{path.parent.name}/{path.name}"


STAGE_ONE_PRESET = "+experiment=dim_reduce_stage_one"
# Where stage two must look for stage one: the same store and experiment.
_SAME_STORE = ("tracking.uri=", "tracking.experiment_name=")


def stage_two_command(cfg: DictConfig, overrides: Sequence[str], run_id: str) -> Optional[str]:
    """The command that trains stage two from a stage-one run's snapshots (None for any
    other run): the preset's stage two after the preset's stage one, else this run's own
    overrides with ``boost=dim_reduce`` (AutoBoost trains with SGD whatever the optimizer)."""
    # A run boosted by its own train step (dim_reduce) is a stage two already.
    if not cfg.checkpoint.snapshots.per_epoch or boost_option(cfg.boost).own_train_step:
        return None
    if STAGE_ONE_PRESET in overrides:
        args = [
            "+experiment=dim_reduce_stage_two",
            *(o for o in overrides if o.startswith(_SAME_STORE)),
        ]
    else:
        args = [*overrides, "boost=dim_reduce"]
    return shlex.join(
        [
            *shlex.split(python_command()),
            "-m",
            "ms_exp.run",
            *args,
            f"boost.stage_one_run_id={run_id}",
        ]
    )


_RESUME = re.compile(r"[+~]*trainer\.resume(=|$)")
_SKIP_FINISHED = re.compile(r"[+~]*tracking\.skip_finished(=|$)")


def stop_line(
    interrupt: BaseException, argv: Sequence[str], multirun: bool, cfg: Optional[DictConfig]
) -> str:
    """The last line of a command a signal stopped: what stopped it, in the user's words,
    the run it left KILLED and the command that continues it: the command line as typed
    (``argv``) with ``trainer.resume=auto`` (the run's folder when the command named
    another resume), a sweep's with ``tracking.skip_finished=true`` too. ``cfg``: the
    command's config (a sweep's first job's); None when it was stopped before one."""
    line = f"ms_exp: {stopped_by(interrupt)}"
    if multirun:
        line += "; the sweep's runs were marked KILLED"
    elif StoppedRun.run_dir is None:
        return line  # stopped before its run started
    elif StoppedRun.run_id:
        line += f"; MLflow run {StoppedRun.run_id} was marked KILLED"
    else:
        line += f"; the run in {StoppedRun.run_dir} was marked KILLED"
    if cfg is None:
        return line
    typed = [a for a in argv if _RESUME.match(a)]
    args = [a for a in argv if not _RESUME.match(a)]
    if multirun and cfg.tracking.enabled:
        args = [*(a for a in args if not _SKIP_FINISHED.match(a)), "tracking.skip_finished=true"]
    if not resumable(cfg):
        return f"{line}; it cannot be continued (this config saves no checkpoint to resume from)"
    explicit = typed and typed[-1].partition("=")[2] not in ("auto", "null", "")
    where = StoppedRun.run_dir if explicit and not multirun else "auto"
    command = shlex.join(
        [*shlex.split(python_command()), "-m", "ms_exp.run", *args, f"trainer.resume={where}"]
    )
    return f"{line}; continue it with: {command}"
