"""The eval metrics: the classification ones (accuracy, loss, top-5) of the models that
bring none of their own (``ModelOption.evaluation``), and the user's ``trainer.metrics``
(any mindspore.train.Metric by ``_target_``), logged as ``eval/<name>``."""

from typing import Dict

from mindspore import nn
from mindspore.train import Metric
from omegaconf import DictConfig

from ms_exp.config.schema import METRIC_TARGET
from ms_exp.config.targets import build


def classification_metrics(num_classes: int) -> Dict[str, Metric]:
    metrics = {"accuracy": nn.Top1CategoricalAccuracy(), "loss": nn.Loss()}
    if num_classes > 5:
        metrics["top_5_accuracy"] = nn.Top5CategoricalAccuracy()
    return metrics


def eval_metrics(cfg: DictConfig, num_classes: int) -> Dict[str, Metric]:
    """The classification metrics and the user's ``trainer.metrics`` (a user's of the same
    name wins), each updated with (logits, labels) as the classification ones and given
    ``num_classes`` when its signature names it. An entry set to null is left out."""
    metrics = classification_metrics(num_classes)
    for name, node in (cfg.trainer.metrics or {}).items():
        if node is not None:
            metrics[str(name)] = build(
                f"trainer.metrics.{name}",
                node,
                provided={"num_classes": num_classes},
                expected=(Metric,),
                expected_text=METRIC_TARGET,
            )
    return metrics
