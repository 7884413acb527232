"""Checks of the ``model`` and ``placement`` groups, asked of the model option
(``ModelOption``): the samples it reads, its own checks, whether it has embedding tables."""
from ms_exp.config.errors import ConfigError, require
from ms_exp.data.spec import DATASET_INPUTS, IMAGES, dataset_inputs
from ms_exp.models.options import MODEL_OPTIONS, model_option


def validate_model(cfg) -> None:
    """The dataset supplies the samples the model reads; then the model option's own
    checks (the dataset checks ran first, so its files are there to read)."""
    option = model_option(cfg.model)
    supplied = dataset_inputs(cfg.dataset)
    if option.inputs != supplied:
        if supplied != IMAGES:
            readers = " or ".join(f"model={name}" for name, other in MODEL_OPTIONS.items()
                                  if other.inputs == supplied)
            raise ConfigError("dataset", cfg.dataset.name,
                              f"{readers} for {supplied}; model={option.name} reads "
                              f"{option.inputs}")
        sources = " or ".join(f"dataset={name}" for name, inputs in DATASET_INPUTS.items()
                              if inputs == option.inputs)
        raise ConfigError("model", option.name, f"{sources} ({option.inputs}); "
                          f"dataset={cfg.dataset.name} is {supplied}")
    option.check(cfg)


def validate_placement(cfg, model_cfg) -> None:
    if cfg.mode == "host_device":
        holders = " or ".join(f"model={name}" for name, option in MODEL_OPTIONS.items()
                              if option.embedding_tables)
        require(model_option(model_cfg).embedding_tables, "placement", "host_device",
                f"a model with embedding tables to keep on the host ({holders}); "
                f"model={model_cfg.name} has none, use placement=device")
