"""Datasets from the ``dataset`` option, built-in or a user's, by one contract.

``target(split="train" | "eval", **its own keys)`` returns numpy arrays ``(x, y)`` or a
``mindspore.dataset`` of unbatched ``(data, label)`` samples; ms_exp then applies batching,
shuffling, workers and each rank's shard, except what the target's signature names
(``batch_size``, ..., ``num_shards`` / ``shard_id``): that it is passed and applies itself."""

from typing import Any, Dict, Optional, Set, Tuple

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ms_exp.config.errors import ConfigError
from ms_exp.config.targets import TARGET, build, load_target, parameters, target_path
from ms_exp.data.options import dataset_option
from ms_exp.data.spec import LABEL_KEYS, LOADER_KEYS, DataSpec, Shard

SHARD_KEYS = ("num_shards", "shard_id")
# A user's option may leave ms_exp's keys out; then these apply (the schemas' defaults).
LOADER_DEFAULTS = dict(batch_size=32, shuffle=True, num_parallel_workers=1, drop_remainder=True)
COLUMNS = ["data", "label"]
# Samples a dataset without random access is shuffled over (Dataset.shuffle's buffer).
SHUFFLE_BUFFER = 10000
RETURNS = (
    "a pair of numpy arrays (x, y), or a mindspore.dataset dataset of unbatched "
    "(data, label) samples"
)


def loader_settings(dataset_cfg: Any) -> Dict[str, Any]:
    """ms_exp's keys of the option, defaults filled in for a user's option that omits them."""
    return {key: dataset_cfg.get(key, default) for key, default in LOADER_DEFAULTS.items()}


def create_datasets(dataset_cfg: DictConfig, shard: Shard = Shard()) -> Tuple[Any, Any, DataSpec]:
    """Return ``(train, eval, spec)``: batched MindSpore datasets and what they hold.
    ``shard``: the part of the training set this rank reads; evaluation reads all."""
    train, train_size, train_labels = _pipeline(dataset_cfg, "train", shard)
    evaluation, eval_size, eval_labels = _pipeline(dataset_cfg, "eval", Shard())
    option = dataset_option(dataset_cfg)
    if option is not None:
        shape, classes = option.declared(dataset_cfg)
        vocab = option.vocab_size(dataset_cfg)
    else:
        shape = _sample_shape(train)
        classes = _class_count(dataset_cfg, train_labels, eval_labels, train)
        vocab = 0
    return train, evaluation, DataSpec(shape, classes, train_size, eval_size, vocab)


def declared_shape(dataset_cfg: Any) -> Tuple[Tuple[int, ...], int]:
    """Sample shape and class count a network is sized to: a built-in option's from its
    config alone (no sample read); a user's from what its target returns."""
    option = dataset_option(dataset_cfg)
    if option is not None:
        return option.declared(dataset_cfg)
    return sampled(dataset_cfg)[:2]


def declared_spec(dataset_cfg: Any) -> DataSpec:
    """The spec a network is built from in the config checks."""
    shape, classes = declared_shape(dataset_cfg)
    option = dataset_option(dataset_cfg)
    return DataSpec(shape, classes, 0, 0, option.vocab_size(dataset_cfg) if option else 0)


# config YAML -> (shape, classes, samples): preflight asks several checks, and every job of
# a sweep.
_SAMPLED = {}


def sampled(dataset_cfg: Any) -> Tuple[Tuple[int, ...], int, int]:
    """Sample shape, class count and training samples (before any shard) of a user's
    option, from what its target returns for the training split (asked once per config)."""
    key = (
        OmegaConf.to_yaml(dataset_cfg) if isinstance(dataset_cfg, DictConfig) else repr(dataset_cfg)
    )
    if key not in _SAMPLED:
        train, size, labels = _pipeline(dataset_cfg, "train", Shard())
        _SAMPLED[key] = (_sample_shape(train), _class_count(dataset_cfg, labels, None, train), size)
    return _SAMPLED[key]


def _pipeline(dataset_cfg: Any, split: str, shard: Shard) -> Tuple[Any, int, Optional[np.ndarray]]:
    """(batched dataset, samples before batching, the labels when they came as an array)."""
    import mindspore.dataset as ds

    settings = loader_settings(dataset_cfg)
    is_train = split == "train"
    params = parameters(load_target("dataset", target_path(dataset_cfg))) or {}
    # ms_exp's keys the target's signature names: it applies them itself.
    applied = {key for key in (*LOADER_KEYS, *SHARD_KEYS) if key in params}
    sharded = shard.num_shards > 1
    passed = {
        "batch_size": settings["batch_size"],
        "shuffle": settings["shuffle"] and is_train,
        "drop_remainder": settings["drop_remainder"] and is_train,
        "num_parallel_workers": settings["num_parallel_workers"],
        "num_shards": shard.num_shards if sharded else None,
        "shard_id": shard.shard_id if sharded else None,
    }
    provided = {"split": split, **{k: v for k, v in passed.items() if k in applied}}
    own = (*LOADER_KEYS, *(k for k in LABEL_KEYS if k not in params))
    data = build(
        "dataset", dataset_cfg, own_keys=own, provided=provided, required=("split",), factories=True
    )
    labels = None
    if (
        isinstance(data, (tuple, list))
        and len(data) == 2
        and all(isinstance(part, np.ndarray) for part in data)
    ):
        x, y = (np.asarray(part) for part in data)
        if len(x) != len(y):
            raise ConfigError(
                f"dataset.{TARGET}",
                target_path(dataset_cfg),
                RETURNS,
                problem=f"returned {len(x)} samples and {len(y)} labels for split={split!r}",
            )
        x = x.astype(np.float32) if x.dtype == np.float64 else x
        y = y.astype(np.int32) if np.issubdtype(y.dtype, np.integer) else y
        labels = y
        ours = "num_shards" not in applied  # else the target sharded its arrays itself
        # One worker whatever num_parallel_workers says: more fork processes that can hang
        # (a fork taken while another thread holds a lock), or run as threads, and either
        # way slice the arrays several times slower (docs/design.md#numpy-slices-forks).
        data = ds.NumpySlicesDataset(
            (x, y),
            column_names=COLUMNS,
            shuffle=passed["shuffle"],
            num_parallel_workers=1,
            num_shards=passed["num_shards"] if ours else None,
            shard_id=passed["shard_id"] if ours else None,
        )
    elif isinstance(data, ds.Dataset):
        data = _sample_order(data, dataset_cfg, applied, passed, shard)
    else:
        raise ConfigError(
            f"dataset.{TARGET}",
            target_path(dataset_cfg),
            RETURNS,
            problem=f"returned a {type(data).__name__} for split={split!r}",
        )
    if "batch_size" in applied:
        option = dataset_option(dataset_cfg)
        if option is not None and option.samples is not None:
            return data, option.samples(dataset_cfg, split, shard.num_shards), labels
        # Whole batches: all ms_exp can see of a target that batches itself.
        return data, data.get_dataset_size() * settings["batch_size"], labels
    size = data.get_dataset_size()
    return (
        data.batch(settings["batch_size"], drop_remainder=passed["drop_remainder"]),
        size,
        labels,
    )


def _sample_order(
    data: Any, dataset_cfg: Any, applied: Set[str], passed: Dict[str, Any], shard: Shard
) -> Any:
    """Shard and shuffle a returned dataset the target did not shard or shuffle itself, by
    replacing the sampler of its source."""
    import mindspore.dataset as ds

    wants_shard = shard.num_shards > 1 and "num_shards" not in applied
    if "shuffle" in applied and not wants_shard:
        return data
    source = data
    while source.children:
        if len(source.children) != 1:
            source = None
            break
        source = source.children[0]
    # A source whose sampler decides what is read. A GeneratorDataset over a generator or
    # iterable has a sampler too, but ignores it: every rank would read everything
    # (docs/design.md#generator-ignores-sampler).
    if isinstance(source, ds.GeneratorDataset):
        random_access = hasattr(source.source, "__getitem__")
    else:
        random_access = isinstance(source, ds.MappableDataset)
    if not random_access:
        if wants_shard:
            raise ConfigError(
                f"dataset.{TARGET}",
                target_path(dataset_cfg),
                "a target returning a dataset over one random-access source, "
                "or one taking num_shards and shard_id, under parallel=data",
                problem="returned a dataset ms_exp cannot shard",
            )
        return data.shuffle(SHUFFLE_BUFFER) if passed["shuffle"] else data
    if wants_shard:
        sampler = ds.DistributedSampler(shard.num_shards, shard.shard_id, shuffle=passed["shuffle"])
    else:
        sampler = ds.RandomSampler() if passed["shuffle"] else ds.SequentialSampler()
    source.use_sampler(sampler)
    return data


def _sample_shape(batches: Any) -> Tuple[int, ...]:
    """One sample's shape: the first column of a batch, without the batch dimension."""
    return tuple(int(d) for d in batches.output_shapes()[0][1:])


def _class_count(
    dataset_cfg: Any,
    train_labels: Optional[np.ndarray],
    eval_labels: Optional[np.ndarray],
    train: Any,
) -> int:
    """The option's ``num_classes``; else the largest label + 1 over the returned arrays,
    or over one pass of the training set's labels."""
    declared = dataset_cfg.get("num_classes")
    if declared is not None:
        return int(declared)
    if train_labels is not None:
        arrays = [a for a in (train_labels, eval_labels) if a is not None and a.size]
        return int(max(a.max() for a in arrays)) + 1
    top = -1
    for row in train.create_tuple_iterator(num_epochs=1, output_numpy=True):
        top = max(top, int(np.max(row[1])))
    return top + 1
