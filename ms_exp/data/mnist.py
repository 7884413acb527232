"""MNIST from its idx files with mindspore.dataset.MnistDataset, as the tutorials read it;
the reader shuffles and shards itself. The idx headers are checked again here (16 bytes and
a stat a file), so a rank or an evaluation names a file changed since the config checks."""

from pathlib import Path
from typing import Any, Optional, Sequence

import mindspore.dataset as ds

from ms_exp.data.headers import mnist_train_samples
from ms_exp.data.transforms import normalize


def mnist(
    split: str,
    path: str,
    mean: Sequence[float] = (0.1307,),
    std: Sequence[float] = (0.3081,),
    shuffle: bool = True,
    num_shards: Optional[int] = None,
    shard_id: Optional[int] = None,
    num_parallel_workers: int = 1,
) -> Any:
    # Expanded as validation expands it: MindSpore's readers take "~/mnist" literally.
    root = str(Path(path).expanduser())
    mnist_train_samples("dataset.path", path, Path(root))
    reader = ds.MnistDataset(
        root,
        usage="train" if split == "train" else "test",
        shuffle=shuffle,
        num_shards=num_shards,
        shard_id=shard_id,
    )
    return normalize(reader, mean, std, 1 / 255.0, num_parallel_workers)
