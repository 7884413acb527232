import mindspore as ms
import numpy as np
import pytest

from ms_exp.models.resnet import create_resnet


def _trainable_params(net):
    return sum(p.size for p in net.trainable_params())


@pytest.mark.parametrize("depth, expected", [(18, 11_689_512), (50, 25_557_032)])
def test_standard_width_matches_reference_parameter_count(depth, expected):
    # Reference counts of the canonical ImageNet ResNet-18/50 with a 1000-class head.
    net = create_resnet(depth, num_classes=1000)
    assert _trainable_params(net) == pytest.approx(expected, rel=0.01)


@pytest.fixture
def restore_mode():
    mode = ms.get_context("mode")
    yield
    ms.set_context(mode=mode)


# Both block kinds (18: basic, 50: bottleneck) op by op (PyNative); compiled as a graph
# only the smaller, where compiling ResNet-50 would take seconds of the fast lane.
@pytest.mark.parametrize(
    "depth, mode", [(18, ms.PYNATIVE_MODE), (18, ms.GRAPH_MODE), (50, ms.PYNATIVE_MODE)]
)
def test_tiny_network_logits_shape_on_32x32(depth, mode, restore_mode):
    ms.set_context(mode=mode)
    net = create_resnet(depth, num_classes=7, width=0.125)
    net.set_train(False)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32))
    out = net(x)
    assert out.shape == (3, 7)
    assert np.isfinite(out.asnumpy()).all()


def test_unsupported_depth_is_rejected():
    with pytest.raises(ValueError, match=r"^model\.depth=34: allowed values are 18, 50$"):
        create_resnet(34, num_classes=10)
