"""The default dataset: UCI handwritten digits, shipped inside scikit-learn.

1797 grey 8x8 images with 17 intensity levels (0..16). A stratified split, fixed by
``split_seed``, holds out ``eval_fraction`` of them for evaluation. Returned as arrays
(the ``dataset`` contract, ``ms_exp.data.build``): the tutorial's Rescale / Normalize /
HWC2CHW done in numpy, since the whole set is 1797 tiny images.
"""

import numpy as np

MAX_PIXEL = 16.0


def split_digits(eval_fraction: float, split_seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32)[..., np.newaxis]  # HWC
    labels = digits.target.astype(np.int32)
    return train_test_split(
        images, labels, test_size=eval_fraction, random_state=split_seed, stratify=labels
    )


def digits(
    split: str, eval_fraction: float = 0.2, split_seed: int = 0, mean=(0.3053,), std=(0.3760,)
):
    """``(images, labels)`` of ``split``: float32 [N, 1, 8, 8] normalized, int32 [N]."""
    train_x, eval_x, train_y, eval_y = split_digits(eval_fraction, split_seed)
    images, labels = (train_x, train_y) if split == "train" else (eval_x, eval_y)
    mean = np.asarray(mean, np.float32)
    std = np.asarray(std, np.float32)
    normalized = (images / np.float32(MAX_PIXEL) - mean) / std
    return np.ascontiguousarray(normalized.transpose(0, 3, 1, 2)), labels
