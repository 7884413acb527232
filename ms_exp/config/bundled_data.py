"""The UCI handwritten digits that scikit-learn ships, read as ``load_digits()`` reads them
but without importing scikit-learn (``sklearn.datasets`` costs a job about 2 s of start-up,
docs/design.md#digits-without-importing-sklearn). Here, below both, because the digits
option (data) reads the images and the run's provenance (tracking) fingerprints them."""

import gzip
import importlib.util
from pathlib import Path
from typing import Tuple

import numpy as np


def load_digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
    """``load_digits()``'s ``images`` (float64 [1797, 8, 8]) and ``target`` (int), equal
    in values and types (tests/test_datasets.py compares them)."""
    spec = importlib.util.find_spec("sklearn")  # locates the package without running it
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt", encoding="utf-8") as file:
        data = np.loadtxt(file, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
