"""Datasets by name (the ``dataset`` group): train and eval pipelines plus their DataSpec."""
from ms_exp.data.spec import DataSpec, Shard


def create_datasets(dataset_cfg, shard: Shard = Shard()):
    """Return ``(train, eval, spec)``: batched MindSpore datasets and what they hold."""
    name = dataset_cfg.name
    if name == "digits":
        from ms_exp.data.digits import create_digits as create
    elif name == "mnist":
        from ms_exp.data.mnist import create_mnist as create
    elif name == "imagenet":
        from ms_exp.data.imagenet import create_imagenet as create
    elif name == "synthetic":
        from ms_exp.data.synthetic import create_synthetic as create
    elif name == "criteo":
        from ms_exp.data.criteo import create_criteo as create
    else:
        raise ValueError(f"dataset.name={name!r}: no such dataset")
    return create(dataset_cfg, shard)


__all__ = ["DataSpec", "Shard", "create_datasets"]
