"""Checks of the ``model`` and ``placement`` groups, asked of the model option. A user's
option (any other ``_target_``) is built once here from its dataset's shape and classes,
so a target that does not build a Cell is refused before any run exists."""

from omegaconf import DictConfig

from ms_exp.config.errors import ConfigError, require
from ms_exp.data.build import declared_spec
from ms_exp.data.options import DATASET_OPTIONS, dataset_inputs, dataset_name
from ms_exp.data.spec import IMAGES
from ms_exp.models.options import MODEL_OPTIONS, model_option


def validate_model(cfg: DictConfig) -> None:
    """The dataset supplies the samples the model reads; then the model option's own
    checks (the dataset checks ran first, so its files are there to read)."""
    option = model_option(cfg.model)
    supplied = dataset_inputs(cfg.dataset)
    if None not in (option.inputs, supplied) and option.inputs != supplied:
        name = dataset_name(cfg.dataset)
        if supplied != IMAGES:
            readers = " or ".join(
                f"model={n}" for n, other in MODEL_OPTIONS.items() if other.inputs == supplied
            )
            raise ConfigError(
                "dataset",
                name,
                f"{readers} for {supplied}; model={option.name} reads {option.inputs}",
            )
        sources = " or ".join(
            f"dataset={n}" for n, other in DATASET_OPTIONS.items() if other.inputs == option.inputs
        )
        raise ConfigError(
            "model", option.name, f"{sources} ({option.inputs}); dataset={name} is {supplied}"
        )
    option.check(cfg)
    if MODEL_OPTIONS.get(option.name) is not option:  # a user's target
        from ms_exp.models import create_network

        create_network(cfg.model, declared_spec(cfg.dataset))


def validate_placement(cfg: DictConfig, model_cfg: DictConfig) -> None:
    if cfg.mode == "host_device":
        holders = " or ".join(
            f"model={name}" for name, option in MODEL_OPTIONS.items() if option.embedding_tables
        )
        option = model_option(model_cfg)
        require(
            option.embedding_tables,
            "placement",
            "host_device",
            f"a model with embedding tables to keep on the host ({holders}); "
            f"model={option.name} has none, use placement=device",
        )
