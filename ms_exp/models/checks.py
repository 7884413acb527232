"""Each model option's own config checks, the part a schema's types cannot express: sizes
and rates in range, images large enough for the network, and for Wide&Deep the sections it
does not read (``optimizer``, ``loss``) left alone rather than silently ignored.

No MindSpore import: these run in preflight, through ``ModelOption.check``.
"""

from omegaconf import DictConfig, OmegaConf

from ms_exp.config.errors import one_of, positive, require
from ms_exp.config.schema import LossConfig, OptimizerConfig
from ms_exp.data.build import declared_shape
from ms_exp.data.criteo_format import read_meta

MLP_WEIGHT_INITS = (
    "normal",
    "uniform",
    "truncatednormal",
    "xavier_uniform",
    "he_uniform",
    "he_normal",
    "zeros",
)
RESNET_DEPTHS = (18, 50)
# ResNet halves its input five times before the global pool.
RESNET_MIN_IMAGE_SIZE = 32
WIDE_DEEP_PARALLEL_MODES = ("stand_alone", "data")


def check_mlp(cfg: DictConfig) -> None:
    model = cfg.model
    positive("model", model, "hidden_size")
    require(
        model.weight_init in MLP_WEIGHT_INITS,
        "model.weight_init",
        model.weight_init,
        one_of(MLP_WEIGHT_INITS),
    )


def check_resnet(cfg: DictConfig) -> None:
    model, dataset = cfg.model, cfg.dataset
    require(model.depth in RESNET_DEPTHS, "model.depth", model.depth, one_of(RESNET_DEPTHS))
    require(model.width > 0, "model.width", model.width, "a number > 0")
    # The dataset checks ran first, so a declared image folder exists.
    size = min(declared_shape(dataset)[0][1:])
    require(
        size >= RESNET_MIN_IMAGE_SIZE,
        "model",
        "resnet",
        f"images of at least {RESNET_MIN_IMAGE_SIZE}x{RESNET_MIN_IMAGE_SIZE}; "
        f"dataset={dataset.name} has {size}x{size} (use model=mlp)",
    )


def check_wide_deep(cfg: DictConfig) -> None:
    """Which datasets it reads is checked by ``ModelOption.inputs``."""
    model, dataset = cfg.model, cfg.dataset
    require(
        cfg.parallel.mode in WIDE_DEEP_PARALLEL_MODES,
        "parallel",
        cfg.parallel.mode,
        "stand_alone or data with model=wide_deep",
    )
    require(cfg.boost.mode == "off", "boost", cfg.boost.mode, "off with model=wide_deep")
    require(model.emb_dim >= 1, "model.emb_dim", model.emb_dim, "an integer >= 1")
    layers = list(model.deep_layers)
    require(
        all(size >= 1 for size in layers),
        "model.deep_layers",
        layers,
        "a list of layer widths >= 1, e.g. [1024, 512, 256, 128]",
    )
    require(0 < model.keep_prob <= 1, "model.keep_prob", model.keep_prob, "a number in (0, 1]")
    require(model.init_range > 0, "model.init_range", model.init_range, "a number > 0")
    require(model.l2_coef >= 0, "model.l2_coef", model.l2_coef, "a number >= 0")
    for key in ("wide_lr", "deep_lr", "loss_scale"):
        require(model[key] > 0, f"model.{key}", model[key], "a number > 0")
    # validate_dataset ran first: the converted folder and its meta file are there.
    vocab = read_meta(dataset.path)["vocab_size"]
    if model.vocab_size is not None:
        require(
            model.vocab_size >= vocab,
            "model.vocab_size",
            model.vocab_size,
            f"null or at least the dataset's {vocab} ids",
        )
    _untouched(
        cfg.optimizer,
        OptimizerConfig,
        "optimizer",
        "model.wide_lr (FTRL) and model.deep_lr (Adam/LazyAdam)",
    )
    _untouched(cfg.loss, LossConfig, "loss", "model.l2_coef (its losses are the model zoo's)")


def _untouched(section: DictConfig, schema: type, name: str, instead: str) -> None:
    defaults = OmegaConf.structured(schema)
    for key in defaults:
        value = section[key]
        require(
            value == defaults[key],
            f"{name}.{key}",
            value,
            f"its default {defaults[key]!s} with model=wide_deep, which does not read the "
            f"{name} section; set {instead}",
        )
