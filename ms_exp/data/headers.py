"""Header checks of dataset files, so a broken file is refused before any work starts.

MindSpore's readers find a wrong magic number, a truncated file or a file that is not an
image only once the pipeline runs, after the run directory and the MLflow run exist (and
ImageFolderDataset stops mid-epoch with "Decode: image decode failed"). These checks read
a few bytes of each file, never whole files, and import no MindSpore: they run in preflight.
Each refusal is a ConfigError naming the config key, its value and what was expected.
"""
import json
import math
import os
import struct
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence

from ms_exp.config.errors import ConfigError

# The idx format of MNIST (big-endian): magic, item count, then rows and cols for images.
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049
MNIST_SIDE = 28
# usage -> (images file, labels file), as MnistDataset names them.
MNIST_SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# Leading bytes of the formats ImageFolderDataset decodes (JPEG, PNG, BMP).
IMAGE_SIGNATURES = {b"\xff\xd8\xff": "JPEG", b"\x89PNG\r\n\x1a\n": "PNG", b"BM": "BMP"}

# A MindRecord file starts with the length of its JSON header (little-endian uint64), then
# the header; its index is an SQLite database beside it, "<file>.db".
MINDRECORD_LENGTH = struct.Struct("<Q")
MINDRECORD_HEADER_KEYS = ("header_size", "page_size", "schema")
SQLITE_MAGIC = b"SQLite format 3\x00"


def mnist_train_samples(key: str, value, root: Path) -> int:
    """Check the four idx files in ``root``: magic numbers, 28x28 images, sizes that match
    their headers, as many labels as images. Returns the training split's sample count."""
    counts = {}
    for usage, (images_name, labels_name) in MNIST_SPLITS.items():
        images = _idx_header(key, value, root / images_name, IDX_IMAGES_MAGIC, 3)
        labels = _idx_header(key, value, root / labels_name, IDX_LABELS_MAGIC, 1)
        count, rows, cols = images
        if (rows, cols) != (MNIST_SIDE, MNIST_SIDE):
            _refuse(key, value, root / images_name,
                    f"holds {rows}x{cols} images, not {MNIST_SIDE}x{MNIST_SIDE}")
        if labels[0] != count:
            _refuse(key, value, root / labels_name,
                    f"holds {labels[0]} labels for {count} images in {images_name}")
        counts[usage] = count
    return counts["train"]


def _idx_header(key: str, value, path: Path, magic: int, dims: int) -> Sequence[int]:
    """The dimensions of an idx file whose magic, header and size are right."""
    header_size = 4 * (1 + dims)
    with open(path, "rb") as f:
        header = f.read(header_size)
    if len(header) < header_size:
        _refuse(key, value, path, f"is {len(header)} bytes, shorter than its idx header")
    found, *shape = struct.unpack(f">{1 + dims}I", header)
    if found != magic:
        _refuse(key, value, path, f"has magic number {found}, not {magic}")
    expected = header_size + math.prod(shape)  # one byte per pixel or label
    actual = path.stat().st_size
    if actual != expected:
        _refuse(key, value, path, f"is {actual} bytes; its header says {expected} "
                f"(truncated or not an idx file)")
    return shape


def _refuse(key: str, value, path: Path, problem: str) -> None:
    raise ConfigError(key, value, f"MNIST idx files as MnistDataset reads them ({path.name} "
                      f"{problem})")


def image_signature(path: Path) -> Optional[str]:
    """The format of an image file by its leading bytes, None if it is none of them."""
    with open(path, "rb") as f:
        head = f.read(8)
    return next((name for magic, name in IMAGE_SIGNATURES.items() if head.startswith(magic)),
                None)


def first_file(folder: Path, extensions: Iterable[str]) -> Optional[Path]:
    """The first file of ``folder`` (in directory order) with one of ``extensions``,
    without listing the whole folder: ImageNet's class folders hold 1300 files each."""
    extensions = tuple(extensions)
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(extensions) and entry.is_file():
                return Path(entry.path)
    return None


def count_files(folders: Iterable[Path], extensions: Iterable[str], enough: int) -> int:
    """Files with ``extensions`` in ``folders``, counted up to ``enough`` (then it stops)."""
    extensions, total = tuple(extensions), 0
    for folder in folders:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(extensions):
                    total += 1
                    if total >= enough:
                        return total
    return total


def mindrecord_columns(key: str, value, path: Path) -> Dict[str, dict]:
    """Check that ``path`` is a MindRecord file with its ``.db`` index beside it and
    return its schema (column -> {type, shape})."""
    allowed = f"a folder of MindRecord files written by the Criteo converter ({path.name} "
    try:
        with open(path, "rb") as f:
            prefix = f.read(MINDRECORD_LENGTH.size)
            length = (MINDRECORD_LENGTH.unpack(prefix)[0]
                      if len(prefix) == MINDRECORD_LENGTH.size else 0)
            size = path.stat().st_size
            raw = f.read(length) if 0 < length < size else b""
        header = json.loads(raw) if raw else None
    except ValueError:  # not JSON, or not UTF-8
        header = None
    if not (isinstance(header, dict) and all(k in header for k in MINDRECORD_HEADER_KEYS)
            and isinstance(header["header_size"], int)
            and isinstance(header["schema"], list)):
        raise ConfigError(key, value, allowed + "is not a MindRecord file)")
    if size < header["header_size"]:
        raise ConfigError(key, value, allowed + f"is {size} bytes, shorter than its "
                          f"{header['header_size']}-byte header region: truncated)")
    index = path.with_name(path.name + ".db")
    magic = b""
    if index.is_file():
        with open(index, "rb") as f:
            magic = f.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        state = "is missing" if not index.exists() else "is not an SQLite index"
        raise ConfigError(key, value, allowed + f"has no index: {index.name} {state})")
    schema = {}
    for part in header["schema"]:
        schema.update(part.get("schema", {}) if isinstance(part, dict) else {})
    return schema
