"""Checks of the ``checkpoint`` group: save intervals, the prefix, keys that contradict
the chosen option, the strategy file to load, and stage one's weight snapshots."""

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from ms_exp.checkpoint.files import format_of
from ms_exp.config.errors import positive, require
from ms_exp.config.paths import inside_run_dir


def validate_checkpoint(cfg: DictConfig) -> None:
    if cfg.save_checkpoint_steps is not None:
        positive("checkpoint", cfg, "save_checkpoint_steps")
        require(
            cfg.save_checkpoint_epochs == 1,
            "checkpoint.save_checkpoint_epochs",
            cfg.save_checkpoint_epochs,
            "1 when checkpoint.save_checkpoint_steps is set, which it would override",
        )
    positive("checkpoint", cfg, "save_checkpoint_epochs", "keep_checkpoint_max")
    require(
        bool(cfg.prefix) and "/" not in cfg.prefix and "\\" not in cfg.prefix,
        "checkpoint.prefix",
        cfg.prefix,
        "a non-empty file-name prefix without slashes",
    )


def validate_checkpoint_parallel(cfg: DictConfig) -> None:
    """Checkpoint keys that need a parallel mode."""
    mode = cfg.parallel.mode
    require(
        not cfg.checkpoint.get("remove_redundancy", False) or mode == "data",
        "checkpoint.remove_redundancy",
        True,
        f"false with parallel={mode}: it drops the copies of the weights that data parallel "
        "ranks hold (use parallel=data)",
    )


def validate_exception_save(cfg: DictConfig) -> None:
    """What ``checkpoint.exception_save`` needs: MindSpore's ``Model`` writes the breakpoint
    file of a ModelCheckpoint among its callbacks, in ``.ckpt`` only
    (docs/design.md#exception-save)."""
    if not cfg.checkpoint.get("exception_save", False):
        return
    checkpoint = cfg.checkpoint
    fmt = format_of(checkpoint)
    require(
        fmt == "ckpt",
        "checkpoint.exception_save",
        True,
        f"false with checkpoint.format={fmt} (MindSpore writes the breakpoint file as .ckpt "
        "only: use checkpoint.format=ckpt)",
    )
    loop = cfg.trainer.loop.value
    require(
        loop == "model",
        "checkpoint.exception_save",
        True,
        f"false with trainer.loop={loop} (MindSpore's Model writes the breakpoint file, and "
        "the functional loop has none: use trainer.loop=model)",
    )
    require(
        checkpoint.save,
        "checkpoint.exception_save",
        True,
        "false with checkpoint.save=false (MindSpore writes the breakpoint file only beside "
        "the checkpoints ModelCheckpoint saves)",
    )


def validate_checkpoint_choice(cfg: DictConfig, option: Optional[str]) -> None:
    """Keys that contradict the checkpoint option they were set on. checkpoint=integrated is
    the default and the documented sweep varies its integrated_save (README), so only the
    explicit options sliced and none are held to what their names say."""
    if option == "sliced":
        require(
            not cfg.integrated_save,
            "checkpoint.integrated_save",
            cfg.integrated_save,
            "false with checkpoint=sliced, which saves each rank's slice (use "
            "checkpoint=integrated for whole weights)",
        )
        require(
            cfg.save,
            "checkpoint.save",
            cfg.save,
            "true with checkpoint=sliced (use checkpoint=none to save nothing)",
        )
    elif option == "none":
        require(
            not cfg.save,
            "checkpoint.save",
            cfg.save,
            "false with checkpoint=none (use checkpoint=integrated or checkpoint=sliced "
            "to save checkpoints)",
        )
        require(
            not cfg.keep_best,
            "checkpoint.keep_best",
            cfg.keep_best,
            "false with checkpoint=none, which writes no checkpoint (for best.ckpt alone "
            "use checkpoint=integrated checkpoint.save=false)",
        )
    if cfg.strategy.save_file:
        inside_run_dir("checkpoint.strategy.save_file", cfg.strategy.save_file)
    load_file = cfg.strategy.load_file
    if load_file:
        # MindSpore reads it only when the graph compiles, after the run has started.
        require(
            Path(load_file).expanduser().is_file(),
            "checkpoint.strategy.load_file",
            load_file,
            "'' (none) or a strategy file that exists",
        )


def validate_snapshots(cfg: DictConfig) -> None:
    snapshots = cfg.checkpoint.snapshots
    require(
        snapshots.per_epoch >= 0,
        "checkpoint.snapshots.per_epoch",
        snapshots.per_epoch,
        "an integer >= 0 (0: no snapshots)",
    )
    if snapshots.per_epoch == 0:
        return
    require(
        1 <= snapshots.start_epoch <= cfg.trainer.epochs,
        "checkpoint.snapshots.start_epoch",
        snapshots.start_epoch,
        f"an epoch from 1 to trainer.epochs ({cfg.trainer.epochs})",
    )
    positive("checkpoint.snapshots", snapshots, "keep_max")
