"""Checks for ``boost=dim_reduce``, before anything trains (``BoostOption.check``).

MindSpore checks almost none of this itself: it ignores or works around bad values, and
fails (or waits out ``timeout``) only once the training cell is being built.
"""

from math import prod
from pathlib import Path
from typing import Mapping, Optional, Tuple

import numpy as np
from omegaconf import DictConfig

from ms_exp.boost.stage_one import resolve_stage_one
from ms_exp.checkpoint.files import is_checkpoint_file
from ms_exp.checkpoint.snapshots import snapshot_files
from ms_exp.config.errors import ConfigError, one_of, require
from ms_exp.data.build import declared_spec

LEVELS = ("O1", "O2")
Shapes = Mapping[str, Tuple[int, ...]]  # parameter name -> shape


def validate_dim_reduce(cfg: DictConfig) -> None:
    boost = cfg.boost
    for key, ok, allowed in (
        ("level", boost.level in LEVELS, one_of(LEVELS)),
        ("rho", 0 < boost.rho < 1, "a number in (0, 1): the line search tries steps 1 and rho"),
        ("gamma", 0 <= boost.gamma < 1, "a number in [0, 1): the residual gradient's momentum"),
        ("alpha", boost.alpha >= 0, "a number >= 0: the residual gradient's step"),
        (
            "sigma",
            0 < boost.sigma < 1,
            "a number in (0, 1): the line search's sufficient-decrease factor",
        ),
        ("n_components", boost.n_components >= 1, "an integer >= 1"),
        ("timeout", boost.timeout >= 1, "seconds >= 1"),
    ):
        require(ok, f"boost.{key}", boost[key], allowed)
    require(
        cfg.parallel.mode in ("stand_alone", "data"),
        "parallel",
        cfg.parallel.mode,
        "stand_alone or data with boost=dim_reduce (DimReduce is data-parallel)",
    )
    ranks = cfg.parallel.device_num
    require(
        boost.n_components % ranks == 0,
        "boost.n_components",
        boost.n_components,
        f"a multiple of parallel.device_num ({ranks}): each rank takes an equal share "
        "of the components",
    )
    _check_optimizer(cfg.optimizer)
    stage_one = resolve_stage_one(boost, cfg.tracking)
    from ms_exp.models import create_network

    # The trainable parameters of the network stage two builds.
    network = create_network(cfg.model, declared_spec(cfg.dataset))
    shapes = {p.name: tuple(p.shape) for p in network.trainable_params()}
    _check_weights(stage_one.weights, shapes)
    if boost.pca_mat_path:
        _check_pca_matrix(
            Path(boost.pca_mat_path).expanduser(),
            boost.n_components,
            sum(prod(shape) for shape in shapes.values()),
        )
    else:
        _check_snapshot_folder(stage_one.snapshots, boost.n_components, shapes)


def _check_optimizer(optimizer: DictConfig) -> None:
    """AutoBoost replaces the optimizer with SGD(learning_rate=1) whatever it is given:
    refuse settings that would be silently ignored."""
    expected = {
        "name": "sgd",
        "lr": 1.0,
        "momentum": 0.0,
        "weight_decay": 0.0,
        "schedule": "constant",
        "group_params": "false",
    }
    for key, value in expected.items():
        given = optimizer[key]
        given = getattr(given, "value", given)
        shown = str(given).lower() if isinstance(given, bool) else given
        require(
            shown == value,
            f"optimizer.{key}",
            given,
            f"{value} with boost=dim_reduce (MindSpore trains stage two with "
            "SGD(learning_rate=1) whatever is configured)",
        )


def _check_weights(path: Path, shapes: Shapes) -> None:
    require(
        path.is_file() and is_checkpoint_file(path),
        "boost.pretrained_weight_path",
        str(path),
        "a .ckpt or .safetensors file that exists (stage one's final checkpoint)",
    )
    mismatched = _mismatched_parameters(path, shapes, "boost.pretrained_weight_path")
    require(
        not mismatched,
        "boost.pretrained_weight_path",
        str(path),
        f"a checkpoint of this network ({mismatched}: was stage one trained with "
        "another model or dataset?)",
    )


def _mismatched_parameters(path: Path, shapes: Shapes, key: str) -> str:
    """The first parameters of the network that ``path`` lacks or holds in another shape."""
    from ms_exp.checkpoint.files import DamagedCheckpoint, load_verified

    try:  # MindSpore parses its protobuf format: a checkpoint is never unpickled
        saved = load_verified(path)
    except DamagedCheckpoint as error:
        raise ConfigError(key, str(path), f"a readable MindSpore checkpoint ({error})") from None
    problems = [
        f"{name} missing"
        if name not in saved
        else f"{name} is {list(saved[name].shape)}, not {list(shape)}"
        for name, shape in shapes.items()
        if name not in saved or tuple(saved[name].shape) != shape
    ]
    return ", ".join(problems[:3])


def _check_pca_matrix(path: Path, n_components: int, size: int) -> None:
    require(
        path.is_file() and path.suffix == ".npy",
        "boost.pca_mat_path",
        str(path),
        "a .npy file that exists (MindSpore ignores any other path)",
    )
    try:  # reads the header, not the matrix; never unpickles (object arrays are refused)
        shape = np.load(path, mmap_mode="r", allow_pickle=False).shape
    except (ValueError, OSError) as error:
        raise ConfigError(
            "boost.pca_mat_path",
            str(path),
            f"a .npy file of numbers ({str(error).splitlines()[0]})",
        ) from None
    require(
        len(shape) == 2 and shape[1] == size,
        "boost.pca_mat_path",
        str(path),
        f"a matrix {size} wide, one column per trainable weight of this network "
        f"(it is {'x'.join(map(str, shape))})",
    )
    require(
        shape[0] >= n_components,
        "boost.pca_mat_path",
        str(path),
        f"at least boost.n_components ({n_components}) rows (it has {shape[0]})",
    )


def _check_snapshot_folder(folder: Optional[Path], n_components: int, shapes: Shapes) -> None:
    key = "boost.weight_load_dir"
    if folder is None:
        raise ConfigError(key, None, "stage one's snapshot folder (or boost.pca_mat_path)")
    require(folder.is_dir(), key, str(folder), "a folder that exists")
    files = snapshot_files(folder)
    require(
        bool(files),
        key,
        str(folder),
        "a folder of stage-one weight snapshots (*.ckpt); it has none",
    )
    require(
        len(files) >= n_components,
        "boost.n_components",
        n_components,
        f"at most the {len(files)} snapshots in {folder} (PCA cannot find more "
        "components than samples)",
    )
    mismatched = _mismatched_parameters(files[0], shapes, key)
    require(
        not mismatched,
        key,
        str(folder),
        f"snapshots of this network ({files[0].name}: {mismatched})",
    )
