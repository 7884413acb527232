"""Continuing an interrupted run (``trainer.resume``) from its last good checkpoint.

``trainer.resume=auto`` picks the newest unfinished run of this config's digest under the
same outputs folder, else starts a new one, so the same command can be submitted again and
again; a run id, run directory or checkpoint file names the run explicitly. The launching
process chooses, once for all ranks, the newest checkpoint every rank holds whole (a damaged
one is renamed ``*.ckpt.damaged``) and hands it to the ranks as ``resume.json``; each rank
restores weights, optimizer state and the dataset's step, so a resumed run ends with the
weights an uninterrupted one would have (tests/test_resume.py).
"""

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import DictConfig

from ms_exp.tracking.records import NotRecorded, RunRecords, reading_store
from ms_exp.tracking.run_folder import (
    RUN_RECORD,
    FolderRefused,
    hold_folder,
    read_run_record,
    release_folder,
)
from ms_exp.tracking.store import is_run_id, sqlite_path

RESUME_FILE = "resume.json"
RESUME_ALLOWED = "auto, an MLflow run id, a run directory or a .ckpt file"
DAMAGED_SUFFIX = ".damaged"


class ResumeError(ValueError):
    """The named run or checkpoint cannot be continued; the message is one line."""


@dataclass(frozen=True)
class ResumePoint:
    run_dir: Path
    checkpoint: str  # the file name, the same in every rank's folder
    epoch: int  # of the checkpoint, counted from 1 as ModelCheckpoint names it
    step_in_epoch: int
    # The last step of each group of curves already in the run (logged_steps.py), and
    # whether it trained this config: only then are the retrained steps not logged again.
    logged: Dict[str, int] = field(default_factory=dict)
    same_config: bool = False
    # Which start of the run this is (0: its first): the step of per-attempt metrics (peak
    # memory, checkpoint cost), so each attempt's value is kept once.
    attempt: int = 0

    @property
    def not_to_log_again(self) -> Dict[str, int]:
        return self.logged if self.same_config else {}

    def save(self) -> None:
        partial = self.run_dir / (RESUME_FILE + ".partial")
        partial.write_text(json.dumps({**asdict(self), "run_dir": str(self.run_dir)}))
        os.replace(partial, self.run_dir / RESUME_FILE)

    @classmethod
    def load(cls, run_dir: Path) -> Optional["ResumePoint"]:
        try:
            fields = json.loads((Path(run_dir) / RESUME_FILE).read_text())
        except (OSError, ValueError):
            return None
        return cls(**{**fields, "run_dir": Path(fields["run_dir"])}) if fields else None


def clear_resume_point(run_dir: Path) -> None:
    (Path(run_dir) / RESUME_FILE).unlink(missing_ok=True)


def find_resume_point(
    cfg: DictConfig, new_run_dir: Path, digest: str, uri: str
) -> Optional[ResumePoint]:
    """Where this job continues, or None for a new run (``trainer.resume`` unset, or
    ``auto`` with nothing to continue)."""
    value = cfg.trainer.resume
    if value is None:
        return None
    prefix = cfg.checkpoint.prefix
    ranks = cfg.parallel.device_num
    if value == "auto":
        own = Path(new_run_dir).resolve()
        for run_dir in unfinished_runs(outputs_root(new_run_dir), digest):
            # Held before its checkpoints are read: a process still training there deletes
            # old ones as it saves new ones (and refuses this command, naming itself).
            hold_folder(run_dir, "trainer.resume=auto")
            name = newest_good_checkpoint(run_dir, prefix, ranks)
            if name is not None:
                return _point(run_dir, name, prefix)
            if run_dir != own:
                release_folder(run_dir)
            misplaced = misplaced_checkpoint_folder(run_dir, ranks)
            why = f" ({misplaced} is a file, not a folder)" if misplaced else ""
            print(
                f"trainer.resume=auto: {run_dir} did not finish but has no good "
                f"checkpoint to continue from{why}",
                flush=True,
            )
        print(
            "trainer.resume=auto: no unfinished run of this config under "
            f"{outputs_root(new_run_dir)}; starting a new run",
            flush=True,
        )
        return None
    run_dir, wanted = explicit_target(value, uri)
    hold_folder(run_dir, f"trainer.resume={value}")
    name = newest_good_checkpoint(run_dir, prefix, ranks, wanted)
    if name is None:
        what = f"checkpoint {wanted}" if wanted else "checkpoint"
        raise ResumeError(
            f"trainer.resume={value!r}: no {what} that reads back whole in all "
            f"{ranks} rank folders of {run_dir / 'checkpoints'}"
        )
    return _point(run_dir, name, prefix)


def explicit_target(value: str, uri: str) -> Tuple[Path, Optional[str]]:
    """The run directory an explicit ``trainer.resume`` names, and the checkpoint file name
    when it names one."""
    if is_run_id(value):
        return run_dir_of(uri, value), None
    path = Path(value).resolve()
    if path.is_file():
        return path.parents[2], path.name  # <run dir>/checkpoints/rank_<r>/<file>
    return path, None


def misplaced_checkpoint_folder(run_dir: Path, ranks: int) -> Optional[Path]:
    """``checkpoints/`` or one of its ``rank_<r>`` folders that is there as something other
    than a folder (a file): no checkpoint is found in it, and MindSpore's ModelCheckpoint
    fails on it when the job starts saving."""
    folder = Path(run_dir) / "checkpoints"
    for path in (folder, *(folder / f"rank_{rank}" for rank in range(ranks))):
        if os.path.lexists(path) and not path.is_dir():
            return path
    return None


def common_checkpoints(
    run_dir: Path, prefix: str, ranks: int, wanted: Optional[str] = None, breakpoints: bool = False
) -> List[str]:
    """Checkpoint names (breakpoint files': ``breakpoints``) every rank folder holds (not
    read), oldest first."""
    from ms_exp.checkpoint import files

    listed = files.breakpoints if breakpoints else files.numbered_checkpoints
    folders = [files.rank_dir(run_dir, rank) for rank in range(ranks)]
    names = files.held_by_every(folders, lambda folder: listed(folder, prefix))
    return [name for name in names if wanted in (None, name)]


def _point(run_dir: Path, name: str, prefix: str) -> ResumePoint:
    from ms_exp.checkpoint.files import breakpoint_position, checkpoint_position

    position = checkpoint_position(Path(name), prefix) or breakpoint_position(Path(name), prefix)
    assert position is not None  # name is one of numbered_checkpoints' or breakpoints'
    epoch, step = position
    return ResumePoint(Path(run_dir).resolve(), name, epoch, step)


def outputs_root(run_dir: Path) -> Path:
    """The folder Hydra's run directories of this working directory are made in: the first
    part of the run directory's path below it (``outputs``, ``multirun``)."""
    run_dir = Path(run_dir).resolve()
    try:
        return Path.cwd() / run_dir.relative_to(Path.cwd()).parts[0]
    except (ValueError, IndexError):
        return run_dir.parent


def unfinished_runs(root: Path, digest: str) -> List[Path]:
    """Run directories under ``root`` of the config ``digest`` that did not finish, newest
    first. This job's own directory is among them only if it is an earlier job's (a fixed
    ``hydra.run.dir``): a new one has no record yet."""
    found = []
    for record_path in Path(root).glob(f"**/{RUN_RECORD}"):
        try:
            record = read_run_record(record_path.parent)
        except FolderRefused as error:
            print(f"ms_exp: warning: trainer.resume=auto: {error}; not resuming it", flush=True)
            continue
        if record and record.get("digest") == digest and record.get("status") != "FINISHED":
            found.append((record.get("started", 0), record_path.parent.resolve()))
    return [run_dir for _, run_dir in sorted(found, reverse=True)]


def run_dir_of(uri: str, run_id: str) -> Path:
    """The run directory an MLflow run was trained in (its ``ms_exp.run_dir`` tag)."""
    database = sqlite_path(uri)
    if database is not None and not database.is_file():
        # Opening it would create an empty store.
        raise ResumeError(f"no such run: there is no MLflow store at {database}")
    try:
        with reading_store():  # opening a store MLflow cannot read is refused too
            run = RunRecords.open(uri).run(run_id)
    except NotRecorded:
        raise ResumeError(f"no such run in {uri}") from None
    run_dir = run.data.tags.get("ms_exp.run_dir")
    if not run_dir or not Path(run_dir).is_dir():
        raise ResumeError(
            f"the run's directory {run_dir or '(not recorded)'} is not on this machine"
        )
    return Path(run_dir)


def newest_good_checkpoint(
    run_dir: Path, prefix: str, ranks: int, wanted: Optional[str] = None
) -> Optional[str]:
    """The newest checkpoint name every rank folder holds and reads back whole; damaged
    files met on the way are reported and renamed. A breakpoint file
    (``checkpoint.exception_save``) newer than every whole numbered checkpoint comes first;
    one of the same step or older is said to be passed over, as the numbered one carries
    a CRC."""
    from ms_exp.checkpoint.files import breakpoint_position, checkpoint_position, rank_dir

    folders = [rank_dir(run_dir, rank) for rank in range(ranks)]
    regular = None
    for name in reversed(common_checkpoints(run_dir, prefix, ranks, wanted)):
        if all(_is_good(folder / name) for folder in folders):
            regular = name
            break
    after = checkpoint_position(Path(regular), prefix) if regular else None
    for name in reversed(common_checkpoints(run_dir, prefix, ranks, wanted, breakpoints=True)):
        position = breakpoint_position(Path(name), prefix)
        if after is not None and position is not None and position <= after:
            print(
                f"trainer.resume: {folders[0] / name} is not newer than {regular}, which "
                "carries a CRC: continuing from that",
                flush=True,
            )
            return regular
        if all(
            _is_good(folder / name, folder / regular if regular else None) for folder in folders
        ):
            return name
    return regular


def _is_good(path: Path, regular: Optional[Path] = None) -> bool:
    """``regular``: for a breakpoint file, which has no CRC, a numbered checkpoint whose
    entries it must all hold."""
    from ms_exp.checkpoint.files import (
        DamagedCheckpoint,
        is_breakpoint,
        verify_breakpoint,
        verify_checkpoint,
    )

    try:
        if is_breakpoint(path):
            verify_breakpoint(path, regular)
        else:
            verify_checkpoint(path)
    except DamagedCheckpoint as error:
        kept = path.with_name(path.name + DAMAGED_SUFFIX)
        os.replace(path, kept)
        print(f"ms_exp: warning: {error}; not resuming from it (kept as {kept})", flush=True)
        return False
    return True


def restore(
    point: ResumePoint,
    train_network: Any,
    train_set: Any,
    ckpt_dir: Path,
    steps_per_epoch: int,
    shares: bool = False,
) -> int:
    """Load the checkpoint into the train network (weights and optimizer state) and move
    the dataset to the step after it; return that global step. ``shares``: each rank saved
    its share (``checkpoint.remove_redundancy``): every rank reads them all, from the run
    directory they share, rather than MindSpore's broadcast, which needs the network
    compiled first (docs/design.md#remove-redundancy)."""
    import mindspore as ms

    from ms_exp.checkpoint.files import (
        breakpoint_record,
        is_breakpoint,
        load_shares,
        load_verified,
        rank_folders,
    )

    path = Path(ckpt_dir) / point.checkpoint
    if shares:
        params = load_shares(point.checkpoint, rank_folders(Path(ckpt_dir).parent))
    else:
        params = load_verified(path)
    step = params.pop("step_num", None)
    params.pop("epoch_num", None)
    by_name = (point.epoch - 1) * steps_per_epoch + point.step_in_epoch
    if is_breakpoint(path):
        # Its step_num is MindSpore's step in the epoch; the step ms_exp recorded beside it,
        # else the name's (docs/design.md#exception-save).
        global_step = int((breakpoint_record(path) or {}).get("step", by_name))
    else:
        # Checkpoints written before ms_exp recorded step_num: the name gives the same step.
        global_step = int(step.asnumpy()) if step is not None else by_name
    try:
        not_loaded, _ = ms.load_param_into_net(train_network, params)
    except (RuntimeError, ValueError) as error:  # a shape that differs: another network
        raise ResumeError(
            f"checkpoint {path} does not fit this network and optimizer: "
            f"{str(error).strip().splitlines()[0]}"
        ) from None
    if not_loaded:
        raise ResumeError(
            f"checkpoint {path} lacks {', '.join(not_loaded[:5])} of this "
            "network and optimizer: it was saved by another config"
        )
    train_set.set_init_step(global_step)
    print(
        f"resumed from {path}: epoch {point.epoch}, step {global_step} "
        f"(weights and optimizer state)",
        flush=True,
    )
    return global_step
