"""The tutorials' ``Network``: three Dense cells with ReLU between them.

Each Dense is written with ``ops.MatMul`` and ``ops.Add`` (not ``nn.Dense``) exactly as in
the model-saving tutorial, so that ``layer1.matmul`` and friends are operators a shard
strategy can name. Input and output sizes come from the dataset.
"""

import math
from typing import Any, Sequence

import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import initializer


class Dense(nn.Cell):
    def __init__(self, in_channels: int, out_channels: int, weight_init: str = "normal"):
        super().__init__()
        self.weight = ms.Parameter(
            initializer(weight_init, [in_channels, out_channels], ms.float32)
        )
        self.bias = ms.Parameter(initializer(weight_init, [out_channels], ms.float32))
        self.matmul = ops.MatMul()
        self.add = ops.Add()

    def construct(self, x: Any) -> Any:
        x = self.matmul(x, self.weight)
        x = self.add(x, self.bias)
        return x


class Network(nn.Cell):
    def __init__(
        self,
        in_features: int = 28 * 28,
        num_classes: int = 10,
        hidden_size: int = 512,
        weight_init: str = "normal",
    ):
        super().__init__()
        self.flatten = ops.Flatten()
        self.layer1 = Dense(in_features, hidden_size, weight_init)
        self.relu1 = ops.ReLU()
        self.layer2 = Dense(hidden_size, hidden_size, weight_init)
        self.relu2 = ops.ReLU()
        self.layer3 = Dense(hidden_size, num_classes, weight_init)

    def construct(self, x: Any) -> Any:
        x = self.flatten(x)
        x = self.layer1(x)
        x = self.relu1(x)
        x = self.layer2(x)
        x = self.relu2(x)
        logits = self.layer3(x)
        return logits


def mlp(
    input_shape: Sequence[int],
    num_classes: int,
    hidden_size: int = 512,
    weight_init: str = "normal",
) -> Network:
    """The ``model=mlp`` option's target: a ``Network`` for samples of ``input_shape``."""
    return Network(
        math.prod(int(size) for size in input_shape), num_classes, hidden_size, weight_init
    )
