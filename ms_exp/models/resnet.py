"""ResNet-18 / ResNet-50 for the ResNet recipe of the dimension-reduction tutorial.

Architecture and initialisation follow MindSpore's model zoo (src/resnet.py, without its
variants) so results compare with the published recipe. ``width`` scales every channel
count: 1.0 for the tutorial, 0.125 (the same graph at 1/64 of the cost) for tests.
"""

import math
from typing import Any, List, Sequence, Type

import mindspore.nn as nn
import mindspore.ops as ops
from mindspore.common.initializer import HeNormal, HeUniform

from ms_exp.models.sizes import RESNET_LAYERS, resnet_channels


# Kaiming normal with fan_out, as the zoo's kaiming_normal(mode="fan_out",
# nonlinearity="relu"); 'same' padding keeps the spatial arithmetic identical
# for any input size, which is what lets 32x32 inputs work.
def _conv(in_channel: int, out_channel: int, kernel_size: int, stride: int = 1) -> nn.Cell:
    return nn.Conv2d(
        in_channel,
        out_channel,
        kernel_size=kernel_size,
        stride=stride,
        pad_mode="same",
        has_bias=False,
        weight_init=HeNormal(mode="fan_out", nonlinearity="relu"),
    )


def _bn(channel: int) -> nn.Cell:
    # Zoo defaults (eps 1e-4, momentum 0.9). gamma stays 1 (MindSpore's default) even on the
    # last BN of a block: the zoo only zero-initialises it for its Thor/ResNet-152 runs.
    return nn.BatchNorm2d(channel, eps=1e-4, momentum=0.9)


def _fc(in_channel: int, out_channel: int) -> nn.Cell:
    # kaiming_uniform(a=sqrt(5)) with zero bias, i.e. the zoo's _fc.
    return nn.Dense(
        in_channel,
        out_channel,
        weight_init=HeUniform(negative_slope=math.sqrt(5)),
        bias_init="zeros",
    )


def _shortcut(in_channel: int, out_channel: int, stride: int) -> Any:  # a Cell, or None
    if stride == 1 and in_channel == out_channel:
        return None
    return nn.SequentialCell([_conv(in_channel, out_channel, 1, stride), _bn(out_channel)])


class _Block(nn.Cell):
    """What both blocks end with: ReLU of the residual plus the (projected) input."""

    def _add_shortcut(self, in_channel: int, out_channel: int, stride: int) -> None:
        # Set after the block's own cells, so parameter order and names are the zoo's.
        self.relu = nn.ReLU()
        self.down_sample_layer = _shortcut(in_channel, out_channel, stride)
        # A plain bool keeps the branch static for GRAPH_MODE compilation.
        self.down_sample = self.down_sample_layer is not None

    def construct(self, x: Any) -> Any:
        identity = x
        if self.down_sample:
            identity = self.down_sample_layer(identity)
        return self.relu(self.residual(x) + identity)


class ResidualBlock(_Block):
    """Bottleneck block (1x1 -> 3x3 -> 1x1), used by ResNet-50."""

    def __init__(self, in_channel: int, out_channel: int, stride: int = 1):
        super().__init__()
        channel = out_channel // 4
        self.conv1 = _conv(in_channel, channel, 1)
        self.bn1 = _bn(channel)
        # Stride sits on the 3x3 conv (ResNet v1.5), as in the zoo.
        self.conv2 = _conv(channel, channel, 3, stride)
        self.bn2 = _bn(channel)
        self.conv3 = _conv(channel, out_channel, 1)
        self.bn3 = _bn(out_channel)
        self._add_shortcut(in_channel, out_channel, stride)

    def residual(self, x: Any) -> Any:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


class ResidualBlockBase(_Block):
    """Basic block (two 3x3 convs), used by ResNet-18."""

    def __init__(self, in_channel: int, out_channel: int, stride: int = 1):
        super().__init__()
        self.conv1 = _conv(in_channel, out_channel, 3, stride)
        self.bn1d = _bn(out_channel)
        self.conv2 = _conv(out_channel, out_channel, 3)
        self.bn2d = _bn(out_channel)
        self._add_shortcut(in_channel, out_channel, stride)

    def residual(self, x: Any) -> Any:
        return self.bn2d(self.conv2(self.relu(self.bn1d(self.conv1(x)))))


class ResNet(nn.Cell):
    """Stem, four stages and a linear head over a global mean pool."""

    def __init__(self, depth: int, num_classes: int, width: float, image_channels: int):
        super().__init__()
        block = ResidualBlockBase if depth == 18 else ResidualBlock
        stem, out_channels = resnet_channels(depth, width)
        in_channels = [stem, *out_channels[:3]]
        self.conv1 = _conv(image_channels, stem, 7, stride=2)
        self.bn1 = _bn(stem)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        self.layer1, self.layer2, self.layer3, self.layer4 = (
            self._make_layer(block, *stage)
            for stage in zip(RESNET_LAYERS[depth], in_channels, out_channels, (1, 2, 2, 2))
        )
        # ReduceMean instead of a fixed-size AvgPool so any input size >= 32 works.
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.end_point = _fc(out_channels[3], num_classes)

    @staticmethod
    def _make_layer(
        block: Type[_Block], layer_num: int, in_channel: int, out_channel: int, stride: int
    ) -> nn.Cell:
        layers: List[nn.Cell] = [block(in_channel, out_channel, stride)]
        layers += [block(out_channel, out_channel, 1) for _ in range(1, layer_num)]
        return nn.SequentialCell(layers)

    def construct(self, x: Any) -> Any:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.flatten(self.mean(x, (2, 3)))
        return self.end_point(x)


def resnet(
    input_shape: Sequence[int], num_classes: int, depth: int = 50, width: float = 1.0
) -> nn.Cell:
    """The ``model=resnet`` option's target: ResNet-``depth`` for (C, H, W) images."""
    return create_resnet(depth, num_classes, width=width, in_channels=int(input_shape[0]))


def create_resnet(
    depth: int, num_classes: int, width: float = 1.0, in_channels: int = 3
) -> nn.Cell:
    """ResNet-``depth`` (18 or 50) for images of ``in_channels`` channels; width=1.0
    reproduces the zoo's resnet18/resnet50 parameter counts exactly."""
    if depth not in RESNET_LAYERS:
        raise ValueError(f"model.depth={depth}: allowed values are 18, 50")
    if not width > 0:
        raise ValueError(f"model.width={width}: must be > 0")
    return ResNet(depth, num_classes, width, in_channels)
