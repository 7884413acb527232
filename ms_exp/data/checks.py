"""Checks of the ``dataset`` group, from file headers only (no sample is decoded): MNIST's
idx files, image folders, the Criteo converter's output, and batches that fit the split."""

import math
import multiprocessing
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from ms_exp.config.errors import ConfigError, positive, require
from ms_exp.data.build import loader_settings, sampled
from ms_exp.data.criteo import check_record_file, samples_per_record
from ms_exp.data.criteo_format import COLUMNS as CRITEO_COLUMNS
from ms_exp.data.criteo_format import EVAL_FILE, META_FILE, RECONVERT, TRAIN_FILE, read_meta
from ms_exp.data.headers import (
    MNIST_SPLITS,
    check_image_folder,
    count_files,
    first_file,
    image_signature,
    mindrecord_columns,
    mnist_train_samples,
)
from ms_exp.data.options import dataset_name, dataset_option
from ms_exp.data.spec import IMAGE_EXTENSIONS

MNIST_FILES = [name for pair in MNIST_SPLITS.values() for name in pair]


def existing_dir(key: str, value: Optional[str]) -> Path:
    if value is None:
        raise ConfigError(
            key, value, "a folder that exists (set it, or the DATA_PATH environment variable)"
        )
    path = Path(value).expanduser()
    require(path.is_dir(), key, value, "a folder that exists")
    return path


# scikit-learn's bundled handwritten digits (dataset=digits) hold this many images.
DIGITS_SAMPLES = 1797


def validate_dataset(cfg: DictConfig) -> None:
    option = dataset_option(cfg)
    if option is None:
        validate_user_dataset(cfg)
        return
    positive("dataset", cfg, "batch_size", "num_parallel_workers")
    validate_workers(cfg.num_parallel_workers)
    name = option.name
    if name == "digits":
        require(
            0 < cfg.eval_fraction < 1,
            "dataset.eval_fraction",
            cfg.eval_fraction,
            "a fraction between 0 and 1 (exclusive)",
        )
    elif name == "mnist":
        root = existing_dir("dataset.path", cfg.path)
        missing = [f for f in MNIST_FILES if not (root / f).is_file()]
        require(
            not missing,
            "dataset.path",
            cfg.path,
            f"a folder with the MNIST idx files ({', '.join(missing)} missing)",
        )
        mnist_train_samples("dataset.path", cfg.path, root)
    elif name == "imagenet":
        validate_image_folder(cfg)
    elif name == "criteo":
        validate_criteo(cfg)
    elif name == "synthetic":
        positive("dataset", cfg, "num_samples", "num_eval_samples")
        require(cfg.num_classes >= 2, "dataset.num_classes", cfg.num_classes, "an integer >= 2")
        shape = list(cfg.image_shape)
        require(
            len(shape) == 3 and all(d >= 1 for d in shape),
            "dataset.image_shape",
            shape,
            "three positive integers [channels, height, width]",
        )
        require(cfg.noise >= 0, "dataset.noise", cfg.noise, "a number >= 0")
    if "mean" in cfg:
        require(
            len(cfg.mean) == len(cfg.std) and all(s > 0 for s in cfg.std),
            "dataset.std",
            list(cfg.std),
            f"{len(cfg.mean)} positive numbers, one per mean",
        )


def validate_workers(workers: int) -> None:
    """mindspore.dataset refuses more parallel workers than this machine has CPUs
    (``check_num_parallel_workers``: "num_parallel_workers exceeds the boundary between 1
    and <cpu_count()>"), when the pipeline is built in the job."""
    cpus = multiprocessing.cpu_count()
    require(
        workers <= cpus,
        "dataset.num_parallel_workers",
        workers,
        f"an integer from 1 to {cpus}, the CPUs of this machine (mindspore.dataset "
        "refuses more workers than CPUs)",
    )


def validate_user_dataset(cfg: DictConfig) -> None:
    """A user's option: ms_exp's keys in range, then its target called for the training
    split (it imports, takes these arguments and returns samples ms_exp can batch)."""
    settings = loader_settings(cfg)
    positive("dataset", settings, "batch_size", "num_parallel_workers")
    validate_workers(settings["num_parallel_workers"])
    for key in ("shuffle", "drop_remainder"):
        require(isinstance(settings[key], bool), f"dataset.{key}", settings[key], "true or false")
    classes = cfg.get("num_classes")
    require(
        classes is None or (isinstance(classes, int) and classes >= 1),
        "dataset.num_classes",
        classes,
        "null (the largest label + 1) or an integer >= 1",
    )
    sampled(cfg)


def validate_image_folder(cfg: DictConfig) -> None:
    root = existing_dir("dataset.path", cfg.path)
    folders = 0
    for key in ("train_dir", "eval_dir"):
        split = root / cfg[key]
        classes = [p for p in split.iterdir() if p.is_dir()] if split.is_dir() else []
        require(
            bool(classes), f"dataset.{key}", cfg[key], f"a folder of class folders under {root}"
        )
        images = [f for f in (first_file(c, IMAGE_EXTENSIONS) for c in classes) if f]
        require(
            bool(images),
            f"dataset.{key}",
            cfg[key],
            f"class folders holding images ({', '.join(IMAGE_EXTENSIONS[:4])}, ...)",
        )
        # One file per class: enough to catch a folder of renamed or broken files, which
        # ImageFolderDataset would stop on mid-epoch ("Decode: image decode failed").
        for image in images:
            require(
                image_signature(image) is not None,
                f"dataset.{key}",
                cfg[key],
                f"class folders of JPEG, PNG or BMP images ({image.parent.name}/"
                f"{image.name} is none of them)",
            )
        # Then every image, from its header and last bytes: a JPEG cut off in its header
        # kills the job with SIGFPE inside MindSpore's Decode, printing nothing.
        check_image_folder(f"dataset.{key}", cfg[key], split, IMAGE_EXTENSIONS)
        folders = folders or len(classes)
    require(cfg.image_size >= 1, "dataset.image_size", cfg.image_size, "an integer >= 1")
    if cfg.num_classes is not None:
        require(
            cfg.num_classes >= folders,
            "dataset.num_classes",
            cfg.num_classes,
            f"null or at least the {folders} class folders under {cfg.train_dir}",
        )


def validate_criteo(cfg: DictConfig) -> None:
    """The converter's output folder, and a batch size its records allow."""
    root = existing_dir("dataset.path", cfg.path)
    missing = [f for f in (TRAIN_FILE, EVAL_FILE, META_FILE) if not (root / f).is_file()]
    require(
        not missing,
        "dataset.path",
        cfg.path,
        f"a folder written by the Criteo converter ({', '.join(missing)} missing); "
        "convert raw text with `python -m ms_exp.data.criteo_convert RAW OUT_DIR`",
    )
    try:
        meta = read_meta(root)
    except (OSError, ValueError) as error:
        raise ConfigError(
            "dataset.path", cfg.path, f"a readable {META_FILE} ({' '.join(str(error).split())})"
        ) from None
    counts = ("vocab_size", "train_samples")
    bad = [
        key
        for key in counts
        if not (isinstance(meta, dict) and isinstance(meta.get(key), int) and meta[key] >= 1)
    ]
    require(
        not bad,
        "dataset.path",
        cfg.path,
        f"a {META_FILE} with positive integers {' and '.join(counts)} "
        f"({', '.join(bad)} missing or not one); {RECONVERT}",
    )
    size = samples_per_record(cfg, meta)
    for name in (TRAIN_FILE, EVAL_FILE):
        schema = mindrecord_columns("dataset.path", cfg.path, root / name)
        check_record_file(cfg.path, root / name, meta)
        shapes = {
            column: list(schema.get(column, {}).get("shape", [])) for column in CRITEO_COLUMNS
        }
        require(
            all(shape[:1] == [size] for shape in shapes.values()),
            "dataset.path",
            cfg.path,
            f"MindRecord files of columns {', '.join(CRITEO_COLUMNS)} with "
            f"{size} samples a record as {META_FILE} says ({name} has {shapes}); "
            f"{RECONVERT}",
        )
    if cfg.drop_remainder:
        records = meta["train_records"]
        samples = records * size
        require(
            cfg.batch_size <= samples,
            "dataset.batch_size",
            cfg.batch_size,
            f"at most the {samples} training samples ({records} records of {size}) in "
            f"{root} (with dataset.drop_remainder=true a smaller set gives 0 steps per "
            "epoch)",
        )


def validate_batch_fits(dataset_cfg: DictConfig, parallel_cfg: DictConfig) -> None:
    """With drop_remainder a batch larger than the samples a rank reads gives 0 steps per
    epoch, and MindSpore stops only in Model.fit ("There is no valid data in dataset").
    Criteo is checked in validate_criteo, in records."""
    option = dataset_option(dataset_cfg)
    settings = loader_settings(dataset_cfg)
    if not settings["drop_remainder"] or (option and option.name == "criteo"):
        return
    ranks = 1
    if parallel_cfg.mode != "stand_alone" and not parallel_cfg.get("full_batch", False):
        ranks = parallel_cfg.device_num  # each rank reads its own shard
    batch = settings["batch_size"]
    samples = (
        training_samples(dataset_cfg, enough=batch * ranks) if option else sampled(dataset_cfg)[2]
    )
    per_rank = math.ceil(samples / ranks)
    readers = "" if ranks == 1 else f", {per_rank} on each of {ranks} ranks"
    require(
        batch <= per_rank,
        "dataset.batch_size",
        batch,
        f"at most the {samples} training samples of dataset={dataset_name(dataset_cfg)}"
        f"{readers} "
        "(with dataset.drop_remainder=true a larger batch gives 0 steps per epoch)",
    )


def training_samples(cfg: DictConfig, enough: int) -> int:
    """The training split's size, read from headers; image folders are counted only up to
    ``enough`` files."""
    if cfg.name == "digits":
        # train_test_split holds out ceil(fraction * samples).
        return DIGITS_SAMPLES - math.ceil(cfg.eval_fraction * DIGITS_SAMPLES)
    if cfg.name == "mnist":
        return mnist_train_samples("dataset.path", cfg.path, Path(cfg.path).expanduser())
    if cfg.name == "imagenet":
        train = Path(cfg.path).expanduser() / cfg.train_dir
        return count_files(
            sorted(p for p in train.iterdir() if p.is_dir()), IMAGE_EXTENSIONS, enough
        )
    return cfg.num_samples
