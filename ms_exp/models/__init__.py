"""Networks of the ``model`` option, built-in or a user's, built from its ``_target_`` and
sized to the dataset they will see; what each option tells the trainer, evaluation and
checks about itself is its ``ModelOption`` (``ms_exp.models.options``)."""

from typing import Any, Optional

from omegaconf import DictConfig

from ms_exp.config.targets import build
from ms_exp.data.spec import DataSpec
from ms_exp.models.options import model_option
from ms_exp.placement.tables import Placement

NETWORK = "a mindspore.nn.Cell (a Cell class, or a function returning one)"


def create_network(
    model_cfg: DictConfig, spec: DataSpec, placement: Optional[Placement] = None
) -> Any:
    """The network of ``model_cfg`` for ``spec``'s samples; ``provided`` reaches a target
    whose signature names it and whose option leaves it unset."""
    from mindspore import nn

    option = model_option(model_cfg)
    provided = {
        "num_classes": spec.num_classes,
        "input_shape": tuple(spec.image_shape),
        "vocab_size": spec.vocab_size or None,
        "placement": placement or Placement(host_tables=False),
    }
    return build(
        "model",
        model_cfg,
        own_keys=("name", *option.train_keys),
        provided=provided,
        expected=(nn.Cell,),
        expected_text=NETWORK,
        factories=True,
    )
