"""The lines a finished job prints last: where its outputs, final evaluation, checkpoints
and MLflow run are, the command that opens the run in the MLflow UI, and a stage one's
stage two; the last and best checkpoints also become tags of the run (``ms_exp.eval
--checkpoint last|best``)."""

import shlex
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import DictConfig

from ms_exp.boost.options import boost_option
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.store import python_command
from ms_exp.tracking.ui_links import ui_lines
from ms_exp.train.result import JobResult


def report_result(result: JobResult, tracker: RunTracker, uri: str) -> None:
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
