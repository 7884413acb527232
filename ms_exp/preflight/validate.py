"""Checks a schema's types cannot express: ranges, paths, and choices that conflict.

Runs in the launching process on the composed config, before MindSpore is imported and
before Hydra creates a run directory or MLflow a run. Every refusal is a ConfigError: one
line with the key, the value and what is allowed.
"""
import dataclasses
import math
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from ms_exp.config.schema import GROUP_SCHEMAS, Config
from ms_exp.preflight.launch_style import validate_launch_style, validate_style_keys
from ms_exp.preflight.training import validate_loop
from ms_exp.data.criteo import COLUMNS as CRITEO_COLUMNS, read_meta, samples_per_record
from ms_exp.data.criteo_convert import EVAL_FILE, FIELD_SIZE, META_FILE, TRAIN_FILE
from ms_exp.data.headers import (count_files, first_file, image_signature,
                                 mindrecord_columns, mnist_train_samples)
from ms_exp.data.spec import IMAGE_EXTENSIONS
from ms_exp.job.launch import launch_style

from ms_exp.config.errors import ConfigError, InvalidConfig, one_of, require

DEVICE_TARGETS = ("None", "CPU", "GPU", "Ascend")
MLP_WEIGHT_INITS = ("normal", "uniform", "truncatednormal", "xavier_uniform", "he_uniform",
                    "he_normal", "zeros")
RESNET_DEPTHS = (18, 50)
# ResNet halves its input five times before the global pool.
RESNET_MIN_IMAGE_SIZE = 32
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
# scikit-learn's bundled handwritten digits (dataset=digits) hold this many images.
DIGITS_SAMPLES = 1797
# An output folder or store on a filesystem with less free space than this is refused: a
# run writes its config, logs, checkpoints and MLflow rows there, and a disk that fills up
# midway leaves half-written checkpoints and a run that never ends.
MIN_FREE_BYTES = 64 * 1024 * 1024
# Launchers that run several jobs of a sweep at the same time on this machine.
CONCURRENT_LAUNCHERS = ("concurrent", "joblib", "submitit_local")


def validate(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """``choices`` maps each group to its selected option (Hydra's runtime.choices)."""
    check_known_keys(cfg, choices)
    validate_trainer(cfg.trainer)
    validate_parallel(cfg.parallel)
    validate_launch_style(cfg)
    validate_checkpoint(cfg.checkpoint)
    validate_checkpoint_choice(cfg.checkpoint, choices["checkpoint"])
    validate_resume(cfg)
    validate_dataset(cfg.dataset)
    validate_batch_fits(cfg.dataset, cfg.parallel)
    if cfg.model.name == "wide_deep" or cfg.dataset.name == "criteo":
        from ms_exp.models.checks import validate_wide_deep

        validate_wide_deep(cfg)
    validate_model(cfg.model, cfg.dataset)
    validate_placement(cfg.placement, cfg.model)
    validate_optimizer(cfg.optimizer, cfg.trainer.epochs)
    validate_loss(cfg.loss)
    validate_loop(cfg)
    validate_tracking(cfg.tracking)
    if cfg.parallel.mode == "semi_auto":
        validate_shard_strategies(cfg)
    from ms_exp.boost.checks import validate_dim_reduce, validate_snapshots

    validate_snapshots(cfg)
    if cfg.boost.mode == "dim_reduce":
        validate_dim_reduce(cfg)
    validate_master_port_free(cfg.parallel)


def validate_for_evaluation(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """What evaluating a finished run depends on: its network, data and loss."""
    check_known_keys(cfg, choices)
    validate_trainer(cfg.trainer)
    validate_dataset(cfg.dataset)
    validate_model(cfg.model, cfg.dataset)
    validate_loss(cfg.loss)


def choices_from_config(cfg: DictConfig) -> dict:
    """Group choices of a config saved without Hydra's runtime record (a run's config.yaml):
    each group's option is named by its ``name``/``mode`` key; the checkpoint options share
    one schema."""
    return {"parallel": cfg.parallel.mode, "checkpoint": "integrated", "boost": cfg.boost.mode,
            "placement": cfg.placement.mode, "dataset": cfg.dataset.name, "model": cfg.model.name}


def check_known_keys(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """Refuse keys no schema declares, including ones added with ``+key=value``."""
    _known_keys("", cfg, Config)
    for group, options in GROUP_SCHEMAS.items():
        _known_keys(f"{group}.", cfg[group], options[choices[group]])


def _known_keys(prefix: str, node, schema) -> None:
    fields = {f.name: f.type for f in dataclasses.fields(schema)}
    for key in node.keys():
        if key == "hydra" and not prefix:
            continue
        if key not in fields:
            raise ConfigError(f"{prefix}{key}", OmegaConf.select(node, str(key)),
                              one_of(fields), problem="unknown key")
        if dataclasses.is_dataclass(fields[key]):
            _known_keys(f"{prefix}{key}.", node[key], fields[key])


def positive(section: str, cfg, *keys: str) -> None:
    for key in keys:
        value = cfg[key]
        require(value >= 1, f"{section}.{key}", value, "an integer >= 1")


def validate_trainer(cfg) -> None:
    positive("trainer", cfg, "epochs", "loss_print_interval")
    require(cfg.seed >= 0, "trainer.seed", cfg.seed, "an integer >= 0")
    require(cfg.device_id >= 0, "trainer.device_id", cfg.device_id, "an integer >= 0")
    target = cfg.device_target or "None"
    require(target in DEVICE_TARGETS, "trainer.device_target", cfg.device_target,
            one_of(DEVICE_TARGETS))


def validate_resume(cfg) -> None:
    """``trainer.resume``: where to continue from (ms_exp/checkpoint/resume.py finds the checkpoint)."""
    resume = cfg.trainer.resume
    if resume is None:
        return
    from ms_exp.checkpoint.resume import (RESUME_ALLOWED, ResumeError, common_checkpoints,
                               explicit_target, is_run_id)
    from ms_exp.tracking.store import resolve_tracking_uri

    key = "trainer.resume"
    require(cfg.checkpoint.save, key, resume,
            "null with checkpoint=none (a run that saves no checkpoint cannot be resumed)")
    # Neither keeps its state in the checkpoint: dim-reduce's PCA subspace and line search
    # live in AutoBoost, stage one's snapshot series in its own ModelCheckpoint.
    require(cfg.boost.mode != "dim_reduce", key, resume,
            "null with boost=dim_reduce (its state is not in the checkpoints)")
    require(not cfg.checkpoint.snapshots.per_epoch, key, resume,
            "null with checkpoint.snapshots.per_epoch > 0 (the snapshot series cannot be "
            "continued)")
    if resume == "auto":
        return
    if not is_run_id(resume):
        path = Path(resume)
        require(path.exists(), key, resume, f"{RESUME_ALLOWED} that exists")
        if path.is_file():
            require(path.suffix == ".ckpt", key, resume, f"{RESUME_ALLOWED} (.ckpt)")
        else:
            require((path / "checkpoints").is_dir(), key, resume,
                    f"{RESUME_ALLOWED} ({path} has no checkpoints/ folder)")
    try:
        run_dir, wanted = explicit_target(resume, resolve_tracking_uri(cfg.tracking.uri))
    except ResumeError as error:
        raise ConfigError(key, resume, f"{RESUME_ALLOWED} ({error})") from None
    ranks = cfg.parallel.device_num
    require(common_checkpoints(run_dir, cfg.checkpoint.prefix, ranks, wanted), key, resume,
            f"a run with a {cfg.checkpoint.prefix}-<epoch>_<step>.ckpt in each of its {ranks} "
            f"rank folders ({run_dir / 'checkpoints'})")


def validate_parallel(cfg) -> None:
    if cfg.mode == "stand_alone":
        require(cfg.device_num == 1, "parallel.device_num", cfg.device_num,
                "1 for parallel=stand_alone")
        return
    require(cfg.device_num >= 1, "parallel.device_num", cfg.device_num, "an integer >= 1")
    fusion = list(cfg.all_reduce_fusion_config)
    require(all(0 < a < b for a, b in zip([0] + fusion, fusion)),
            "parallel.all_reduce_fusion_config", fusion,
            "increasing positive gradient indices, e.g. [20, 35]")
    launcher = cfg.launcher
    workers = launcher.worker_num or cfg.device_num
    require(workers == cfg.device_num, "parallel.launcher.worker_num", launcher.worker_num,
            f"null or parallel.device_num ({cfg.device_num}): one worker per device")
    validate_style_keys(cfg)
    local = launcher.local_worker_num or workers
    require(1 <= local <= workers, "parallel.launcher.local_worker_num",
            launcher.local_worker_num, f"null or an integer from 1 to {workers}")
    nodes = -(-workers // local)
    if nodes == 1:
        # msrun starts its scheduler where master_addr points; with every worker here an
        # address of another machine makes them wait cluster_time_out for nobody.
        require(is_address_of_this_machine(launcher.master_addr),
                "parallel.launcher.master_addr", launcher.master_addr,
                f"an address of this machine, e.g. 127.0.0.1, when all {workers} workers run "
                "here (set parallel.launcher.local_worker_num to spread them over nodes)")
    if nodes > 1:
        require(0 <= launcher.node_rank < nodes, "parallel.launcher.node_rank",
                launcher.node_rank, f"this node's rank, 0 to {nodes - 1} ({workers} workers, "
                f"{local} on each node)")
    else:
        require(launcher.node_rank in (-1, 0), "parallel.launcher.node_rank",
                launcher.node_rank, "-1 or 0 when every worker is on this node")
    require(1024 <= launcher.master_port <= 65535, "parallel.launcher.master_port",
            launcher.master_port, "a port from 1024 to 65535")
    positive("parallel.launcher", launcher, "cluster_time_out")
    require(launcher.join_timeout >= 0, "parallel.launcher.join_timeout",
            launcher.join_timeout, "seconds >= 0")


def validate_master_port_free(cfg) -> None:
    """Checked after every other key: a port other processes hold comes and goes, and must
    not hide a mistake in the config itself."""
    if cfg.mode == "stand_alone" or launch_style(cfg) != "msrun":
        return  # only msrun listens on the master port
    launcher = cfg.launcher
    if launcher.node_rank in (-1, 0) and is_local_address(launcher.master_addr):
        require(port_is_free(launcher.master_addr, launcher.master_port),
                "parallel.launcher.master_port", launcher.master_port,
                f"a free port (another process is listening on {launcher.master_addr}:"
                f"{launcher.master_port})")


def is_local_address(address: str) -> bool:
    return address in ("127.0.0.1", "localhost", "::1") or address.startswith("127.")


def is_address_of_this_machine(address: str) -> bool:
    """Whether a socket can be bound to ``address`` here (a name is resolved first)."""
    if is_local_address(address):
        return True
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:  # not an address of this machine, or a name that does not resolve
        return False
    return True


def port_is_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def validate_checkpoint(cfg) -> None:
    if cfg.save_checkpoint_steps is not None:
        positive("checkpoint", cfg, "save_checkpoint_steps")
        require(cfg.save_checkpoint_epochs == 1, "checkpoint.save_checkpoint_epochs",
                cfg.save_checkpoint_epochs,
                "1 when checkpoint.save_checkpoint_steps is set, which it would override")
    positive("checkpoint", cfg, "save_checkpoint_epochs")
    positive("checkpoint", cfg, "keep_checkpoint_max")
    require(bool(cfg.prefix) and "/" not in cfg.prefix and "\\" not in cfg.prefix,
            "checkpoint.prefix", cfg.prefix, "a non-empty file-name prefix without slashes")


def validate_checkpoint_choice(cfg, option: str) -> None:
    """Keys that contradict the checkpoint option they were set on. checkpoint=integrated is
    the default and the documented sweep varies its integrated_save (README), so only the
    explicit options sliced and none are held to what their names say."""
    if option == "sliced":
        require(not cfg.integrated_save, "checkpoint.integrated_save", cfg.integrated_save,
                "false with checkpoint=sliced, which saves each rank's slice (use "
                "checkpoint=integrated for whole weights)")
        require(cfg.save, "checkpoint.save", cfg.save,
                "true with checkpoint=sliced (use checkpoint=none to save nothing)")
    elif option == "none":
        require(not cfg.save, "checkpoint.save", cfg.save,
                "false with checkpoint=none (use checkpoint=integrated or checkpoint=sliced "
                "to save checkpoints)")
        require(not cfg.keep_best, "checkpoint.keep_best", cfg.keep_best,
                "false with checkpoint=none, which writes no checkpoint (for best.ckpt alone "
                "use checkpoint=integrated checkpoint.save=false)")
    load_file = cfg.strategy.load_file
    if load_file:
        # MindSpore reads it only when the graph compiles, after the run has started.
        require(Path(load_file).expanduser().is_file(), "checkpoint.strategy.load_file",
                load_file, "'' (none) or a strategy file that exists")


def validate_dataset(cfg) -> None:
    positive("dataset", cfg, "batch_size", "num_parallel_workers")
    name = cfg.name
    if name == "digits":
        require(0 < cfg.eval_fraction < 1, "dataset.eval_fraction", cfg.eval_fraction,
                "a fraction between 0 and 1 (exclusive)")
    elif name == "mnist":
        root = existing_dir("dataset.path", cfg.path)
        missing = [f for f in MNIST_FILES if not (root / f).is_file()]
        require(not missing, "dataset.path", cfg.path,
                f"a folder with the MNIST idx files ({', '.join(missing)} missing)")
        mnist_train_samples("dataset.path", cfg.path, root)
    elif name == "imagenet":
        validate_image_folder(cfg)
    elif name == "criteo":
        validate_criteo(cfg)
    elif name == "synthetic":
        positive("dataset", cfg, "num_samples", "num_eval_samples")
        require(cfg.num_classes >= 2, "dataset.num_classes", cfg.num_classes,
                "an integer >= 2")
        shape = list(cfg.image_shape)
        require(len(shape) == 3 and all(d >= 1 for d in shape), "dataset.image_shape", shape,
                "three positive integers [channels, height, width]")
        require(cfg.noise >= 0, "dataset.noise", cfg.noise, "a number >= 0")
    if "mean" in cfg:
        require(len(cfg.mean) == len(cfg.std) and all(s > 0 for s in cfg.std), "dataset.std",
                list(cfg.std), f"{len(cfg.mean)} positive numbers, one per mean")


def validate_image_folder(cfg) -> None:
    root = existing_dir("dataset.path", cfg.path)
    folders = 0
    for key in ("train_dir", "eval_dir"):
        split = root / cfg[key]
        classes = [p for p in split.iterdir() if p.is_dir()] if split.is_dir() else []
        require(bool(classes), f"dataset.{key}", cfg[key],
                f"a folder of class folders under {root}")
        images = [f for f in (first_file(c, IMAGE_EXTENSIONS) for c in classes) if f]
        require(bool(images), f"dataset.{key}", cfg[key],
                f"class folders holding images ({', '.join(IMAGE_EXTENSIONS[:4])}, ...)")
        # One file per class: enough to catch a folder of renamed or broken files, which
        # ImageFolderDataset would stop on mid-epoch ("Decode: image decode failed").
        for image in images:
            require(image_signature(image) is not None, f"dataset.{key}", cfg[key],
                    f"class folders of JPEG, PNG or BMP images ({image.parent.name}/"
                    f"{image.name} is none of them)")
        folders = folders or len(classes)
    require(cfg.image_size >= 1, "dataset.image_size", cfg.image_size, "an integer >= 1")
    if cfg.num_classes is not None:
        require(cfg.num_classes >= folders, "dataset.num_classes", cfg.num_classes,
                f"null or at least the {folders} class folders under {cfg.train_dir}")


def validate_criteo(cfg) -> None:
    """The converter's output folder: both record files and a meta file of the current
    format that names the vocabulary size, sample counts and samples per record; the batch
    size a multiple of the samples per record, and (when dropping the remainder) at most the
    training split."""
    root = existing_dir("dataset.path", cfg.path)
    missing = [f for f in (TRAIN_FILE, EVAL_FILE, META_FILE) if not (root / f).is_file()]
    require(not missing, "dataset.path", cfg.path,
            f"a folder written by the Criteo converter ({', '.join(missing)} missing); "
            "convert raw text with `python -m ms_exp.data.criteo_convert RAW OUT_DIR`")
    try:
        meta = read_meta(root)
    except (OSError, ValueError) as error:
        raise ConfigError("dataset.path", cfg.path, f"a readable {META_FILE} "
                          f"({' '.join(str(error).split())})") from None
    counts = ("vocab_size", "train_samples")
    bad = [key for key in counts if not (isinstance(meta, dict) and
                                         isinstance(meta.get(key), int) and meta[key] >= 1)]
    require(not bad, "dataset.path", cfg.path,
            f"a {META_FILE} with positive integers {' and '.join(counts)} "
            f"({', '.join(bad)} missing or not one); convert again with "
            "`python -m ms_exp.data.criteo_convert RAW OUT_DIR --overwrite`")
    size = samples_per_record(cfg, meta)
    for name in (TRAIN_FILE, EVAL_FILE):
        schema = mindrecord_columns("dataset.path", cfg.path, root / name)
        shapes = {column: list(schema.get(column, {}).get("shape", [])) for column in
                  CRITEO_COLUMNS}
        require(all(shape[:1] == [size] for shape in shapes.values()), "dataset.path",
                cfg.path, f"MindRecord files of columns {', '.join(CRITEO_COLUMNS)} with "
                f"{size} samples a record as {META_FILE} says ({name} has {shapes}); "
                "convert again with `python -m ms_exp.data.criteo_convert RAW OUT_DIR "
                "--overwrite`")
    if cfg.drop_remainder:
        records = meta["train_records"]
        samples = records * size
        require(cfg.batch_size <= samples, "dataset.batch_size", cfg.batch_size,
                f"at most the {samples} training samples ({records} records of {size}) in "
                f"{root} (with dataset.drop_remainder=true a smaller set gives 0 steps per "
                "epoch)")


def validate_batch_fits(dataset_cfg, parallel_cfg) -> None:
    """With drop_remainder a batch larger than the samples a rank reads gives 0 steps per
    epoch, and MindSpore stops only in Model.fit ("There is no valid data in dataset").
    Criteo is checked in validate_criteo, in records."""
    if not dataset_cfg.drop_remainder or dataset_cfg.name == "criteo":
        return
    ranks = 1
    if parallel_cfg.mode != "stand_alone" and not parallel_cfg.get("full_batch", False):
        ranks = parallel_cfg.device_num  # each rank reads its own shard
    batch = dataset_cfg.batch_size
    samples = training_samples(dataset_cfg, enough=batch * ranks)
    per_rank = math.ceil(samples / ranks)
    readers = "" if ranks == 1 else f", {per_rank} on each of {ranks} ranks"
    require(batch <= per_rank, "dataset.batch_size", batch,
            f"at most the {samples} training samples of dataset={dataset_cfg.name}{readers} "
            "(with dataset.drop_remainder=true a larger batch gives 0 steps per epoch)")


def training_samples(cfg, enough: int) -> int:
    """The training split's size, read from headers; image folders are counted only up to
    ``enough`` files."""
    if cfg.name == "digits":
        # train_test_split holds out ceil(fraction * samples).
        return DIGITS_SAMPLES - math.ceil(cfg.eval_fraction * DIGITS_SAMPLES)
    if cfg.name == "mnist":
        return mnist_train_samples("dataset.path", cfg.path, Path(cfg.path).expanduser())
    if cfg.name == "imagenet":
        train = Path(cfg.path).expanduser() / cfg.train_dir
        return count_files(sorted(p for p in train.iterdir() if p.is_dir()),
                           IMAGE_EXTENSIONS, enough)
    return cfg.num_samples


def existing_dir(key: str, value: Optional[str]) -> Path:
    require(value is not None, key, value,
            "a folder that exists (set it, or the DATA_PATH environment variable)")
    path = Path(value).expanduser()
    require(path.is_dir(), key, value, "a folder that exists")
    return path


def validate_model(cfg, dataset_cfg) -> None:
    if cfg.name == "mlp":
        positive("model", cfg, "hidden_size")
        require(cfg.weight_init in MLP_WEIGHT_INITS, "model.weight_init", cfg.weight_init,
                one_of(MLP_WEIGHT_INITS))
    elif cfg.name == "resnet":
        require(cfg.depth in RESNET_DEPTHS, "model.depth", cfg.depth, one_of(RESNET_DEPTHS))
        require(cfg.width > 0, "model.width", cfg.width, "a number > 0")
        # validate_dataset ran first, so a declared image folder exists.
        size = min(declared_shape(dataset_cfg)[0][1:])
        require(size >= RESNET_MIN_IMAGE_SIZE, "model", "resnet",
                f"images of at least {RESNET_MIN_IMAGE_SIZE}x{RESNET_MIN_IMAGE_SIZE}; "
                f"dataset={dataset_cfg.name} has {size}x{size} (use model=mlp)")


def declared_shape(dataset_cfg) -> Tuple[Tuple[int, ...], int]:
    """(C, H, W) (or (fields,) for Criteo) and class count of a dataset as its config
    declares them, without reading any sample."""
    name = dataset_cfg.name
    if name == "digits":
        return (1, 8, 8), 10
    if name == "mnist":
        return (1, 28, 28), 10
    if name == "imagenet":
        size = dataset_cfg.image_size
        train = Path(dataset_cfg.path).expanduser() / dataset_cfg.train_dir
        classes = dataset_cfg.num_classes or sum(p.is_dir() for p in train.iterdir())
        return (3, size, size), classes
    if name == "criteo":
        return (FIELD_SIZE,), 2
    return tuple(dataset_cfg.image_shape), dataset_cfg.num_classes


def validate_shard_strategies(cfg) -> None:
    """Check ``parallel.strategies`` against the network the job will build: the operator
    exists, one tuple per input of the right length, factors divide their dimensions and
    the product divides device_num (MindSpore checks these only once the graph compiles)."""
    from ms_exp.data.spec import DataSpec
    from ms_exp.models import create_network
    from ms_exp.parallel.layout import validate_strategies

    shape, classes = declared_shape(cfg.dataset)
    network = create_network(cfg.model, DataSpec(shape, classes, 0, 0))
    try:
        validate_strategies(network, cfg.parallel.strategies, cfg.parallel.device_num,
                            batch_size=cfg.dataset.batch_size)
    except InvalidConfig as error:
        raise InvalidConfig(f"parallel.strategies: {error}; expected for each operator of the "
                            "network one shard tuple per input, each factor dividing its "
                            "dimension, the product dividing parallel.device_num "
                            f"({cfg.parallel.device_num})") from None


def validate_placement(cfg, model_cfg) -> None:
    from ms_exp.placement.tables import MODELS_WITH_TABLES

    if cfg.mode == "host_device":
        require(model_cfg.name in MODELS_WITH_TABLES, "placement", "host_device",
                f"a model with embedding tables to keep on the host (model=wide_deep); "
                f"model={model_cfg.name} has none, use placement=device")


def validate_optimizer(cfg, epochs: int) -> None:
    require(cfg.lr > 0, "optimizer.lr", cfg.lr, "a number > 0")
    require(0 <= cfg.momentum < 1, "optimizer.momentum", cfg.momentum, "a number in [0, 1)")
    require(cfg.weight_decay >= 0, "optimizer.weight_decay", cfg.weight_decay, "a number >= 0")
    require(0 <= cfg.min_lr < cfg.lr, "optimizer.min_lr", cfg.min_lr,
            f"a number >= 0 and below optimizer.lr ({cfg.lr})")
    schedule = cfg.schedule.value
    if cfg.decay_epochs is not None:
        require(schedule != "constant", "optimizer.decay_epochs", cfg.decay_epochs,
                "null with optimizer.schedule=constant, which does not decay")
        require(cfg.decay_epochs >= epochs, "optimizer.decay_epochs", cfg.decay_epochs,
                f"null or at least trainer.epochs ({epochs}): training stops at or before "
                "the end of the schedule")
        require(0 <= cfg.warmup_epochs <= cfg.decay_epochs, "optimizer.warmup_epochs",
                cfg.warmup_epochs,
                f"an integer from 0 to optimizer.decay_epochs ({cfg.decay_epochs})")
    else:
        require(0 <= cfg.warmup_epochs <= epochs, "optimizer.warmup_epochs", cfg.warmup_epochs,
                f"an integer from 0 to trainer.epochs ({epochs})")
    if cfg.lr_init is not None:
        require(cfg.warmup_epochs > 0, "optimizer.lr_init", cfg.lr_init,
                "null without warmup (optimizer.warmup_epochs=0): it is where warmup starts")
        require(0 <= cfg.lr_init <= cfg.lr, "optimizer.lr_init", cfg.lr_init,
                f"null or a number from 0 to optimizer.lr ({cfg.lr})")
    if schedule == "cosine":
        # The model zoo's cosine ends at lr * 1e-5 whatever its lr_end.
        require(cfg.min_lr == 0, "optimizer.min_lr", cfg.min_lr,
                "0 with optimizer.schedule=cosine, which decays to about 0 as the model zoo's "
                "(optimizer.lr_init sets where warmup starts)")


def validate_loss(cfg) -> None:
    validate_loss_terms(cfg, "loss")


def validate_loss_terms(cfg, key: str) -> None:
    """A loss's name and label smoothing: ``loss`` itself or one of ``loss.parts``."""
    require(0 <= cfg.label_smoothing < 1, f"{key}.label_smoothing", cfg.label_smoothing,
            "a number in [0, 1)")
    if cfg.name.value == "softmax_cross_entropy":
        require(cfg.label_smoothing == 0, f"{key}.label_smoothing", cfg.label_smoothing,
                f"0 with {key}.name=softmax_cross_entropy (use cross_entropy or "
                "cross_entropy_smooth to smooth labels)")


def validate_tracking(cfg) -> None:
    positive("tracking", cfg, "log_every_n_steps")
    require(bool(cfg.experiment_name), "tracking.experiment_name", cfg.experiment_name,
            "a non-empty name")
    if cfg.enabled:
        uri = cfg.uri
        if uri is None:
            writable_dir("tracking.uri", uri, Path.cwd())
            enough_free_space("tracking.uri", uri, Path.cwd())
        elif uri.startswith("sqlite:///"):
            store_folder = Path(uri[len("sqlite:///"):]).parent
            writable_dir("tracking.uri", uri, store_folder)
            enough_free_space("tracking.uri", uri, store_folder)
        else:
            scheme = uri.split("://", 1)[0] if "://" in uri else ""
            allowed = ("http", "https", "file", "databricks", "postgresql", "mysql", "mssql")
            require(scheme in allowed, "tracking.uri", uri,
                    "null (sqlite:///mlflow.db here) or a URI of scheme sqlite, "
                    + ", ".join(allowed))


def output_folder(key: str, value) -> None:
    """A run or sweep folder: named, writable, and on a filesystem with room for a run."""
    require(value is not None and str(value).strip() != "", key, value,
            "a folder path (relative paths are below the working directory)")
    writable_dir(key, value, Path(value))
    enough_free_space(key, value, Path(value))


def existing_ancestor(path: Path) -> Path:
    """``path`` itself or the nearest folder above it that exists."""
    existing = Path(path).expanduser().absolute()
    while not existing.exists():
        existing = existing.parent
    return existing


def enough_free_space(key: str, value, path: Path) -> None:
    existing = existing_ancestor(path)
    free = shutil.disk_usage(existing).free
    require(free >= MIN_FREE_BYTES, key, value,
            f"a folder on a filesystem with at least {MIN_FREE_BYTES} bytes "
            f"({MIN_FREE_BYTES // 2**20} MiB) free ({existing} has {free} bytes free)")


def concurrent_master_ports(configs) -> None:
    """Distributed jobs that a launcher runs at the same time must not share a master
    port: the second job's msrun cannot bind it, or its ranks join the first job's cluster."""
    if not configs:
        return
    hydra_cfg = configs[0].hydra
    launcher = hydra_cfg.runtime.choices.get("hydra/launcher")
    n_jobs = hydra_cfg.launcher.get("n_jobs", 2)
    if launcher not in CONCURRENT_LAUNCHERS or n_jobs == 1:
        return
    first_job = {}
    for number, cfg in enumerate(configs):
        if cfg.parallel.mode == "stand_alone" or launch_style(cfg.parallel) != "msrun":
            continue
        port = cfg.parallel.launcher.master_port
        address = (cfg.parallel.launcher.master_addr, port)
        if address in first_job:
            raise ConfigError("parallel.launcher.master_port", port,
                              f"a different port for each distributed job that "
                              f"hydra/launcher={launcher} runs at the same time (jobs "
                              f"{first_job[address]} and {number} both use {port}; sweep it "
                              f"too, e.g. parallel.launcher.master_port={port},{port + 1})")
        first_job[address] = number


def writable_dir(key: str, value, path: Path) -> None:
    """Refuse ``path`` unless it is, or can be created as, a folder we can write into.

    Probes with a real temporary file because permission bits say nothing for root or on
    read-only mounts; nothing is created if the check fails, and the probe is removed."""
    path = Path(path).expanduser().absolute()
    existing = existing_ancestor(path)
    require(existing.is_dir(), key, value,
            f"a writable folder ({existing} is a file, not a folder)")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise ConfigError(key, value, f"a writable folder ({existing}: {error.strerror})")
    if existing != path and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(key, value, f"a writable folder ({existing} is not writable)")
