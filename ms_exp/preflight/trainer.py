"""Checks of the ``trainer`` section, ``trainer.resume`` among them (the run and checkpoint
it names exist, every rank holds the checkpoint, and its shapes are the network's: the one
check here that imports MindSpore, for an explicit resume only)."""

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from omegaconf import DictConfig

from ms_exp.boost.options import boost_option
from ms_exp.checkpoint.files import is_checkpoint_file
from ms_exp.checkpoint.resume import (
    RESUME_ALLOWED,
    ResumeError,
    common_checkpoints,
    explicit_target,
    misplaced_checkpoint_folder,
)
from ms_exp.checkpoint.transform import is_sliced_run
from ms_exp.config.errors import ConfigError, one_of, positive, require
from ms_exp.config.schema import DEVICE_TARGETS
from ms_exp.tracking.store import is_run_id, resolve_tracking_uri


def validate_trainer(cfg: DictConfig) -> None:
    positive("trainer", cfg, "epochs", "loss_print_interval")
    require(cfg.seed >= 0, "trainer.seed", cfg.seed, "an integer >= 0")
    require(cfg.device_id >= 0, "trainer.device_id", cfg.device_id, "an integer >= 0")
    target = cfg.device_target or "None"
    require(
        target in DEVICE_TARGETS, "trainer.device_target", cfg.device_target, one_of(DEVICE_TARGETS)
    )


def resumable(cfg: DictConfig) -> bool:
    """Whether a run of this config can be continued with ``trainer.resume`` (what
    validate_resume requires of it)."""
    return bool(
        cfg.checkpoint.save
        and boost_option(cfg.boost).not_resumable is None
        and not cfg.checkpoint.snapshots.per_epoch
    )


def validate_resume(cfg: DictConfig) -> None:
    """``trainer.resume``: where to continue from (ms_exp.checkpoint.resume finds the
    checkpoint)."""
    resume = cfg.trainer.resume
    if resume is None:
        return
    key = "trainer.resume"
    require(
        cfg.checkpoint.save,
        key,
        resume,
        "null with checkpoint=none (a run that saves no checkpoint cannot be resumed)",
    )
    not_resumable = boost_option(cfg.boost).not_resumable
    require(
        not_resumable is None, key, resume, f"null with boost={cfg.boost.mode} ({not_resumable})"
    )
    # Stage one's snapshot series lives in its own ModelCheckpoint, not in the checkpoint.
    require(
        not cfg.checkpoint.snapshots.per_epoch,
        key,
        resume,
        "null with checkpoint.snapshots.per_epoch > 0 (the snapshot series cannot be continued)",
    )
    if resume == "auto":
        return
    if not is_run_id(resume):
        path = Path(resume)
        require(path.exists(), key, resume, f"{RESUME_ALLOWED} that exists")
        if path.is_file():
            require(
                is_checkpoint_file(path),
                key,
                resume,
                f"{RESUME_ALLOWED} (.ckpt or .safetensors)",
            )
            folder = path.resolve().parent
            require(
                folder.name.startswith("rank_") and folder.parent.name == "checkpoints",
                key,
                resume,
                f"a checkpoint in a run directory, <run dir>/checkpoints/"
                f"rank_<r>/<file>.ckpt ({path.name} is in {folder}); to evaluate a loose "
                "file use python -m ms_exp.eval --checkpoint",
            )
        else:
            require(
                (path / "checkpoints").is_dir(),
                key,
                resume,
                f"{RESUME_ALLOWED} ({path} has no checkpoints/ folder)",
            )
    try:
        run_dir, wanted = explicit_target(resume, resolve_tracking_uri(cfg.tracking.uri))
    except ResumeError as error:
        raise ConfigError(key, resume, f"{RESUME_ALLOWED} ({error})") from None
    ranks = cfg.parallel.device_num
    misplaced = misplaced_checkpoint_folder(run_dir, ranks)
    where = f"{misplaced} is a file, not a folder" if misplaced else run_dir / "checkpoints"
    require(
        bool(common_checkpoints(run_dir, cfg.checkpoint.prefix, ranks, wanted)),
        key,
        resume,
        f"a run with a {cfg.checkpoint.prefix}-<epoch>_<step>.ckpt in each of its {ranks} "
        f"rank folders ({where})",
    )
    if wanted is not None:
        verify_named_checkpoint(key, resume, run_dir, wanted, ranks)


def verify_named_checkpoint(key: str, resume: str, run_dir: Path, name: str, ranks: int) -> None:
    """A checkpoint file named explicitly is read back whole (MindSpore's CRC) in every
    rank folder before anything is created: resuming would otherwise find it damaged only
    in the job, after its run directory and MLflow run exist. (A run id or run directory
    resumes from the newest good checkpoint, skipping damaged ones, in the job.)"""
    from ms_exp.checkpoint.files import DamagedCheckpoint, rank_dir, verify_checkpoint

    for rank in range(ranks):
        try:
            with mindspore_warnings_off():  # the refusal below says it, in one line
                verify_checkpoint(rank_dir(run_dir, rank) / name)
        except DamagedCheckpoint as error:
            raise ConfigError(
                key,
                resume,
                f"a checkpoint that reads back whole ({error}); "
                "name an older checkpoint, or the run directory to resume from "
                "its newest good one",
            ) from None


def validate_resume_fits(cfg: DictConfig) -> None:
    """The parameters of the checkpoint an explicit ``trainer.resume`` continues from (the
    named one, or rank 0's newest that reads back whole) have the shapes of the network this
    config builds (after the dataset and model checks): refused here, not by the job's
    restore, which would end the run FAILED. A sliced run's rank slices are not compared."""
    resume = cfg.trainer.resume
    if resume in (None, "auto") or is_sliced_run(cfg):
        return
    run_dir, wanted = explicit_target(resume, resolve_tracking_uri(cfg.tracking.uri))

    from ms_exp.checkpoint.files import DamagedCheckpoint, check_shapes, load_verified, rank_dir
    from ms_exp.data.build import declared_spec
    from ms_exp.models import create_network

    network = create_network(cfg.model, declared_spec(cfg.dataset))
    names = set(network.parameters_dict())
    ranks = cfg.parallel.device_num
    for name in reversed(common_checkpoints(run_dir, cfg.checkpoint.prefix, ranks, wanted)):
        try:
            with mindspore_warnings_off():  # the job skips a damaged one too, and says so
                weights = load_verified(rank_dir(run_dir, 0) / name, choice_func=names.__contains__)
        except DamagedCheckpoint:
            continue
        check_shapes(network, weights, "trainer.resume", resume, name)
        return


@contextmanager
def mindspore_warnings_off() -> Iterator[None]:
    """MindSpore's own warnings muted for the block: reading a damaged checkpoint logs
    "[WARNING] ME(...) ... the ckpt file do not contain the crc code" to stderr before the
    error that the one-line refusal already states."""
    from mindspore import log

    logger = log._get_logger()  # MindSpore's logger (GLOG_v), made on first use
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
