"""MNIST from its idx files with mindspore.dataset.MnistDataset, as the tutorials read it."""
from pathlib import Path

import mindspore.dataset as ds

from ms_exp.data.spec import DataSpec, Shard
from ms_exp.data.transforms import normalize_and_batch


def create_mnist(cfg, shard: Shard):
    # Expanded as validation expands it: MindSpore's readers take "~/mnist" literally.
    root = str(Path(cfg.path).expanduser())
    train = ds.MnistDataset(root, usage="train", shuffle=cfg.shuffle, **shard.reader_args())
    evaluation = ds.MnistDataset(root, usage="test", shuffle=False)
    spec = DataSpec(image_shape=(1, 28, 28), num_classes=10,
                    train_size=train.get_dataset_size(), eval_size=evaluation.get_dataset_size())
    return (normalize_and_batch(train, cfg, 1 / 255.0, is_train=True),
            normalize_and_batch(evaluation, cfg, 1 / 255.0, is_train=False), spec)
