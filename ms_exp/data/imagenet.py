"""An ImageNet-style image folder with mindspore.dataset.ImageFolderDataset.

Transforms are the model zoo's ResNet ones: random-resized crop and flip for training;
resize to size/0.875 and center crop for evaluation. Classes are the sorted folder names of
the training split, and the eval split is read with the same indexing so a class missing
from it does not shift the labels.
"""
from pathlib import Path

import mindspore.dataset as ds

from ms_exp.data.spec import IMAGE_EXTENSIONS, DataSpec, Shard
from ms_exp.data.transforms import normalize_and_batch

# Fraction of the resized eval image that the center crop keeps (224 of 256).
EVAL_CROP_FRACTION = 0.875

def class_folders(split_dir: Path):
    return sorted(p.name for p in Path(split_dir).iterdir() if p.is_dir())


def create_imagenet(cfg, shard: Shard):
    # Expanded as validation expands it: MindSpore's readers take "~/data" literally.
    root = Path(cfg.path).expanduser()
    classes = class_folders(root / cfg.train_dir)
    indexing = {name: index for index, name in enumerate(classes)}
    size = cfg.image_size
    train = ds.ImageFolderDataset(str(root / cfg.train_dir), shuffle=cfg.shuffle,
                                  class_indexing=indexing, extensions=IMAGE_EXTENSIONS,
                                  **shard.reader_args())
    evaluation = ds.ImageFolderDataset(str(root / cfg.eval_dir), shuffle=False,
                                       class_indexing=indexing, extensions=IMAGE_EXTENSIONS)
    train_ops = [ds.vision.RandomCropDecodeResize(size, scale=(0.08, 1.0), ratio=(0.75, 1.333)),
                 ds.vision.RandomHorizontalFlip(prob=0.5)]
    eval_ops = [ds.vision.Decode(), ds.vision.Resize(int(size / EVAL_CROP_FRACTION)),
                ds.vision.CenterCrop(size)]
    spec = DataSpec(image_shape=(3, size, size), num_classes=cfg.num_classes or len(classes),
                    train_size=train.get_dataset_size(), eval_size=evaluation.get_dataset_size())
    return (normalize_and_batch(train, cfg, 1.0, is_train=True, image_ops=train_ops),
            normalize_and_batch(evaluation, cfg, 1.0, is_train=False, image_ops=eval_ops), spec)
