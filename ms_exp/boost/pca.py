"""The PCA matrix of a stage-one snapshot folder: computed once, cached, reused.

MindSpore writes the matrix, its per-rank splits and an end marker into ``weight_load_dir``,
deleting any it finds there first (docs/design.md#pca-folder), so jobs sharing a snapshot
folder would delete each other's files and every job of a sweep would redo the PCA. So each
job hands MindSpore a private ``<run dir>/pca``; the matrix is cached under a file lock in
``<snapshot folder>/ms_exp_pca/pca_mat_n<K>.npy`` with the snapshot listing it came from;
rank 0 starts only once the other ranks have cleared their stale files.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from omegaconf import DictConfig

from ms_exp.checkpoint.files import link_or_copy
from ms_exp.checkpoint.snapshots import snapshot_files

# MindSpore's names: the matrix it computes in weight_load_dir, and its end marker.
MINDSPORE_MATRIX = "pca_mat_temp.npy"
CACHE_FOLDER = "ms_exp_pca"
# MindSpore refuses paths with other characters (mindspore.boost.base._check_path).
_MINDSPORE_PATH = re.compile(r"^[_A-Za-z0-9/.-]+$")


@dataclass
class PcaPlan:
    """What one rank passes to MindSpore and what happened to the matrix."""

    work_dir: Path
    pca_mat_path: Optional[Path]  # None: MindSpore computes from weight_load_dir
    source: str  # given | cached | computed | rank k waits for rank 0
    cache: Optional[Path] = None


def work_dir(run_dir: Path) -> Path:
    """The job's private folder for MindSpore's PCA files (the same for all its ranks)."""
    path = (Path(run_dir) / "pca").resolve()
    if _MINDSPORE_PATH.match(str(path)):
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()).resolve() / f"ms_exp_pca_{digest}"


@contextmanager
def pca_for_rank(
    boost_cfg: DictConfig, snapshots: Optional[Path], run_dir: Path, rank: int, group_size: int
) -> Iterator[PcaPlan]:
    """Prepare this rank's work folder; the caller builds MindSpore's boost network inside
    the ``with`` block. A matrix rank 0 computed is published to the cache on exit."""
    work = work_dir(run_dir)
    work.mkdir(parents=True, exist_ok=True)
    if rank != 0:
        yield PcaPlan(work, None, "rank 0's")
        (work / f"rank_{rank}.cleared").touch()
        return
    _wait_for_ranks(work, group_size, boost_cfg.timeout)
    if boost_cfg.pca_mat_path:
        link_or_copy(Path(boost_cfg.pca_mat_path).expanduser(), work / MINDSPORE_MATRIX)
        yield PcaPlan(work, work / MINDSPORE_MATRIX, "given")
        return
    # Without boost.pca_mat_path, ms_exp.boost.checks refused a run with no snapshot folder.
    assert snapshots is not None
    # Beside the snapshots it is computed from; a user cache if that folder is read-only.
    cache = snapshots / CACHE_FOLDER
    if not (os.access(snapshots, os.W_OK) or os.access(cache, os.W_OK)):
        digest = hashlib.sha256(str(snapshots.resolve()).encode()).hexdigest()[:16]
        cache = Path.home() / ".cache" / "ms_exp" / "pca" / digest
    cache.mkdir(parents=True, exist_ok=True)
    matrix = cache / f"pca_mat_n{boost_cfg.n_components}.npy"
    listing_file = matrix.with_suffix(".json")
    # What the cached matrix depends on: every snapshot's name, size and mtime.
    listing = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in snapshot_files(snapshots)]
    with open(matrix.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (
            matrix.is_file()
            and listing_file.is_file()
            and json.loads(listing_file.read_text()) == listing
        ):
            link_or_copy(matrix, work / MINDSPORE_MATRIX)
            yield PcaPlan(work, work / MINDSPORE_MATRIX, "cached", matrix)
            return
        for snapshot in snapshot_files(snapshots):
            link = work / snapshot.name
            if not link.exists():
                link.symlink_to(snapshot.resolve())
        yield PcaPlan(work, None, "computed", matrix)
        _publish(matrix, lambda partial: shutil.copyfile(work / MINDSPORE_MATRIX, partial))
        _publish(listing_file, lambda partial: partial.write_text(json.dumps(listing)))


def _wait_for_ranks(work: Path, group_size: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = [r for r in range(1, group_size)]
    while waiting:
        waiting = [r for r in waiting if not (work / f"rank_{r}.cleared").exists()]
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(
                f"ranks {waiting} did not reach the PCA step within boost.timeout={timeout} s"
            )
        time.sleep(0.05 if waiting else 0)


def _publish(target: Path, write: Callable[[Path], object]) -> None:
    """``write`` a temporary file, then rename it: readers never see half a file."""
    partial = target.with_name(target.name + ".partial")
    write(partial)
    os.replace(partial, target)


def remove_work_dir(run_dir: Path) -> None:
    """The work folder only holds copies and splits of the matrix: drop it after training."""
    shutil.rmtree(work_dir(run_dir), ignore_errors=True)
