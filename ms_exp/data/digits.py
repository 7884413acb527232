"""The default dataset: UCI handwritten digits, shipped inside scikit-learn.

1797 grey 8x8 images (0..16); a stratified split, fixed by ``split_seed``, holds out
``eval_fraction`` of them. Returned as arrays, the tutorial's transforms done in numpy.

Split here, equal to ``train_test_split(..., stratify=labels)`` index for index
(tests/test_datasets.py compares them): importing ``sklearn.model_selection`` costs a job
about 2 s of start-up (docs/design.md#digits-without-importing-sklearn)."""

import math
from typing import List, Sequence, Tuple

import numpy as np

from ms_exp.config.bundled_data import load_digits_arrays

MAX_PIXEL = 16.0


def _apportion(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of ``draws`` each class gets: its share rounded down, the rest to the largest
    remainders, ties broken at random (scikit-learn's ``_approximate_mode``)."""
    exact = counts / counts.sum() * draws
    taken = np.floor(exact)
    missing = int(draws - taken.sum())
    remainder = exact - taken
    for value in np.sort(np.unique(remainder))[::-1]:
        if missing == 0:
            break
        (tied,) = np.where(remainder == value)
        chosen = rng.choice(tied, size=min(len(tied), missing), replace=False)
        taken[chosen] += 1
        missing -= len(chosen)
    return taken.astype(int)


def stratified_split(
    labels: np.ndarray, eval_fraction: float, seed: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Train and eval indices, as ``train_test_split(test_size=eval_fraction,
    random_state=seed, stratify=labels)`` draws them (StratifiedShuffleSplit)."""
    n_eval = math.ceil(eval_fraction * len(labels))
    n_train = len(labels) - n_eval
    _, inverse = np.unique(labels, return_inverse=True)
    counts = np.bincount(inverse)
    if min(n_train, n_eval) < len(counts):
        raise ValueError(
            f"dataset.eval_fraction={eval_fraction} leaves {n_train} training and {n_eval} "
            f"evaluation samples; each needs at least one of each of the {len(counts)} classes"
        )
    by_class = np.split(np.argsort(inverse, kind="mergesort"), np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    train_counts = _apportion(counts, n_train, rng)
    eval_counts = _apportion(counts - train_counts, n_eval, rng)
    train: List[int] = []
    held_out: List[int] = []
    for members, n, m in zip(by_class, train_counts, eval_counts):
        shuffled = members.take(rng.permutation(len(members)), mode="clip")
        train.extend(shuffled[:n])
        held_out.extend(shuffled[n : n + m])
    return rng.permutation(train), rng.permutation(held_out)


def digits(
    split: str,
    eval_fraction: float = 0.2,
    split_seed: int = 0,
    mean: Sequence[float] = (0.3053,),
    std: Sequence[float] = (0.3760,),
) -> Tuple[np.ndarray, np.ndarray]:
    """``(images, labels)`` of ``split``: float32 [N, 1, 8, 8] normalized, int32 [N]."""
    all_images, all_labels = load_digits_arrays()
    train, held_out = stratified_split(all_labels, eval_fraction, split_seed)
    chosen = train if split == "train" else held_out
    images = all_images[chosen].astype(np.float32)[..., np.newaxis]  # HWC
    labels = all_labels[chosen].astype(np.int32)
    scaled = images / np.float32(MAX_PIXEL)
    normalized = (scaled - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(normalized.transpose(0, 3, 1, 2)), labels
