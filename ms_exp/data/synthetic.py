"""Generated classification data of any shape: a random prototype image per class plus
Gaussian noise. Learnable (noise below the prototypes' spread), needs no files, and is
the same for every run with the same ``data_seed``. Returned as arrays (the ``dataset``
contract, ``ms_exp.data.build``)."""

from typing import Sequence, Tuple

import numpy as np


def make_samples(
    count: int,
    num_classes: int,
    image_shape: Sequence[int],
    noise: float,
    rng: np.random.Generator,
    prototypes: np.ndarray,
) -> Tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, num_classes, size=count).astype(np.int32)
    shape = (count, *image_shape)
    return prototypes[labels] + rng.normal(0.0, noise, size=shape).astype(np.float32), labels


def synthetic(
    split: str,
    num_samples: int = 1024,
    num_eval_samples: int = 256,
    image_shape: Sequence[int] = (1, 28, 28),
    num_classes: int = 10,
    noise: float = 1.0,
    data_seed: int = 0,
) -> Tuple[np.ndarray, np.ndarray]:
    """``(images, labels)`` of ``split``: float32 [N, *image_shape], int32 [N]. Both splits
    come from one generator, so the eval samples share the training prototypes."""
    rng = np.random.default_rng(data_seed)
    shape = tuple(image_shape)
    prototypes = rng.normal(0.0, 1.0, size=(num_classes, *shape)).astype(np.float32)
    train = make_samples(num_samples, num_classes, shape, noise, rng, prototypes)
    if split == "train":
        return train
    return make_samples(num_eval_samples, num_classes, shape, noise, rng, prototypes)
