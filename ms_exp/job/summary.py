"""The lines a finished job prints last: where its outputs, final evaluation, checkpoints
and MLflow run are, and the command that opens the run in the MLflow UI; the last and
best checkpoints also become tags of the run (``ms_exp.eval --checkpoint last|best``)."""
from pathlib import Path
from typing import Optional

from ms_exp.tracking.ui_links import ui_lines
from ms_exp.train.result import JobResult


def report_result(result: JobResult, tracker, uri: str) -> None:
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
        lines += ui_lines(uri, tracker.experiment_id, tracker.run_id)
    if tracker.enabled and tracker.offline_journal is not None:
        from ms_exp.tracking.journal import offline_note

        lines.append(offline_note(uri, tracker.offline_journal, tracker.run_id))
    print("\n".join(lines), flush=True)


def _artifact_name(path: Optional[Path]) -> str:
    if path is None:
        return ""
    return f"checkpoints/{path.parent.name}/{path.name}"
