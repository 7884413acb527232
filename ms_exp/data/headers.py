"""Header checks of dataset files, so a broken file is refused before any work starts.

MindSpore's readers find a broken file only once the pipeline runs; these checks read a few
bytes of each file, without MindSpore, in preflight. Every image is checked: a JPEG cut off
inside its header kills or hangs MindSpore's Decode (docs/design.md#damaged-jpeg-headers)."""

import hashlib
import json
import math
import os
import struct
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence

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

# The last bytes of whole files: JPEG's end-of-image marker, PNG's IEND chunk. Within this
# many bytes of the end (a JPEG may carry padding or a trailer after its marker).
JPEG_END = b"\xff\xd9"
PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk's type and its (constant) CRC
TAIL_BYTES = 1024
# BMP's file header holds the file's size in bytes 2..6 (little-endian; 0 in some writers).
BMP_SIZE = struct.Struct("<I")

# A MindRecord file starts with the length of its JSON header (little-endian uint64), then
# the header; its index is an SQLite database beside it, "<file>.db".
MINDRECORD_LENGTH = struct.Struct("<Q")
MINDRECORD_HEADER_KEYS = ("header_size", "page_size", "schema")
SQLITE_MAGIC = b"SQLite format 3\x00"


def mnist_train_samples(key: str, value: Any, root: Path) -> int:
    """Check the four idx files in ``root``: magic numbers, 28x28 images, sizes that match
    their headers, as many labels as images. Returns the training split's sample count."""
    counts = {}
    for usage, (images_name, labels_name) in MNIST_SPLITS.items():
        images = _idx_header(key, value, root / images_name, IDX_IMAGES_MAGIC, 3)
        labels = _idx_header(key, value, root / labels_name, IDX_LABELS_MAGIC, 1)
        count, rows, cols = images
        if (rows, cols) != (MNIST_SIDE, MNIST_SIDE):
            _refuse(
                key,
                value,
                root / images_name,
                f"holds {rows}x{cols} images, not {MNIST_SIDE}x{MNIST_SIDE}",
            )
        if labels[0] != count:
            _refuse(
                key,
                value,
                root / labels_name,
                f"holds {labels[0]} labels for {count} images in {images_name}",
            )
        if count == 0:
            _refuse(key, value, root / images_name, "holds no samples: its header says 0 images")
        counts[usage] = count
    return counts["train"]


def _idx_header(key: str, value: Any, path: Path, magic: int, dims: int) -> Sequence[int]:
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
        _refuse(
            key,
            value,
            path,
            f"is {actual} bytes; its header says {expected} (truncated or not an idx file)",
        )
    return shape


def _refuse(key: str, value: Any, path: Path, problem: str) -> None:
    raise ConfigError(
        key, value, f"MNIST idx files as MnistDataset reads them ({path.name} {problem})"
    )


def image_signature(path: Path) -> Optional[str]:
    """The format of an image file by its leading bytes, None if it is none of them."""
    with open(path, "rb") as f:
        return _signature(f.read(8))


def _signature(head: bytes) -> Optional[str]:
    return next((name for magic, name in IMAGE_SIGNATURES.items() if head.startswith(magic)), None)


def damaged_image(path: Path) -> Optional[str]:
    """What is wrong with an image file that MindSpore's Decode cannot read (or, for a JPEG
    cut off inside its header, crashes on), from its header (read by Pillow) and its last
    bytes; None when nothing is. A JPEG cut off inside its scan data, or a PNG or BMP cut
    short, is caught by its missing end; pixels are not decoded."""
    from PIL import Image, UnidentifiedImageError

    try:
        size = path.stat().st_size
        if size == 0:
            return "is empty (0 bytes)"
        with open(path, "rb") as f:
            head = f.read(8)
            signature = _signature(head)
            f.seek(0)
            try:
                with Image.open(f, formats=(signature,) if signature else None) as image:
                    kind, scanned = image.format, bool(image.tile)
                    problem = None if scanned or kind != "JPEG" else "no scan"
            except Image.DecompressionBombError:  # a whole header, of > 179 Mpx: not ours
                kind, problem = signature, None
            except (OSError, SyntaxError, ValueError, struct.error) as error:
                # UnidentifiedImageError is an OSError: no format matched, or the matching
                # one gave up on a header cut short or damaged.
                kind, problem = signature, " ".join(str(error).split()) or type(error).__name__
                if isinstance(error, UnidentifiedImageError):
                    problem = "unreadable"
            # Pillow stops reading a JPEG header at its first scan, or at the end of the
            # file: without an error when the file ends between two segments (a scan
            # never reached is a cut-off header too).
            ended = f.tell() >= size
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read()
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if kind is None:
        return f"is not a JPEG, PNG or BMP image ({size} bytes)"
    if problem is not None:
        if kind == "JPEG" and ended:
            return f"has a cut-off JPEG header ({size} bytes, it ends before its first scan)"
        return f"has a damaged or cut-off {kind} header ({size} bytes; Pillow: {problem})"
    if kind not in IMAGE_SIGNATURES.values():
        return f"is a {kind} image, not JPEG, PNG or BMP"
    if kind == "JPEG" and JPEG_END not in tail:
        return f"is cut off ({size} bytes, no JPEG end-of-image marker)"
    if kind == "PNG" and PNG_END not in tail:
        return f"is cut off ({size} bytes, no PNG IEND chunk)"
    if kind == "BMP":
        declared = BMP_SIZE.unpack(head[2 : 2 + BMP_SIZE.size])[0]
        if declared > size:
            return f"is cut off ({size} bytes; its header says {declared})"
    return None


def image_files(folder: Path, extensions: Iterable[str]) -> Iterator[Path]:
    """Every file with ``extensions`` in the class folders of ``folder``, as
    ImageFolderDataset reads them (sorted)."""
    extensions = tuple(extensions)
    for classdir in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        with os.scandir(classdir) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(extensions) and e.is_file())
        yield from (classdir / name for name in names)


# Folders found whole in this process: resolved path -> {"images": count, "sha256":
# listing_digest}. Written into the run folder (CHECKED_IMAGES) for the ranks, which trust
# them where they find the same files (_CHECKED_BY_LAUNCHER).
_WHOLE_IMAGE_FOLDERS: Dict[str, dict] = {}
_CHECKED_BY_LAUNCHER: Dict[str, dict] = {}
CHECKED_IMAGES = "checked_images.json"


def check_image_folder(key: str, value: Any, folder: Path, extensions: Iterable[str]) -> int:
    """Refuse ``folder`` (a split of class folders) if any of its images is damaged
    (``damaged_image``), naming the first such file and how many more there are. Returns
    the images checked: none for a folder found whole in this process, or by the launching
    process with the same files (same paths, sizes and modification times)."""
    folder = Path(folder).expanduser()
    whole = str(folder.resolve())
    if whole in _WHOLE_IMAGE_FOLDERS:
        return 0
    paths = list(image_files(folder, extensions))
    checked = {"images": len(paths), "sha256": listing_digest(paths)}
    if _CHECKED_BY_LAUNCHER.get(whole) == checked:
        _WHOLE_IMAGE_FOLDERS[whole] = checked
        return 0
    damaged = [(path, problem) for path in paths if (problem := damaged_image(path))]
    if damaged:
        (path, problem), more = damaged[0], len(damaged) - 1
        others = f"; {more} more damaged file{'s' if more > 1 else ''} in {folder}" if more else ""
        raise ConfigError(
            key,
            value,
            "class folders of whole JPEG, PNG or BMP images; remove or replace the file",
            problem=f"{path} {problem}{others}",
        )
    _WHOLE_IMAGE_FOLDERS[whole] = checked
    return len(paths)


def listing_digest(paths: Sequence[Path]) -> str:
    """sha256 of the files' names (class folder and file), sizes and modification times."""
    digest = hashlib.sha256()
    for path in paths:
        name = "/".join(path.parts[-2:])
        try:
            stat = os.stat(path)
            line = f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n"
        except OSError:  # gone since it was listed: damaged_image names it
            line = f"{name}\0unreadable\n"
        digest.update(line.encode(errors="surrogateescape"))
    return digest.hexdigest()


def record_image_checks(run_dir: Path) -> None:
    """Write the folders this process found whole into ``run_dir`` for its ranks."""
    if _WHOLE_IMAGE_FOLDERS:
        (Path(run_dir) / CHECKED_IMAGES).write_text(json.dumps(_WHOLE_IMAGE_FOLDERS, indent=1))


def trust_image_checks(run_dir: Path) -> None:
    """Trust the folders the launching process recorded in ``run_dir`` as whole, where
    ``check_image_folder`` finds the same files."""
    try:
        record = json.loads((Path(run_dir) / CHECKED_IMAGES).read_text())
    except (OSError, ValueError):  # none (no image folder) or damaged: check them all
        return
    if isinstance(record, dict):
        _CHECKED_BY_LAUNCHER.update(record)


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


def mindrecord_columns(key: str, value: Any, path: Path) -> Dict[str, dict]:
    """Check that ``path`` is a MindRecord file with its ``.db`` index beside it and
    return its schema (column -> {type, shape})."""
    allowed = f"a folder of MindRecord files written by the Criteo converter ({path.name} "
    try:
        with open(path, "rb") as f:
            prefix = f.read(MINDRECORD_LENGTH.size)
            length = (
                MINDRECORD_LENGTH.unpack(prefix)[0] if len(prefix) == MINDRECORD_LENGTH.size else 0
            )
            size = path.stat().st_size
            raw = f.read(length) if 0 < length < size else b""
        header = json.loads(raw) if raw else None
    except ValueError:  # not JSON, or not UTF-8
        header = None
    if not (
        isinstance(header, dict)
        and all(k in header for k in MINDRECORD_HEADER_KEYS)
        and isinstance(header["header_size"], int)
        and isinstance(header["schema"], list)
    ):
        raise ConfigError(key, value, allowed + "is not a MindRecord file)")
    if size < header["header_size"]:
        raise ConfigError(
            key,
            value,
            allowed + f"is {size} bytes, shorter than its "
            f"{header['header_size']}-byte header region: truncated)",
        )
    index = path.with_name(path.name + ".db")
    magic = b""
    if index.is_file():
        with open(index, "rb") as f:
            magic = f.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        state = "is missing" if not index.exists() else "is not an SQLite index"
        raise ConfigError(key, value, allowed + f"has no index: {index.name} {state})")
    schema: Dict[str, dict] = {}
    for part in header["schema"]:
        schema.update(part.get("schema", {}) if isinstance(part, dict) else {})
    return schema
