"""Generated classification data of any shape: a random prototype image per class plus
Gaussian noise. Learnable (noise below the prototypes' spread), needs no files, and is
the same for every run with the same ``data_seed``."""
import mindspore as ms
import mindspore.dataset as ds
import numpy as np

from ms_exp.data.spec import DataSpec, Shard
from ms_exp.data.transforms import batch


def make_samples(cfg, count: int, rng: np.random.Generator, prototypes: np.ndarray):
    labels = rng.integers(0, cfg.num_classes, size=count).astype(np.int32)
    noise = rng.normal(0.0, cfg.noise, size=(count, *cfg.image_shape)).astype(np.float32)
    return prototypes[labels] + noise, labels


def create_synthetic(cfg, shard: Shard):
    rng = np.random.default_rng(cfg.data_seed)
    shape = tuple(cfg.image_shape)
    prototypes = rng.normal(0.0, 1.0, size=(cfg.num_classes, *shape)).astype(np.float32)
    train_x, train_y = make_samples(cfg, cfg.num_samples, rng, prototypes)
    eval_x, eval_y = make_samples(cfg, cfg.num_eval_samples, rng, prototypes)
    train = ds.NumpySlicesDataset({"image": train_x, "label": train_y}, shuffle=cfg.shuffle,
                                  **shard.reader_args())
    evaluation = ds.NumpySlicesDataset({"image": eval_x, "label": eval_y}, shuffle=False)
    spec = DataSpec(image_shape=shape, num_classes=cfg.num_classes,
                    train_size=train.get_dataset_size(), eval_size=cfg.num_eval_samples)
    cast = ds.transforms.TypeCast(ms.int32)
    train = train.map(cast, "label")
    evaluation = evaluation.map(cast, "label")
    return batch(train, cfg, is_train=True), batch(evaluation, cfg, is_train=False), spec
