"""The project's network: a small two-layer classifier.

Its first layer multiplies with ``ops.MatMul`` (not ``nn.Dense``) so that a semi-auto
shard strategy can name it: ``parallel.strategies={hidden: {matmul: [[2, 1], [1, 2]]}}``.
ms_exp passes ``input_shape`` and ``num_classes`` because the signature names them.
"""

import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import initializer


class ShardableDense(nn.Cell):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = ms.Parameter(initializer("normal", [in_features, out_features]))
        self.bias = ms.Parameter(initializer("zeros", [out_features]))
        self.matmul = ops.MatMul()
        self.add = ops.Add()

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class TinyNet(nn.Cell):
    """Flatten -> ShardableDense(hidden) -> ReLU -> Dense(num_classes)."""

    def __init__(self, input_shape, num_classes: int, hidden: int = 32):
        super().__init__()
        features = 1
        for size in input_shape:
            features *= size
        self.flatten = nn.Flatten()
        self.hidden = ShardableDense(features, hidden)
        self.relu = nn.ReLU()
        self.out = nn.Dense(hidden, num_classes)

    def construct(self, x):
        return self.out(self.relu(self.hidden(self.flatten(x))))
