"""Stage one's weight snapshots on disk (no MindSpore import: validation reads these)."""

from pathlib import Path
from typing import List

SNAPSHOT_DIR = "snapshots"  # <run dir>/snapshots, written by rank 0
SNAPSHOT_PREFIX = "snapshot"


def snapshot_files(directory: Path) -> List[Path]:
    """The checkpoints of a snapshot folder, as MindSpore's PCA reads them (``*.ckpt``)."""
    directory = Path(directory)
    return sorted(directory.glob("*.ckpt")) if directory.is_dir() else []
