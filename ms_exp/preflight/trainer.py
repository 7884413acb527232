"""Checks of the ``trainer`` section, ``trainer.resume`` among them (the run and checkpoint
it names exist and every rank holds the checkpoint)."""
from pathlib import Path

from ms_exp.boost.options import boost_option
from ms_exp.checkpoint.resume import (
    RESUME_ALLOWED,
    ResumeError,
    common_checkpoints,
    explicit_target,
)
from ms_exp.config.errors import ConfigError, one_of, positive, require
from ms_exp.config.schema import DEVICE_TARGETS
from ms_exp.tracking.store import is_run_id, resolve_tracking_uri


def validate_trainer(cfg) -> None:
    positive("trainer", cfg, "epochs", "loss_print_interval")
    require(cfg.seed >= 0, "trainer.seed", cfg.seed, "an integer >= 0")
    require(cfg.device_id >= 0, "trainer.device_id", cfg.device_id, "an integer >= 0")
    target = cfg.device_target or "None"
    require(target in DEVICE_TARGETS, "trainer.device_target", cfg.device_target,
            one_of(DEVICE_TARGETS))


def validate_resume(cfg) -> None:
    """``trainer.resume``: where to continue from (ms_exp.checkpoint.resume finds the
    checkpoint)."""
    resume = cfg.trainer.resume
    if resume is None:
        return
    key = "trainer.resume"
    require(cfg.checkpoint.save, key, resume,
            "null with checkpoint=none (a run that saves no checkpoint cannot be resumed)")
    not_resumable = boost_option(cfg.boost).not_resumable
    require(not_resumable is None, key, resume,
            f"null with boost={cfg.boost.mode} ({not_resumable})")
    # Stage one's snapshot series lives in its own ModelCheckpoint, not in the checkpoint.
    require(not cfg.checkpoint.snapshots.per_epoch, key, resume,
            "null with checkpoint.snapshots.per_epoch > 0 (the snapshot series cannot be "
            "continued)")
    if resume == "auto":
        return
    if not is_run_id(resume):
        path = Path(resume)
        require(path.exists(), key, resume, f"{RESUME_ALLOWED} that exists")
        if path.is_file():
            require(path.suffix == ".ckpt", key, resume, f"{RESUME_ALLOWED} (.ckpt)")
        else:
            require((path / "checkpoints").is_dir(), key, resume,
                    f"{RESUME_ALLOWED} ({path} has no checkpoints/ folder)")
    try:
        run_dir, wanted = explicit_target(resume, resolve_tracking_uri(cfg.tracking.uri))
    except ResumeError as error:
        raise ConfigError(key, resume, f"{RESUME_ALLOWED} ({error})") from None
    ranks = cfg.parallel.device_num
    require(common_checkpoints(run_dir, cfg.checkpoint.prefix, ranks, wanted), key, resume,
            f"a run with a {cfg.checkpoint.prefix}-<epoch>_<step>.ckpt in each of its {ranks} "
            f"rank folders ({run_dir / 'checkpoints'})")
