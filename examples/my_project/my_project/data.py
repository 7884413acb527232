"""The project's data: Gaussian blobs, one centre per class, as numpy arrays.

ms_exp calls ``blobs(split="train")`` and ``blobs(split="eval")`` with the option's own
keys, and does the batching, shuffling and sharding itself.
"""

import numpy as np


def blobs(
    split: str,
    samples: int = 512,
    features: int = 16,
    classes: int = 4,
    spread: float = 1.0,
    seed: int = 0,
):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 0.6, size=(classes, features))
    rng = np.random.default_rng(seed + (1 if split == "train" else 2))
    count = samples if split == "train" else max(samples // 4, classes)
    labels = rng.integers(0, classes, size=count)
    x = centres[labels] + rng.normal(0.0, spread, size=(count, features))
    return x.astype(np.float32), labels.astype(np.int32)
