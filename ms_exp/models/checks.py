"""Checks of ``model=wide_deep`` and ``dataset=criteo`` that the schema cannot express:
the pair belongs together, sizes and rates are in range, and the sections Wide&Deep does
not read (``optimizer``, ``loss``) are left alone rather than silently ignored.

No MindSpore import: this runs in preflight."""
from omegaconf import OmegaConf

from ms_exp.config.errors import ConfigError, require
from ms_exp.config.schema import LossConfig, OptimizerConfig

WIDE_DEEP_PARALLEL_MODES = ("stand_alone", "data")


def validate_wide_deep(cfg) -> None:
    model, dataset = cfg.model, cfg.dataset
    if model.name != "wide_deep":
        raise ConfigError("dataset", "criteo", f"model=wide_deep for Criteo ids and weights; "
                          f"model={model.name} reads images")
    require(dataset.name == "criteo", "model", "wide_deep",
            f"dataset=criteo (Criteo ids and weights); dataset={dataset.name} is images")
    require(cfg.parallel.mode in WIDE_DEEP_PARALLEL_MODES, "parallel", cfg.parallel.mode,
            "stand_alone or data with model=wide_deep")
    require(cfg.boost.mode == "off", "boost", cfg.boost.mode, "off with model=wide_deep")
    require(model.emb_dim >= 1, "model.emb_dim", model.emb_dim, "an integer >= 1")
    layers = list(model.deep_layers)
    require(all(size >= 1 for size in layers), "model.deep_layers", layers,
            "a list of layer widths >= 1, e.g. [1024, 512, 256, 128]")
    require(0 < model.keep_prob <= 1, "model.keep_prob", model.keep_prob, "a number in (0, 1]")
    require(model.init_range > 0, "model.init_range", model.init_range, "a number > 0")
    require(model.l2_coef >= 0, "model.l2_coef", model.l2_coef, "a number >= 0")
    for key in ("wide_lr", "deep_lr", "loss_scale"):
        require(model[key] > 0, f"model.{key}", model[key], "a number > 0")
    from ms_exp.data.criteo import read_meta

    # validate_dataset ran first: the converted folder and its meta file are there.
    vocab = read_meta(dataset.path)["vocab_size"]
    if model.vocab_size is not None:
        require(model.vocab_size >= vocab, "model.vocab_size", model.vocab_size,
                f"null or at least the dataset's {vocab} ids")
    _untouched(cfg.optimizer, OptimizerConfig, "optimizer",
               "model.wide_lr (FTRL) and model.deep_lr (Adam/LazyAdam)")
    _untouched(cfg.loss, LossConfig, "loss", "model.l2_coef (its losses are the model zoo's)")


def _untouched(section, schema, name: str, instead: str) -> None:
    defaults = OmegaConf.structured(schema)
    for key in defaults:
        value = section[key]
        require(value == defaults[key], f"{name}.{key}", value,
                f"its default {defaults[key]!s} with model=wide_deep, which does not read the "
                f"{name} section; set {instead}")
