"""Write small datasets in their real on-disk formats, for tests.

Nothing here downloads anything or imports MindSpore: MNIST is written as the four
big-endian idx files ``mindspore.dataset.MnistDataset`` reads, and the image folder as real
JPEG files (Pillow, which MindSpore itself depends on) in the ``train/<class>`` and
``val/<class>`` layout ``ImageFolderDataset`` reads. Criteo-format text (what
``ms_exp.data.criteo_convert`` takes) comes from ``ms_exp.data.criteo_sample``, re-exported
here.
"""

import struct
from pathlib import Path
from typing import Sequence, Tuple

import numpy as np

# The idx format's facts, as ms_exp's header checks hold them (one place for both).
from ms_exp.data.headers import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC, MNIST_SIDE
from ms_exp.data.headers import MNIST_SPLITS as MNIST_FILES


def write_idx_images(path: Path, images: np.ndarray) -> None:
    """``images``: uint8 of shape (count, rows, cols)."""
    count, rows, cols = images.shape
    with open(path, "wb") as f:
        f.write(struct.pack(">IIII", IDX_IMAGES_MAGIC, count, rows, cols))
        f.write(np.ascontiguousarray(images, dtype=np.uint8).tobytes())


def write_idx_labels(path: Path, labels: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack(">II", IDX_LABELS_MAGIC, len(labels)))
        f.write(np.asarray(labels, dtype=np.uint8).tobytes())


def digit_patterns(side: int = MNIST_SIDE) -> np.ndarray:
    """One fixed stroke pattern per class 0..9, float in [0, 1], shape (10, side, side).

    Each class gets a distinct bar or blob: vertical and horizontal bars at different
    positions, the two diagonals, a ring and a filled square, so classes barely overlap."""
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    c = (side - 1) / 2.0
    patterns = np.zeros((10, side, side), np.float32)
    patterns[0] = np.abs(np.hypot(yy - c, xx - c) - 9) < 2.0  # ring
    patterns[1] = np.abs(xx - c) < 2.0  # centre vertical
    patterns[2] = np.abs(yy - c) < 2.0  # centre horizontal
    patterns[3] = np.abs(yy - xx) < 2.0  # main diagonal
    patterns[4] = np.abs(yy + xx - (side - 1)) < 2.0  # anti-diagonal
    patterns[5] = np.abs(xx - 6) < 2.0  # left vertical
    patterns[6] = np.abs(xx - (side - 7)) < 2.0  # right vertical
    patterns[7] = np.abs(yy - 6) < 2.0  # top horizontal
    patterns[8] = np.abs(yy - (side - 7)) < 2.0  # bottom horizontal
    patterns[9] = (np.abs(yy - c) < 5) & (np.abs(xx - c) < 5)  # centre blob
    return patterns


def mnist_like(count: int, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """``count`` uint8 28x28 images and their labels: pattern of the label, jittered by a
    pixel or two, plus noise."""
    patterns = digit_patterns()
    labels = (np.arange(count) % 10).astype(np.uint8)  # every class present
    rng.shuffle(labels)
    images = np.empty((count, MNIST_SIDE, MNIST_SIDE), np.float32)
    for i, label in enumerate(labels):
        shift = rng.integers(-2, 3, size=2)
        images[i] = np.roll(patterns[label], tuple(shift), axis=(0, 1))
    images = 200.0 * images + rng.normal(30.0, 25.0, size=images.shape)
    return np.clip(images, 0, 255).astype(np.uint8), labels


def write_mnist(root: Path, train: int = 96, test: int = 32, seed: int = 0) -> Path:
    """Write the four MNIST idx files into ``root`` (created) and return ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for usage, count in (("train", train), ("test", test)):
        images, labels = mnist_like(count, rng)
        image_file, label_file = MNIST_FILES[usage]
        write_idx_images(root / image_file, images)
        write_idx_labels(root / label_file, labels)
    return root


def write_image_folder(
    root: Path,
    classes: Sequence[str] = ("cat", "dog", "fox"),
    per_class_train: int = 8,
    per_class_val: int = 4,
    size: int = 40,
    seed: int = 0,
) -> Path:
    """Write ``<root>/{train,val}/<class>/*.JPEG`` RGB images of ``size`` x ``size``: each
    class a distinct base colour plus noise. Returns ``root``."""
    from PIL import Image

    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class_train), ("val", per_class_val)):
        for index, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            base = np.zeros(3, np.float32)
            base[index % 3] = 200.0
            for i in range(count):
                pixels = base + rng.normal(30.0, 20.0, size=(size, size, 3))
                image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
                image.save(folder / f"{name}_{split}_{i:04d}.JPEG", format="JPEG", quality=90)
    return root


# --- Criteo ---------------------------------------------------------------------------

# The Criteo-format generator lives in the package (``python -m ms_exp.data.criteo_sample``);
# tests import it from here as before.
from ms_exp.data.criteo_sample import (  # noqa: E402,F401
    CRITEO_MALFORMED_KINDS,
    criteo_lines,
    malformed_criteo_line,
    write_criteo_text,
)
