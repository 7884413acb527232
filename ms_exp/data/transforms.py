"""The image pipeline shared by the readers: the tutorial's Rescale / Normalize /
HWC2CHW on images and TypeCast(int32) on labels. Batching is ms_exp's
(``ms_exp.data.build``), as for every dataset option."""

from typing import Any, Sequence

import mindspore as ms
import mindspore.dataset as ds


def normalize(
    dataset: Any,
    mean: Sequence[float],
    std: Sequence[float],
    rescale: float,
    workers: int,
    image_ops: Sequence[Any] = (),
) -> Any:
    """``image_ops`` run first (decode, crop, ...); ``rescale`` maps raw pixels to [0, 1]."""
    image_transforms = list(image_ops)
    if rescale != 1.0:
        image_transforms.append(ds.vision.Rescale(rescale, 0.0))
    image_transforms += [ds.vision.Normalize(mean=tuple(mean), std=tuple(std)), ds.vision.HWC2CHW()]
    dataset = dataset.map(image_transforms, "image", num_parallel_workers=workers)
    return dataset.map(ds.transforms.TypeCast(ms.int32), "label", num_parallel_workers=workers)
