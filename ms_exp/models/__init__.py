"""Networks by option (the ``model`` group), sized to the dataset they will see, and what
each option tells the trainer, evaluation and checks about itself (``ModelOption``)."""
from ms_exp.data.spec import DataSpec
from ms_exp.models.options import model_option


def create_network(model_cfg, spec: DataSpec, placement=None):
    """Build the network of ``model_cfg`` for samples of ``spec.image_shape`` ((C, H, W)
    images, or (fields,) of Criteo ids), its embedding tables placed by ``placement``."""
    return model_option(model_cfg).create_network(model_cfg, spec, placement)
