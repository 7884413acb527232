"""What a network needs to know about its data, which shard of it a rank reads, and which
keys of a ``dataset`` option are ms_exp's rather than its target's."""

from dataclasses import dataclass
from typing import Tuple

# What a dataset's samples are, so the checks can pair datasets with the models that read
# them (ms_exp.models.option.ModelOption.inputs). None: not declared (a user's option).
IMAGES = "images"
CRITEO_INPUTS = "Criteo ids and weights"

# Keys of a dataset option that ms_exp applies to what its target returns (batching,
# shuffling, each rank's shard); a target whose signature names one of them, or
# num_shards / shard_id, gets it and applies it itself, as MindSpore's readers do.
LOADER_KEYS = ("batch_size", "shuffle", "num_parallel_workers", "drop_remainder")
# ms_exp's labels: the option's name, and the class count when the data cannot tell.
LABEL_KEYS = ("name", "num_classes")

# Files ImageFolderDataset reads (it matches extensions case-sensitively). Without the list
# it reads every file, and one stray .DS_Store or README in a class folder stops training
# with "Decode: image decode failed".
IMAGE_EXTENSIONS = [
    f".{case(ext)}"
    for ext in ("jpeg", "jpg", "png", "bmp")
    for case in (str.lower, str.upper, str.title)
]


@dataclass(frozen=True)
class DataSpec:
    image_shape: Tuple[int, ...]  # one sample as the network sees it: (C, H, W), or (fields,)
    num_classes: int
    train_size: int  # samples this rank trains on per epoch, before batching
    eval_size: int
    vocab_size: int = 0  # rows of the id space of categorical data (Criteo), else 0


@dataclass(frozen=True)
class Shard:
    """``num_shards``/``shard_id`` of MindSpore's dataset readers: one shard per rank."""

    num_shards: int = 1
    shard_id: int = 0
