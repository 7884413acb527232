"""An ImageNet-style image folder with mindspore.dataset.ImageFolderDataset.

Transforms are the model zoo's ResNet ones: random-resized crop and flip for training;
resize to size/0.875 and center crop for evaluation. Classes are the sorted folder names of
the training split, and the eval split is read with the same indexing so a class missing
from it does not shift the labels.

Every image of the split is checked (header and end, ``headers.check_image_folder``) before
the reader is built: a JPEG cut off inside its header makes MindSpore's Decode die with
SIGFPE mid-epoch, printing nothing; here it is refused with its path before training.
"""

from pathlib import Path

import mindspore.dataset as ds

from ms_exp.data.headers import check_image_folder
from ms_exp.data.spec import IMAGE_EXTENSIONS
from ms_exp.data.transforms import normalize

# Fraction of the resized eval image that the center crop keeps (224 of 256).
EVAL_CROP_FRACTION = 0.875


def class_folders(split_dir: Path):
    return sorted(p.name for p in Path(split_dir).iterdir() if p.is_dir())


def imagenet(
    split: str,
    path: str,
    train_dir: str = "train",
    eval_dir: str = "val",
    image_size: int = 224,
    num_classes=None,
    mean=(0.485 * 255, 0.456 * 255, 0.406 * 255),
    std=(0.229 * 255, 0.224 * 255, 0.225 * 255),
    shuffle: bool = True,
    num_shards=None,
    shard_id=None,
    num_parallel_workers: int = 1,
):
    """Unbatched samples of ``split`` after the model zoo's transforms. ``num_classes``
    (null: the class folders) is what the network is sized to; labels index the sorted
    folders of ``train_dir``."""
    # Expanded as validation expands it: MindSpore's readers take "~/data" literally.
    root = Path(path).expanduser()
    indexing = {name: index for index, name in enumerate(class_folders(root / train_dir))}
    size = image_size
    key, name = (
        ("dataset.train_dir", train_dir) if split == "train" else ("dataset.eval_dir", eval_dir)
    )
    folder = root / name
    check_image_folder(key, name, folder, IMAGE_EXTENSIONS)
    if split == "train":
        ops = [
            ds.vision.RandomCropDecodeResize(size, scale=(0.08, 1.0), ratio=(0.75, 1.333)),
            ds.vision.RandomHorizontalFlip(prob=0.5),
        ]
    else:
        ops = [
            ds.vision.Decode(),
            ds.vision.Resize(int(size / EVAL_CROP_FRACTION)),
            ds.vision.CenterCrop(size),
        ]
    reader = ds.ImageFolderDataset(
        str(folder),
        shuffle=shuffle,
        class_indexing=indexing,
        extensions=IMAGE_EXTENSIONS,
        num_shards=num_shards,
        shard_id=shard_id,
    )
    return normalize(reader, mean, std, 1.0, num_parallel_workers, image_ops=ops)
