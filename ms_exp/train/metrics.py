"""The classification eval metrics (accuracy, loss, top-5) of the models that bring none of
their own (``ModelOption.evaluation``)."""
from typing import Dict

from mindspore import nn
from mindspore.train import Metric


def classification_metrics(num_classes: int) -> Dict[str, Metric]:
    metrics = {"accuracy": nn.Top1CategoricalAccuracy(), "loss": nn.Loss()}
    if num_classes > 5:
        metrics["top_5_accuracy"] = nn.Top5CategoricalAccuracy()
    return metrics
