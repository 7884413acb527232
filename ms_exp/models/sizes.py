"""How many parameters each built-in network has, counted from its config and the dataset's
sample shape without building it (no MindSpore import): the preflight compares them with the
machine's memory (ms_exp/preflight/memory.py).

Each count follows its network's constructor exactly, batch norm's moving statistics
included (tests/test_model_sizes.py compares them with the networks MindSpore builds).
"""

import math
from typing import Sequence, Tuple

RESNET_LAYERS = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3)}
RESNET_EXPANSION = {18: 1, 50: 4}
RESNET_BASE_CHANNELS = (64, 128, 256, 512)


def mlp_parameters(input_shape: Sequence[int], num_classes: int, hidden_size: int) -> int:
    """ms_exp.models.mlp: Dense(in, h), Dense(h, h), Dense(h, classes), each with a bias."""
    features = math.prod(int(size) for size in input_shape)
    return (
        (features + 1) * hidden_size
        + (hidden_size + 1) * hidden_size
        + (hidden_size + 1) * num_classes
    )


def _conv(in_channels: int, out_channels: int, kernel: int) -> int:
    return in_channels * out_channels * kernel * kernel  # no bias


def _batch_norm(channels: int) -> int:
    return 4 * channels  # gamma, beta, moving mean, moving variance


def _shortcut(in_channels: int, out_channels: int, stride: int) -> int:
    if stride == 1 and in_channels == out_channels:
        return 0
    return _conv(in_channels, out_channels, 1) + _batch_norm(out_channels)


def _block(depth: int, in_channels: int, out_channels: int, stride: int) -> int:
    if RESNET_EXPANSION[depth] == 1:  # two 3x3 convolutions (ResNet-18)
        own = (
            _conv(in_channels, out_channels, 3)
            + _conv(out_channels, out_channels, 3)
            + 2 * _batch_norm(out_channels)
        )
    else:  # the bottleneck, 1x1 -> 3x3 -> 1x1 (ResNet-50)
        inner = out_channels // RESNET_EXPANSION[depth]
        own = (
            _conv(in_channels, inner, 1)
            + _conv(inner, inner, 3)
            + _conv(inner, out_channels, 1)
            + 2 * _batch_norm(inner)
            + _batch_norm(out_channels)
        )
    return own + _shortcut(in_channels, out_channels, stride)


def resnet_channels(depth: int, width: float) -> Tuple[int, Tuple[int, ...]]:
    """The stem's channels and each stage's output channels, as create_resnet scales them.

    The bottleneck's width is scaled and the block output derived from it, so the
    bottleneck's out_channel // expansion never rounds to 0 or loses channels."""
    stem = max(1, round(64 * width))
    stages = tuple(
        max(1, round(base * width)) * RESNET_EXPANSION[depth] for base in RESNET_BASE_CHANNELS
    )
    return stem, stages


def resnet_parameters(depth: int, width: float, image_channels: int, num_classes: int) -> int:
    """ms_exp.models.resnet: stem, four stages (the first block of each with the stride),
    and the linear head."""
    stem, stages = resnet_channels(depth, width)
    total = _conv(image_channels, stem, 7) + _batch_norm(stem)
    in_channels = stem
    for blocks, out_channels, stride in zip(RESNET_LAYERS[depth], stages, (1, 2, 2, 2)):
        total += _block(depth, in_channels, out_channels, stride)
        total += (blocks - 1) * _block(depth, out_channels, out_channels, 1)
        in_channels = out_channels
    return total + (in_channels + 1) * num_classes


def wide_deep_parameters(
    vocab_size: int, field_size: int, emb_dim: int, deep_layers: Sequence[int]
) -> int:
    """ms_exp.models.wide_deep: a one-column and an emb_dim-column table over the vocabulary,
    the wide bias, and the deep MLP over the fields' embeddings."""
    total = vocab_size * (1 + emb_dim) + 1
    width = field_size * emb_dim
    for size in [*deep_layers, 1]:
        total += (width + 1) * size
        width = size
    return total
