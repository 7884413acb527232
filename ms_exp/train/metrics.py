"""Eval metrics by task: classification (accuracy, loss, top-5) and click-through rate
(AUC, the Wide&Deep model zoo's metric, and log loss), plus the metric a run's best
checkpoint is chosen by."""
from typing import Dict

import numpy as np
from mindspore import nn
from mindspore.train import Metric


def classification_metrics(num_classes: int) -> Dict[str, Metric]:
    metrics = {"accuracy": nn.Top1CategoricalAccuracy(), "loss": nn.Loss()}
    if num_classes > 5:
        metrics["top_5_accuracy"] = nn.Top5CategoricalAccuracy()
    return metrics


class AUC(Metric):
    """Area under the ROC curve (scikit-learn's ``roc_auc_score``, as the model zoo's
    AUCMetric), over every sample of the evaluation: AUC ranks all samples against each
    other, so it cannot be averaged over batches.

    ``update`` takes the click probabilities and the labels (eval_indexes 1 and 2)."""

    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self._probs, self._labels = [], []

    def update(self, *inputs):
        self._probs.append(self._convert_data(inputs[0]).reshape(-1))
        self._labels.append(self._convert_data(inputs[1]).reshape(-1))

    def eval(self):
        from sklearn.metrics import roc_auc_score

        if not self._probs:
            raise RuntimeError("AUC.eval() before any update()")
        labels, probs = np.concatenate(self._labels), np.concatenate(self._probs)
        if labels.min() == labels.max():  # one class only: the AUC is undefined
            return float("nan")
        return float(roc_auc_score(labels, probs))


def click_metrics() -> Dict[str, Metric]:
    """For an eval network returning (log loss, click probabilities, labels): the mean
    log loss is ``loss``, as a classifier's."""
    return {"auc": AUC(), "loss": nn.Loss()}


# Model's eval_indexes for such a network: [loss, prediction, label].
CLICK_EVAL_INDEXES = [0, 1, 2]


def best_metric(model_name: str) -> str:
    """The eval metric ``best.ckpt`` maximises."""
    return "auc" if model_name == "wide_deep" else "accuracy"
