"""An ImageNet-style image folder with mindspore.dataset.ImageFolderDataset.

Transforms are the model zoo's ResNet ones (random-resized crop and flip for training;
resize to size/0.875 and center crop for evaluation); both splits index classes by the
training split's sorted folders. Every image is checked first (``check_image_folder``): a
JPEG cut off in its header kills MindSpore's Decode with SIGFPE, printing nothing."""

from pathlib import Path
from typing import Any, Optional, Sequence

import mindspore.dataset as ds

from ms_exp.data.headers import check_image_folder
from ms_exp.data.spec import IMAGE_EXTENSIONS
from ms_exp.data.transforms import normalize

# Fraction of the resized eval image that the center crop keeps (224 of 256).
EVAL_CROP_FRACTION = 0.875


def imagenet(
    split: str,
    path: str,
    train_dir: str = "train",
    eval_dir: str = "val",
    image_size: int = 224,
    num_classes: Optional[int] = None,
    mean: Sequence[float] = (0.485 * 255, 0.456 * 255, 0.406 * 255),
    std: Sequence[float] = (0.229 * 255, 0.224 * 255, 0.225 * 255),
    shuffle: bool = True,
    num_shards: Optional[int] = None,
    shard_id: Optional[int] = None,
    num_parallel_workers: int = 1,
) -> Any:
    """Unbatched samples of ``split`` after the model zoo's transforms. ``num_classes``
    (null: the class folders) is what the network is sized to; labels index the sorted
    folders of ``train_dir``."""
    # Expanded as validation expands it: MindSpore's readers take "~/data" literally.
    root = Path(path).expanduser()
    classes = sorted(p.name for p in (root / train_dir).iterdir() if p.is_dir())
    indexing = {name: index for index, name in enumerate(classes)}
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
