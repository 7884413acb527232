"""What a network needs to know about its data, and which shard of it a rank reads."""
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

from ms_exp.data.criteo_format import FIELD_SIZE

# What a dataset's samples are, so the checks can pair datasets with the models that read
# them (ms_exp.models.option.ModelOption.inputs).
IMAGES = "images"
CRITEO_INPUTS = "Criteo ids and weights"
DATASET_INPUTS = {"criteo": CRITEO_INPUTS}  # every other dataset: IMAGES

# Files ImageFolderDataset reads (it matches extensions case-sensitively). Without the list
# it reads every file, and one stray .DS_Store or README in a class folder stops training
# with "Decode: image decode failed".
IMAGE_EXTENSIONS = [f".{case(ext)}" for ext in ("jpeg", "jpg", "png", "bmp")
                    for case in (str.lower, str.upper, str.title)]


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

    def reader_args(self) -> dict:
        if self.num_shards == 1:
            return {}
        return {"num_shards": self.num_shards, "shard_id": self.shard_id}


def declared_shape(dataset_cfg) -> Tuple[Tuple[int, ...], int]:
    """(C, H, W) (or (fields,) for Criteo) and class count of a dataset as its config
    declares them, without reading any sample."""
    name = dataset_cfg.name
    if name == "digits":
        return (1, 8, 8), 10
    if name == "mnist":
        return (1, 28, 28), 10
    if name == "imagenet":
        size = dataset_cfg.image_size
        train = Path(dataset_cfg.path).expanduser() / dataset_cfg.train_dir
        classes = dataset_cfg.num_classes or sum(p.is_dir() for p in train.iterdir())
        return (3, size, size), classes
    if name == "criteo":
        return (FIELD_SIZE,), 2
    return tuple(dataset_cfg.image_shape), dataset_cfg.num_classes


def declared_spec(dataset_cfg) -> DataSpec:
    """The spec a network is built from in the config checks, before any sample is read."""
    shape, classes = declared_shape(dataset_cfg)
    return DataSpec(shape, classes, 0, 0)


def dataset_inputs(dataset_cfg) -> str:
    return DATASET_INPUTS.get(dataset_cfg.name, IMAGES)
