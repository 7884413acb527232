"""The default dataset: UCI handwritten digits, shipped inside scikit-learn.

1797 grey 8x8 images with 17 intensity levels (0..16). A stratified split, fixed by
``split_seed``, holds out ``eval_fraction`` of them for evaluation.
"""
import mindspore.dataset as ds
import numpy as np

from ms_exp.data.spec import DataSpec, Shard
from ms_exp.data.transforms import normalize_and_batch

MAX_PIXEL = 16.0


def split_digits(eval_fraction: float, split_seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32)[..., np.newaxis]  # HWC
    labels = digits.target.astype(np.int32)
    return train_test_split(images, labels, test_size=eval_fraction,
                            random_state=split_seed, stratify=labels)


def create_digits(cfg, shard: Shard):
    train_x, eval_x, train_y, eval_y = split_digits(cfg.eval_fraction, cfg.split_seed)
    train = ds.NumpySlicesDataset({"image": train_x, "label": train_y}, shuffle=cfg.shuffle,
                                  **shard.reader_args())
    evaluation = ds.NumpySlicesDataset({"image": eval_x, "label": eval_y}, shuffle=False)
    spec = DataSpec(image_shape=(1, 8, 8), num_classes=10,
                    train_size=train.get_dataset_size(), eval_size=len(eval_y))
    return (normalize_and_batch(train, cfg, 1 / MAX_PIXEL, is_train=True),
            normalize_and_batch(evaluation, cfg, 1 / MAX_PIXEL, is_train=False), spec)
