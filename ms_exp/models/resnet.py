"""ResNet-18 / ResNet-50 for the ResNet recipe of the dimension-reduction tutorial.

The architecture and default initialisation follow MindSpore's model zoo
(models/official/cv/ResNet/src/resnet.py) so results are comparable with the
published recipe, but only the two depths the tutorial uses are kept and the
SE / ResNet-D / Thor variants are left out.

``width`` scales every convolution's channel count. The tutorial needs the real
networks (width=1.0), while tests and smoke runs need a network that trains in
seconds on a CPU; a width of 0.125 gives the same graph at 1/64 of the cost.
"""
import math

import mindspore.nn as nn
import mindspore.ops as ops
from mindspore.common.initializer import HeNormal, HeUniform

_ALLOWED_DEPTHS = (18, 50)


# Kaiming normal with fan_out, as the zoo's kaiming_normal(mode="fan_out",
# nonlinearity="relu"); 'same' padding keeps the spatial arithmetic identical
# for any input size, which is what lets 32x32 inputs work.
def _conv(in_channel, out_channel, kernel_size, stride=1):
    return nn.Conv2d(in_channel, out_channel, kernel_size=kernel_size, stride=stride,
                     pad_mode="same", has_bias=False,
                     weight_init=HeNormal(mode="fan_out", nonlinearity="relu"))


def conv3x3(in_channel, out_channel, stride=1):
    return _conv(in_channel, out_channel, 3, stride)


def conv1x1(in_channel, out_channel, stride=1):
    return _conv(in_channel, out_channel, 1, stride)


def conv7x7(in_channel, out_channel, stride=1):
    return _conv(in_channel, out_channel, 7, stride)


def _bn(channel):
    # Zoo defaults (eps 1e-4, momentum 0.9). gamma stays 1 even on the last BN
    # of a block: the zoo only zero-initialises it for its Thor/ResNet-152 runs.
    return nn.BatchNorm2d(channel, eps=1e-4, momentum=0.9, gamma_init="ones", beta_init="zeros",
                          moving_mean_init="zeros", moving_var_init="ones")


def _fc(in_channel, out_channel):
    # kaiming_uniform(a=sqrt(5)) with zero bias, i.e. the zoo's _fc.
    return nn.Dense(in_channel, out_channel, has_bias=True,
                    weight_init=HeUniform(negative_slope=math.sqrt(5)), bias_init="zeros")


def _shortcut(in_channel, out_channel, stride):
    if stride == 1 and in_channel == out_channel:
        return None
    return nn.SequentialCell([conv1x1(in_channel, out_channel, stride), _bn(out_channel)])


class ResidualBlock(nn.Cell):
    """Bottleneck block (1x1 -> 3x3 -> 1x1), used by ResNet-50."""

    expansion = 4

    def __init__(self, in_channel, out_channel, stride=1):
        super().__init__()
        channel = out_channel // self.expansion
        self.conv1 = conv1x1(in_channel, channel)
        self.bn1 = _bn(channel)
        # Stride sits on the 3x3 conv (ResNet v1.5), as in the zoo.
        self.conv2 = conv3x3(channel, channel, stride)
        self.bn2 = _bn(channel)
        self.conv3 = conv1x1(channel, out_channel)
        self.bn3 = _bn(out_channel)
        self.relu = nn.ReLU()
        self.down_sample_layer = _shortcut(in_channel, out_channel, stride)
        # A plain bool keeps the branch static for GRAPH_MODE compilation.
        self.down_sample = self.down_sample_layer is not None

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.down_sample:
            identity = self.down_sample_layer(identity)
        return self.relu(out + identity)


class ResidualBlockBase(nn.Cell):
    """Basic block (two 3x3 convs), used by ResNet-18."""

    expansion = 1

    def __init__(self, in_channel, out_channel, stride=1):
        super().__init__()
        self.conv1 = conv3x3(in_channel, out_channel, stride)
        self.bn1d = _bn(out_channel)
        self.conv2 = conv3x3(out_channel, out_channel)
        self.bn2d = _bn(out_channel)
        self.relu = nn.ReLU()
        self.down_sample_layer = _shortcut(in_channel, out_channel, stride)
        self.down_sample = self.down_sample_layer is not None

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1d(self.conv1(x)))
        out = self.bn2d(self.conv2(out))
        if self.down_sample:
            identity = self.down_sample_layer(identity)
        return self.relu(out + identity)


class ResNet(nn.Cell):
    """Stem, four stages and a linear head over a global mean pool."""

    def __init__(self, block, layer_nums, in_channels, out_channels, strides, num_classes,
                 image_channels=3):
        super().__init__()
        self.conv1 = conv7x7(image_channels, in_channels[0], stride=2)
        self.bn1 = _bn(in_channels[0])
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        self.layer1 = self._make_layer(block, layer_nums[0], in_channels[0], out_channels[0],
                                       strides[0])
        self.layer2 = self._make_layer(block, layer_nums[1], in_channels[1], out_channels[1],
                                       strides[1])
        self.layer3 = self._make_layer(block, layer_nums[2], in_channels[2], out_channels[2],
                                       strides[2])
        self.layer4 = self._make_layer(block, layer_nums[3], in_channels[3], out_channels[3],
                                       strides[3])
        # ReduceMean instead of a fixed-size AvgPool so any input size >= 32 works.
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.end_point = _fc(out_channels[3], num_classes)

    @staticmethod
    def _make_layer(block, layer_num, in_channel, out_channel, stride):
        layers = [block(in_channel, out_channel, stride)]
        layers += [block(out_channel, out_channel, 1) for _ in range(1, layer_num)]
        return nn.SequentialCell(layers)

    def construct(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.flatten(self.mean(x, (2, 3)))
        return self.end_point(x)


def resnet(input_shape, num_classes: int, depth: int = 50, width: float = 1.0) -> nn.Cell:
    """The ``model=resnet`` option's target: ResNet-``depth`` for (C, H, W) images."""
    return create_resnet(depth, num_classes, width=width, in_channels=int(input_shape[0]))


def create_resnet(depth: int, num_classes: int, width: float = 1.0,
                  in_channels: int = 3) -> nn.Cell:
    """Build ResNet-``depth`` (18 or 50) with channel counts scaled by ``width``.

    ``in_channels`` is the number of image channels. width=1.0 reproduces the
    zoo's resnet18/resnet50 parameter counts exactly.
    """
    if depth not in _ALLOWED_DEPTHS:
        raise ValueError(f"model.depth={depth}: allowed values are 18, 50")
    if not width > 0:
        raise ValueError(f"model.width={width}: must be > 0")

    if depth == 18:
        block, layer_nums = ResidualBlockBase, [2, 2, 2, 2]
    else:
        block, layer_nums = ResidualBlock, [3, 4, 6, 3]

    # Scale the bottleneck width and derive the block output from it, so the
    # bottleneck's out_channel // expansion never rounds to 0 or loses channels.
    stem = max(1, round(64 * width))
    out_channels = [max(1, round(base * width)) * block.expansion for base in (64, 128, 256, 512)]
    stage_in = [stem] + out_channels[:3]
    return ResNet(block, layer_nums, stage_in, out_channels, [1, 2, 2, 2], num_classes,
                  image_channels=in_channels)
