"""The eval metrics: the classification ones (accuracy, loss, top-5) of the models that
bring none of their own (``ModelOption.evaluation``), and the user's ``trainer.metrics``
(any mindspore.train.Metric by ``_target_``), logged as ``eval/<name>``."""

from typing import Dict

from mindspore import nn
from mindspore.train import Metric

from ms_exp.config.schema import METRIC_TARGET
from ms_exp.config.targets import build


def classification_metrics(num_classes: int) -> Dict[str, Metric]:
    metrics = {"accuracy": nn.Top1CategoricalAccuracy(), "loss": nn.Loss()}
    if num_classes > 5:
        metrics["top_5_accuracy"] = nn.Top5CategoricalAccuracy()
    return metrics


def user_metrics(trainer_cfg, num_classes: int) -> Dict[str, Metric]:
    """``trainer.metrics``: each updated with (logits, labels) as the classification ones;
    ``num_classes`` passed when the signature names it. An entry set to null is left out."""
    return {
        str(name): build(
            f"trainer.metrics.{name}",
            node,
            provided={"num_classes": num_classes},
            expected=(Metric,),
            expected_text=METRIC_TARGET,
        )
        for name, node in (trainer_cfg.metrics or {}).items()
        if node is not None
    }


def eval_metrics(cfg, num_classes: int) -> Dict[str, Metric]:
    """The classification metrics and the user's (a user's of the same name wins)."""
    return {**classification_metrics(num_classes), **user_metrics(cfg.trainer, num_classes)}
