"""The sizes the preflight compares with this machine's memory (ms_exp/preflight/memory.py):
each built-in network's parameter count from its config, equal to what MindSpore builds;
the checks refuse only what cannot fit, and never the configs the suite trains."""

import pytest

from ms_exp.config.errors import ConfigError
from ms_exp.models.sizes import mlp_parameters, resnet_parameters, wide_deep_parameters
from ms_exp.preflight import memory
from ms_exp.preflight.compose import compose_config

GIB = 2**30


def mindspore_count(network) -> int:
    return sum(parameter.size for parameter in network.get_parameters())


def test_resnet_counts_are_the_model_zoos_without_building():
    # ResNet-50 and -18 for ImageNet: the zoo's trainable 25,557,032 and 11,689,512, plus
    # batch norm's moving mean and variance (53,120 and 9,600 values).
    assert resnet_parameters(50, 1.0, 3, 1000) == 25_557_032 + 53_120
    assert resnet_parameters(18, 1.0, 3, 1000) == 11_689_512 + 9_600


@pytest.mark.parametrize(
    "depth, width, channels, classes", [(18, 0.125, 1, 10), (50, 0.125, 3, 7), (50, 0.3, 2, 5)]
)
def test_resnet_counts_equal_the_networks_mindspore_builds(depth, width, channels, classes):
    from ms_exp.models.resnet import resnet

    network = resnet((channels, 32, 32), classes, depth, width)
    assert resnet_parameters(depth, width, channels, classes) == mindspore_count(network)


def test_mlp_and_wide_deep_counts_equal_the_networks_mindspore_builds():
    from ms_exp.models.mlp import mlp
    from ms_exp.models.wide_deep import wide_deep
    from ms_exp.placement.tables import Placement

    assert mlp_parameters((1, 8, 8), 10, 33) == mindspore_count(mlp((1, 8, 8), 10, 33))
    network = wide_deep((39,), 500, Placement(host_tables=False), emb_dim=4, deep_layers=(16, 8))
    assert wide_deep_parameters(500, 39, 4, [16, 8]) == mindspore_count(network)


def test_sizes_are_printed_in_binary_units():
    assert [memory.size_text(n) for n in (512, 1536, 16 * GIB, 3 * 2**41, 2**64)] == [
        "512 bytes",
        "1.5 KiB",
        "16.0 GiB",
        "6.0 TiB",
        "16.0 EiB",
    ]


def test_the_machines_memory_is_its_physical_memory_or_a_lower_limit():
    import os

    found = memory.machine_memory()
    assert 0 < found <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        (
            "model=resnet",
            "dataset=synthetic",
            "dataset.image_shape=[3,224,224]",
            "dataset.num_samples=1024",
        ),
        (
            "model=resnet",
            "model.depth=18",
            "dataset=synthetic",
            "dataset.image_shape=[3,32,32]",
            "dataset.num_samples=60000",
            "dataset.batch_size=256",
        ),
    ],
)
def test_what_the_suite_trains_fits_in_4_gib(overrides, monkeypatch):
    """ResNet-50 at 224x224 (about 100 MB of parameters, 19 MB a batch, 616 MB of synthetic
    samples) passes with far less memory than any machine running the suite has."""
    monkeypatch.setattr(memory, "machine_memory", lambda: 4 * GIB)
    memory.validate_memory(compose_config(list(overrides)))


def test_each_estimate_names_the_key_that_sizes_it(monkeypatch):
    monkeypatch.setattr(memory, "machine_memory", lambda: GIB)
    cases = {
        (
            "model=resnet",
            "dataset=synthetic",
            "dataset.image_shape=[3,32,32]",
            "model.width=40",
        ): "model.width=40.0",
        (
            "dataset=synthetic",
            "dataset.image_shape=[3,16384,16384]",
            "dataset.num_samples=64",
        ): "dataset.image_shape=[3, 16384, 16384]",
        (
            "dataset=synthetic",
            "dataset.image_shape=[3,1024,1024]",
            "dataset.batch_size=128",
        ): "dataset.batch_size=128",
        (
            "dataset=synthetic",
            "dataset.num_eval_samples=1000000",
        ): "dataset.num_eval_samples=1000000",
    }
    for overrides, refused in cases.items():
        with pytest.raises(ConfigError) as error:
            memory.validate_memory(compose_config(list(overrides)))
        assert str(error.value).startswith(f"{refused}: not allowed; "), str(error.value)
