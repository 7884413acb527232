"""A job's files logged into its MLflow run when it ends, also after a failure (they
explain it): logs, every rank's logs, stage one's snapshots, the strategy file, checkpoint
sizes and the checkpoints ``tracking.log_checkpoints`` asks for; and, for a run of sliced
checkpoints, the lines that say where they are and how to merge them.

``ms_exp.checkpoint.files`` is imported where it is used: it imports MindSpore, which the
launching process of a distributed job never needs."""

import shlex
from pathlib import Path
from typing import List

from omegaconf import DictConfig

from ms_exp.checkpoint.snapshots import SNAPSHOT_DIR, snapshot_files
from ms_exp.checkpoint.transform import merged_file
from ms_exp.parallel.launcher_config import is_distributed, log_dir
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.store import python_command


def log_outputs(tracker: RunTracker, run_dir: Path, cfg: DictConfig, attempt: int) -> None:
    """Logs and checkpoints into the run, also after a failure (they explain it); the
    checkpoints' size at the step of this attempt of the run (0: its first start)."""
    for log in sorted(run_dir.glob("*.log")):
        tracker.log_artifact(log, "logs")
    ranks_logs = log_dir(cfg.parallel, run_dir) if is_distributed(cfg.parallel) else None
    if ranks_logs is not None and ranks_logs.is_dir():
        tracker.log_artifacts(ranks_logs, "logs/ranks")
    snapshots = snapshot_files(run_dir / SNAPSHOT_DIR)
    if snapshots:
        tracker.set_tags({"ms_exp.snapshots.count": str(len(snapshots))})
        if cfg.tracking.log_checkpoints.value != "none":
            for snapshot in snapshots:
                tracker.log_artifact(snapshot, SNAPSHOT_DIR)
    strategy = Path(cfg.checkpoint.strategy.save_file or "")
    if strategy.name and strategy.is_file():
        tracker.log_artifact(strategy, "strategy")
    if cfg.checkpoint.save:
        # Measured here in the launching process: all ranks write under the one run directory.
        from ms_exp.checkpoint.files import checkpoint_bytes

        sizes = checkpoint_bytes(run_dir, cfg.checkpoint.prefix)
        if sizes:
            tracker.log_metrics(
                {f"checkpoint/bytes_rank_{rank}": size for rank, size in sizes.items()},
                step=attempt,
            )
    ckpt_root = run_dir / "checkpoints"
    choice = cfg.tracking.log_checkpoints.value
    if choice == "none" or not ckpt_root.is_dir():
        return
    if choice == "all":
        tracker.log_artifacts(ckpt_root, "checkpoints")
        return
    from ms_exp.checkpoint.files import best_file, digest_file, last_checkpoint

    for rank in sorted(p for p in ckpt_root.iterdir() if p.is_dir()):
        for path in (last_checkpoint(rank, cfg.checkpoint.prefix), best_file(rank)):
            if path is not None and path.is_file():
                tracker.log_artifact(path, f"checkpoints/{rank.name}")
                # A safetensors file's digest travels with it: a download is checked too.
                if digest_file(path).is_file():
                    tracker.log_artifact(digest_file(path), f"checkpoints/{rank.name}")


def sliced_checkpoint_lines(run_dir: Path, cfg: DictConfig) -> List[str]:
    """The last lines of a run that saved sliced checkpoints: where the slices and the
    strategy file are, the command that merges them (``ms_exp.ckpt merge``) and the one
    that evaluates the merged file (``ms_exp.eval --checkpoint``)."""
    strategy = Path(cfg.checkpoint.strategy.save_file or "")
    ckpt_root = Path(run_dir).resolve() / "checkpoints"
    if not (
        is_distributed(cfg.parallel)
        and cfg.checkpoint.save
        and not cfg.checkpoint.integrated_save
        and strategy.name
        and strategy.is_file()
        and ckpt_root.is_dir()
    ):
        return []
    ranks = sorted(
        (p.name for p in ckpt_root.glob("rank_*") if p.is_dir()),
        key=lambda name: int(name.rsplit("_", 1)[-1]),
    )
    shown = f"{ranks[0]} ... {ranks[-1]}" if len(ranks) > 1 else ", ".join(ranks)
    from ms_exp.checkpoint.files import format_of

    # which eval evaluates as it is
    merged = merged_file(ckpt_root, cfg.checkpoint.prefix, format_of(cfg.checkpoint))
    return [
        f"sliced checkpoints (one slice per rank): {ckpt_root}/{{{shown}}}",
        f"strategy file: {strategy.resolve()}",
        f"merge them into one checkpoint: {python_command()} -m ms_exp.ckpt merge "
        f"{shlex.quote(str(Path(run_dir).resolve()))}",
        f"then evaluate it: {python_command()} -m ms_exp.eval --checkpoint "
        f"{shlex.quote(str(merged))}",
    ]
