"""A distributed job from the launching process: its launch plan printed, saved and tagged,
its ranks started and supervised with MLflow's variables, and rank 0's result read back."""

from pathlib import Path
from typing import Any, Dict

from omegaconf import DictConfig

from ms_exp.checkpoint.files import numbered_checkpoints
from ms_exp.data.headers import record_image_checks
from ms_exp.job.launch_plan import COMMAND_FILE, save_command
from ms_exp.job.supervise import launch
from ms_exp.parallel.launcher_config import launch_style
from ms_exp.preflight.trainer import resumable
from ms_exp.tracking.journal import JOURNAL_VARIABLE
from ms_exp.train.result import JobResult
from ms_exp.train.stop_step import clear_stop_step


def train_with_ranks(cfg: DictConfig, run_dir: Path, tracker: Any, uri: str) -> JobResult:
    """A distributed job: its ranks started as parallel.launcher.style says (msrun by
    default; ms_exp/job/launch_plan.py, ms_exp/job/supervise.py), the commands printed,
    saved and tagged."""
    commands = save_command(cfg.parallel, run_dir)
    style = launch_style(cfg.parallel)
    shown = commands.replace("\n", "\n  ")
    print(
        f"starting {cfg.parallel.device_num} ranks with {style} (also in "
        f"{run_dir / COMMAND_FILE}):\n  {shown}",
        flush=True,
    )
    tracker.log_artifact(run_dir / COMMAND_FILE, "launch")
    tracker.set_tags({"ms_exp.launch_command": commands[:5000]})
    env: Dict[str, str] = {}
    if tracker.enabled:
        # MLflow's own variables: rank 0 attaches to this run instead of starting one (with
        # the server unreachable, to the job's journal: ms_exp/tracking/journal.py).
        given = {
            "MLFLOW_TRACKING_URI": uri,
            "MLFLOW_RUN_ID": tracker.run_id,
            "MLFLOW_EXPERIMENT_ID": tracker.experiment_id,
            JOURNAL_VARIABLE: str(tracker.journal or ""),
        }
        env = {key: value for key, value in given.items() if value}
    clear_stop_step(run_dir)  # an earlier attempt's, in a resumed run directory
    record_image_checks(run_dir)  # the ranks trust what this process checked
    launch(cfg.parallel, run_dir, env, lambda: resume_hint(cfg, run_dir))
    return JobResult.load(run_dir)


def resume_hint(cfg: DictConfig, run_dir: Path) -> str:
    """How to go on after a rank was killed: continue the run from the checkpoints every
    rank saved; run it again when one has none yet, or the config saves none that can be
    continued (ms_exp/preflight/trainer.py refuses trainer.resume then)."""
    checkpoint = cfg.checkpoint
    if not resumable(cfg):
        return "run it again (this config saves no checkpoint a run can continue from)"
    folders = [run_dir / "checkpoints" / f"rank_{rank}" for rank in range(cfg.parallel.device_num)]
    if not all(numbered_checkpoints(folder, checkpoint.prefix) for folder in folders):
        return "not every rank had saved a checkpoint yet: run it again"
    return f"continue the run with trainer.resume={run_dir}"
