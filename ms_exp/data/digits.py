"""The default dataset: UCI handwritten digits, shipped inside scikit-learn.

1797 grey 8x8 images (0..16); a stratified split, fixed by ``split_seed``, holds out
``eval_fraction`` of them. Returned as arrays, the tutorial's transforms done in numpy."""

from typing import Sequence, Tuple

import numpy as np

MAX_PIXEL = 16.0


def digits(
    split: str,
    eval_fraction: float = 0.2,
    split_seed: int = 0,
    mean: Sequence[float] = (0.3053,),
    std: Sequence[float] = (0.3760,),
) -> Tuple[np.ndarray, np.ndarray]:
    """``(images, labels)`` of ``split``: float32 [N, 1, 8, 8] normalized, int32 [N]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    all_images = data.images.astype(np.float32)[..., np.newaxis]  # HWC
    all_labels = data.target.astype(np.int32)
    train_x, eval_x, train_y, eval_y = train_test_split(
        all_images,
        all_labels,
        test_size=eval_fraction,
        random_state=split_seed,
        stratify=all_labels,
    )
    images, labels = (train_x, train_y) if split == "train" else (eval_x, eval_y)
    scaled = images / np.float32(MAX_PIXEL)
    normalized = (scaled - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(normalized.transpose(0, 3, 1, 2)), labels
