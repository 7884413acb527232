"""Networks by name (the ``model`` group), sized to the dataset they will see."""
from math import prod

from ms_exp.data.spec import DataSpec


def create_network(model_cfg, spec: DataSpec, placement=None):
    """Build the network of ``model_cfg`` for samples of ``spec.image_shape`` ((C, H, W)
    images, or (fields,) of Criteo ids), its embedding tables placed by ``placement``."""
    if model_cfg.name == "mlp":
        from ms_exp.models.mlp import Network
        return Network(in_features=prod(spec.image_shape), num_classes=spec.num_classes,
                       hidden_size=model_cfg.hidden_size, weight_init=model_cfg.weight_init)
    if model_cfg.name == "resnet":
        from ms_exp.models.resnet import create_resnet
        return create_resnet(model_cfg.depth, spec.num_classes, width=model_cfg.width,
                             in_channels=spec.image_shape[0])
    if model_cfg.name == "wide_deep":
        from ms_exp.models.wide_deep import create_wide_deep
        from ms_exp.placement.tables import Placement
        return create_wide_deep(model_cfg, spec.image_shape[0], spec.vocab_size,
                                placement or Placement(host_tables=False))
    raise ValueError(f"model.name={model_cfg.name!r}: no such network")
