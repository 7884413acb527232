"""The ``dataset`` group's built-in options: their ``_target_`` and what ms_exp knows of
them without reading a sample (the shape and class count a network is sized to, what the
samples are, Criteo's vocabulary). A user's option (any other ``_target_``) has no entry.
No MindSpore import: the config checks read these before MindSpore starts."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from omegaconf import DictConfig

from ms_exp.config.schema import builtin_target
from ms_exp.config.targets import component_name, target_path
from ms_exp.data.criteo_format import FIELD_SIZE, read_meta
from ms_exp.data.spec import CRITEO_INPUTS, IMAGES


@dataclass(frozen=True)
class DatasetOption:
    name: str
    target: str
    # (dataset_cfg) -> ((C, H, W) or (fields,), class count), read from the config alone
    declared: Callable[[Any], Tuple[Tuple[int, ...], int]]
    inputs: str = IMAGES
    vocab_size: Callable[[Any], int] = lambda cfg: 0
    # (dataset_cfg, split, num_shards) -> samples one rank reads, for a target that batches
    # itself (ms_exp sees only its batches); None: counted from what the target returns
    samples: Optional[Callable[[Any, str, int], int]] = None
    # The key that sets the sample shape (None: fixed by the data)
    shape_key: Optional[str] = None
    # (dataset_cfg) -> {key: samples} of the samples the target makes in memory, as float32
    # arrays of the declared shape; None: read from files as the batches are
    in_memory: Optional[Callable[[Any], Dict[str, int]]] = None


def _imagenet(cfg: DictConfig) -> Tuple[Tuple[int, ...], int]:
    size = cfg.image_size
    train = Path(cfg.path).expanduser() / cfg.train_dir
    classes = cfg.num_classes or sum(p.is_dir() for p in train.iterdir())
    return (3, size, size), classes


def _criteo_samples(cfg: DictConfig, split: str, num_shards: int) -> int:
    """Whole records: MindDataset gives every shard ceil(records / shards) of them."""
    meta = read_meta(cfg.path)
    return -(-meta[f"{split}_records"] // num_shards) * meta["samples_per_record"]


DATASET_OPTIONS = {
    option.name: option
    for option in (
        DatasetOption("digits", builtin_target("dataset", "digits"), lambda cfg: ((1, 8, 8), 10)),
        DatasetOption("mnist", builtin_target("dataset", "mnist"), lambda cfg: ((1, 28, 28), 10)),
        DatasetOption(
            "imagenet",
            builtin_target("dataset", "imagenet"),
            _imagenet,
            shape_key="dataset.image_size",
        ),
        DatasetOption(
            "synthetic",
            builtin_target("dataset", "synthetic"),
            lambda cfg: (tuple(cfg.image_shape), cfg.num_classes),
            shape_key="dataset.image_shape",
            in_memory=lambda cfg: {
                "dataset.num_samples": cfg.num_samples,
                "dataset.num_eval_samples": cfg.num_eval_samples,
            },
        ),
        DatasetOption(
            "criteo",
            builtin_target("dataset", "criteo"),
            lambda cfg: ((FIELD_SIZE,), 2),
            inputs=CRITEO_INPUTS,
            vocab_size=lambda cfg: int(read_meta(cfg.path)["vocab_size"]),
            samples=_criteo_samples,
        ),
    )
}
_BY_TARGET: Dict[Optional[str], DatasetOption] = {  # None: a user's option, not here
    option.target: option for option in DATASET_OPTIONS.values()
}


def dataset_option(dataset_cfg: Any) -> Optional[DatasetOption]:
    """The built-in option whose target ``dataset_cfg`` names; None for a user's."""
    return _BY_TARGET.get(target_path(dataset_cfg))


def dataset_name(dataset_cfg: Any) -> str:
    return component_name(dataset_cfg)


def dataset_inputs(dataset_cfg: Any) -> Optional[str]:
    """What the samples are; None when the option does not declare it (a user's)."""
    option = dataset_option(dataset_cfg)
    return option.inputs if option else None
