"""The ``model`` group's built-in options, one ``ModelOption`` each, found by their
``_target_``; any other target is a user's option (``ModelOption`` defaults).

The hooks import MindSpore when they are called, never when this module is imported: the
config checks read the options before MindSpore starts.
"""

from typing import Any, Dict, Sequence, Tuple

from omegaconf import DictConfig

from ms_exp.config.schema import builtin_target
from ms_exp.config.targets import component_name, target_path
from ms_exp.data.spec import CRITEO_INPUTS
from ms_exp.models.checks import check_mlp, check_resnet, check_wide_deep
from ms_exp.models.option import ModelBuild, ModelOption
from ms_exp.models.sizes import mlp_parameters, resnet_parameters, wide_deep_parameters


def _wide_deep_model(build: ModelBuild) -> Any:
    """``Model`` over the model zoo's two-optimizer train step, evaluated by AUC."""
    import mindspore as ms

    from ms_exp.models.wide_deep import create_train_step

    return ms.Model(
        create_train_step(build.cfg.model, build.network, build.placement),
        **_wide_deep_evaluation(build.network),
    )


def _wide_deep_evaluation(network: Any) -> Dict[str, Any]:
    from ms_exp.models.wide_deep import evaluation

    return evaluation(network)


def _mlp_size(cfg: DictConfig, shape: Sequence[int], classes: int) -> Tuple[str, int]:
    return "model.hidden_size", mlp_parameters(shape, classes, cfg.model.hidden_size)


def _resnet_size(cfg: DictConfig, shape: Sequence[int], classes: int) -> Tuple[str, int]:
    model = cfg.model
    return "model.width", resnet_parameters(model.depth, model.width, shape[0], classes)


def _wide_deep_size(cfg: DictConfig, shape: Sequence[int], classes: int) -> Tuple[str, int]:
    """Its tables span the vocabulary: model.vocab_size, or the dataset's (then emb_dim is
    what a user would change)."""
    model = cfg.model
    vocab = model.vocab_size
    if vocab is None:
        from ms_exp.data.criteo_format import read_meta

        vocab = read_meta(cfg.dataset.path)["vocab_size"]
    key = "model.vocab_size" if model.vocab_size is not None else "model.emb_dim"
    return key, wide_deep_parameters(vocab, shape[0], model.emb_dim, list(model.deep_layers))


MODEL_OPTIONS = {
    option.name: option
    for option in (
        ModelOption("mlp", builtin_target("model", "mlp"), check_mlp, parameters=_mlp_size),
        ModelOption(
            "resnet", builtin_target("model", "resnet"), check_resnet, parameters=_resnet_size
        ),
        ModelOption(
            "wide_deep",
            builtin_target("model", "wide_deep"),
            check_wide_deep,
            inputs=CRITEO_INPUTS,
            train_keys=("l2_coef", "wide_lr", "deep_lr", "loss_scale"),
            best_metric="auc",
            loss_names=("wide_loss", "deep_loss"),
            embedding_tables=True,
            own_train_step=_wide_deep_model,
            evaluation=_wide_deep_evaluation,
            parameters=_wide_deep_size,
        ),
    )
}
_BY_TARGET = {option.target: option for option in MODEL_OPTIONS.values()}


def model_option(model_cfg: DictConfig) -> ModelOption:
    """The built-in option whose target ``model_cfg`` names, else a user's option."""
    option = _BY_TARGET.get(target_path(model_cfg))
    if option is not None:
        return option
    return ModelOption(component_name(model_cfg), target_path(model_cfg), inputs=None)
