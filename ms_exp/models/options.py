"""The ``model`` group's options: one ``ModelOption`` each.

The builders import MindSpore when they are called, never when this module is imported:
the config checks read the options before MindSpore starts.
"""
from math import prod

from ms_exp.data.spec import CRITEO_INPUTS
from ms_exp.models.checks import check_mlp, check_resnet, check_wide_deep
from ms_exp.models.option import ModelBuild, ModelOption


def _mlp(model_cfg, spec, placement=None):
    from ms_exp.models.mlp import Network

    return Network(in_features=prod(spec.image_shape), num_classes=spec.num_classes,
                   hidden_size=model_cfg.hidden_size, weight_init=model_cfg.weight_init)


def _resnet(model_cfg, spec, placement=None):
    from ms_exp.models.resnet import create_resnet

    return create_resnet(model_cfg.depth, spec.num_classes, width=model_cfg.width,
                         in_channels=spec.image_shape[0])


def _wide_deep(model_cfg, spec, placement=None):
    from ms_exp.models.wide_deep import create_wide_deep
    from ms_exp.placement.tables import Placement

    return create_wide_deep(model_cfg, spec.image_shape[0], spec.vocab_size,
                            placement or Placement(host_tables=False))


def _wide_deep_model(build: ModelBuild):
    """``Model`` over the model zoo's two-optimizer train step, evaluated by AUC."""
    import mindspore as ms

    from ms_exp.models.wide_deep import create_train_step, evaluation

    return ms.Model(create_train_step(build.cfg.model, build.network, build.placement),
                    **evaluation(build.network))


def _wide_deep_evaluation(network) -> dict:
    from ms_exp.models.wide_deep import evaluation

    return evaluation(network)


MODEL_OPTIONS = {
    "mlp": ModelOption("mlp", _mlp, check_mlp),
    "resnet": ModelOption("resnet", _resnet, check_resnet),
    "wide_deep": ModelOption(
        "wide_deep", _wide_deep, check_wide_deep, inputs=CRITEO_INPUTS, best_metric="auc",
        loss_names=("wide_loss", "deep_loss"), embedding_tables=True,
        own_train_step=_wide_deep_model, evaluation=_wide_deep_evaluation),
}


def model_option(model_cfg) -> ModelOption:
    """The option ``model_cfg.name`` names (the schemas admit no other)."""
    return MODEL_OPTIONS[model_cfg.name]
