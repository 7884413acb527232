"""The image pipeline shared by the readers: the tutorial's Rescale / Normalize /
HWC2CHW on images and TypeCast(int32) on labels, then batching."""
import mindspore as ms
import mindspore.dataset as ds


def normalize_and_batch(dataset, cfg, rescale: float, is_train: bool, image_ops=()):
    """``image_ops`` run first (decode, crop, ...); ``rescale`` maps raw pixels to [0, 1]."""
    image_transforms = list(image_ops)
    if rescale != 1.0:
        image_transforms.append(ds.vision.Rescale(rescale, 0.0))
    image_transforms += [
        ds.vision.Normalize(mean=tuple(cfg.mean), std=tuple(cfg.std)),
        ds.vision.HWC2CHW(),
    ]
    workers = cfg.num_parallel_workers
    dataset = dataset.map(image_transforms, "image", num_parallel_workers=workers)
    dataset = dataset.map(ds.transforms.TypeCast(ms.int32), "label", num_parallel_workers=workers)
    return batch(dataset, cfg, is_train)


def batch(dataset, cfg, is_train: bool):
    # Evaluation sees every sample: only the training set drops a ragged last batch.
    return dataset.batch(cfg.batch_size, drop_remainder=cfg.drop_remainder and is_train)
