"""MNIST from its idx files with mindspore.dataset.MnistDataset, as the tutorials read it:
unbatched samples after the tutorial's transforms, the reader itself shuffling and sharding
(its signature names ``shuffle``, ``num_shards`` and ``shard_id``, so ms_exp passes them).

The idx headers and sizes are checked again when the dataset is built (16 bytes and a stat
a file), so a rank, an evaluation or a file changed since the config checks names the
broken file rather than failing inside MindSpore's reader."""

from pathlib import Path

import mindspore.dataset as ds

from ms_exp.data.headers import mnist_train_samples
from ms_exp.data.transforms import normalize


def mnist(
    split: str,
    path: str,
    mean=(0.1307,),
    std=(0.3081,),
    shuffle: bool = True,
    num_shards=None,
    shard_id=None,
    num_parallel_workers: int = 1,
):
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
