"""Semi-auto parallel layouts on CPU: the tutorial's strategies give MindSpore's layouts, the
per-rank slices merge back bit for bit with MindSpore's own transform_checkpoints (through
``python -m ms_exp.ckpt``), and bad strategies fail with one line naming the operator."""

from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from conftest import main_in_process
from mindspore.parallel import build_searched_strategy, merge_sliced_parameter

from ms_exp.checkpoint.files import digest_file, load_verified
from ms_exp.checkpoint.transform import CkptError, merge_checkpoints, transform
from ms_exp.models.mlp import Network
from ms_exp.parallel.layout import (
    Layout,
    StrategyError,
    checkpoint_layouts,
    operator_layouts,
    operator_strategies,
    slice_for_rank,
    write_sliced_checkpoints,
    write_strategy_file,
)

TUTORIAL = {"layer1.matmul": ((2, 1), (1, 2)), "layer3.matmul": ((2, 2), (2, 1))}
DEVICES = 8


def ckpt_cli(*args, cwd=None):
    """``python -m ms_exp.ckpt args...``, its main() in this process."""
    return main_in_process("ms_exp.ckpt", [str(a) for a in args], cwd or Path.cwd())


def load(path: Path) -> dict:
    return {name: p.asnumpy() for name, p in ms.load_checkpoint(str(path)).items()}


@pytest.fixture(scope="module")
def network():
    ms.set_seed(1)
    return Network()


@pytest.fixture(scope="module")
def state(network):
    """What a Momentum training checkpoint holds: weights, moments, learning rate, step."""
    rng = np.random.default_rng(0)
    params = {p.name: p.asnumpy() for p in network.trainable_params()}
    moments = {
        f"moments.{name}": rng.standard_normal(a.shape).astype(np.float32)
        for name, a in params.items()
    }
    return {
        **params,
        **moments,
        "learning_rate": np.array(0.01, np.float32),
        "global_step": np.array([42], np.int32),
    }


@pytest.fixture(scope="module")
def sliced(tmp_path_factory, network, state):
    """8 ranks of tutorial-sharded checkpoints plus their strategy file."""
    root = tmp_path_factory.mktemp("sliced")
    layouts = operator_layouts(network, TUTORIAL, DEVICES)
    written = write_sliced_checkpoints(
        state, layouts, DEVICES, root / "checkpoints", "checkpoint", "checkpoint-1_10.ckpt"
    )
    strategy = write_strategy_file(
        root / "strategy.ckpt",
        written,
        op_strategies=operator_strategies(network, TUTORIAL, DEVICES),
    )
    return root, strategy, written


# ---------------------------------------------------------------------------------------------
# Layouts


def test_tutorial_strategies_give_mindspore_semi_auto_layouts(network):
    layouts = operator_layouts(network, TUTORIAL, DEVICES)
    # MatMul ((2,1),(1,2)): dev matrix [a,b,c] = [2,1,2], repeated factor 8/4 = 2 on the right;
    # weight tensor_map [1,0] shifted by one for the repeat.
    assert layouts["layer1.weight"] == Layout((2, 1, 2, 2), (2, 1), (784, 512))
    assert layouts["layer3.weight"] == Layout((2, 2, 1, 2), (2, 1), (512, 10))
    # No strategy: MindSpore's data parallel default, weight whole on every rank.
    assert layouts["layer2.weight"] == Layout((8, 1, 1), (1, 0), (512, 512))
    for bias, size in (("layer1.bias", 512), ("layer2.bias", 512), ("layer3.bias", 10)):
        assert layouts[bias] == Layout((8, 1), (-1,), (size,))
    assert list(layouts) == [p.name for p in network.trainable_params()]

    assert layouts["layer1.weight"].slice_shape() == (784, 256)
    assert layouts["layer3.weight"].slice_shape() == (256, 10)
    assert layouts["layer2.weight"].slice_shape() == (512, 512)
    assert [
        layouts[n].split_factor() for n in ("layer1.weight", "layer2.weight", "layer3.weight")
    ] == [2, 1, 2]
    weight = network.layer1.weight.asnumpy()
    for rank in range(DEVICES):
        piece = slice_for_rank(weight, layouts["layer1.weight"], rank)
        assert piece.shape == (784, 256) and piece.nbytes == weight.nbytes // 2


def test_each_rank_holds_the_columns_mindspore_gives_it(network):
    """dev matrix [2,1,2,2] = (a, b, c, repeat), rank = ((a*1 + b)*2 + c)*2 + repeat: the
    weight's columns follow c, so ranks 2k and 2k+1 hold the same half."""
    layout = operator_layouts(network, TUTORIAL, DEVICES)["layer1.weight"]
    weight = network.layer1.weight.asnumpy()
    for rank in range(DEVICES):
        c = (rank // 2) % 2
        np.testing.assert_array_equal(
            slice_for_rank(weight, layout, rank), weight[:, c * 256 : (c + 1) * 256]
        )
    layer3 = operator_layouts(network, TUTORIAL, DEVICES)["layer3.weight"]
    w3 = network.layer3.weight.asnumpy()
    for rank in range(DEVICES):  # (a, b, c, repeat) = [2,2,1,2]: rows follow b
        b = (rank // 2) % 2
        np.testing.assert_array_equal(slice_for_rank(w3, layer3, rank), w3[b * 256 : (b + 1) * 256])


def test_optimizer_states_follow_their_parameter_scalars_are_replicated(network, state):
    layouts = operator_layouts(network, TUTORIAL, DEVICES)
    sliced = checkpoint_layouts({k: v.shape for k, v in state.items()}, layouts)
    assert sliced["moments.layer1.weight"] == layouts["layer1.weight"]
    assert sliced["moments.layer2.bias"] == layouts["layer2.bias"]
    assert "learning_rate" not in sliced and "global_step" not in sliced


def test_strategy_file_reads_back_with_mindspore(sliced):
    _, strategy, written = sliced
    read = build_searched_strategy(str(strategy))
    assert set(read) == set(written)
    for name, layout in written.items():
        assert list(read[name].dev_matrix[0].dim) == list(layout.dev_matrix)
        assert list(read[name].tensor_map[0].dim) == list(layout.tensor_map)
        assert list(read[name].param_split_shape[0].dim) == []
        assert read[name].field == 0 and read[name].opt_weight_shard_size == 0
    from mindspore.train import node_strategy_pb2

    parsed = node_strategy_pb2.ParallelStrategyMap()
    parsed.ParseFromString(strategy.read_bytes())
    items = {
        i.node_name: [list(s.dim) for s in i.parallel_strategys.parallel_strategy]
        for i in parsed.parallel_strategy_item
    }
    assert items["layer1.matmul"] == [[2, 1], [1, 2]]
    assert items["layer3.matmul"] == [[2, 2], [2, 1]]
    assert items["layer2.matmul"] == [[8, 1], [1, 1]]


def test_each_rank_file_holds_its_slice(sliced, state):
    root, _, _ = sliced
    rank3 = load(root / "checkpoints" / "rank_3" / "checkpoint-1_10.ckpt")
    assert rank3["layer1.weight"].shape == (784, 256)
    np.testing.assert_array_equal(rank3["layer1.weight"], state["layer1.weight"][:, 256:])
    np.testing.assert_array_equal(
        rank3["moments.layer1.weight"], state["moments.layer1.weight"][:, 256:]
    )
    assert rank3["global_step"].tolist() == [42]


# ---------------------------------------------------------------------------------------------
# MindSpore's own tools give the full weights back


def test_merge_cli_gives_back_every_parameter_bit_for_bit(sliced, state, tmp_path):
    root, strategy, _ = sliced
    result = ckpt_cli(
        "merge", root / "checkpoints", "--strategy", strategy, "--output", tmp_path / "merged"
    )
    assert result.rc == 0, result.stderr
    merged_path = Path(result.stdout.strip().splitlines()[-1])
    assert merged_path == tmp_path / "merged" / "rank_0" / "checkpoint0.ckpt"
    merged = load(merged_path)
    assert set(merged) == set(state)
    for name, full in state.items():
        assert merged[name].dtype == full.dtype, name
        assert np.array_equal(merged[name], full), name
    # MindSpore's other offline tool agrees: merge_sliced_parameter with the strategy file.
    ranks = [
        ms.load_checkpoint(str(root / "checkpoints" / f"rank_{r}" / "checkpoint-1_10.ckpt"))
        for r in range(DEVICES)
    ]
    searched = build_searched_strategy(str(strategy))
    for name in ("layer1.weight", "layer3.weight", "moments.layer1.weight"):
        whole = merge_sliced_parameter([rank[name] for rank in ranks], searched)
        assert np.array_equal(whole.asnumpy(), state[name]), name


def test_sliced_safetensors_merge_bit_for_bit_with_their_digest(network, state, tmp_path):
    """checkpoint.format=safetensors: the same slices as .safetensors files merge through
    MindSpore's unified_safetensors into one file, with its digest recorded."""
    written = write_sliced_checkpoints(
        state,
        operator_layouts(network, TUTORIAL, DEVICES),
        DEVICES,
        tmp_path / "checkpoints",
        "checkpoint",
        "checkpoint-1_10.safetensors",
    )
    strategy = write_strategy_file(tmp_path / "strategy.ckpt", written)
    result = ckpt_cli(
        "merge", tmp_path / "checkpoints", "--strategy", strategy, "--output", tmp_path / "merged"
    )
    assert result.rc == 0, result.stderr
    said, shown = result.stdout.strip().splitlines()[-2:]
    assert said.startswith("merged checkpoint-1_10.safetensors (epoch 1, step 10 of the epoch)")
    merged_path = Path(shown)
    assert merged_path == tmp_path / "merged" / "rank_0" / "checkpoint0.safetensors"
    assert digest_file(merged_path).is_file()
    merged = {name: p.asnumpy() for name, p in load_verified(merged_path).items()}
    assert set(merged) == set(state)
    for name, full in state.items():
        assert merged[name].dtype == full.dtype, name
        assert np.array_equal(merged[name], full), name
    # Re-sliced for 2 ranks, they stay safetensors and hold each rank's slice.
    transform_to_two_ranks(network, state, tmp_path / "checkpoints", strategy, tmp_path)
    rank1 = load_verified(tmp_path / "two" / "rank_1" / "checkpoint1.safetensors")
    assert digest_file(tmp_path / "two" / "rank_1" / "checkpoint1.safetensors").is_file()
    np.testing.assert_array_equal(rank1["layer1.weight"].asnumpy(), state["layer1.weight"][:, 256:])
    np.testing.assert_array_equal(
        rank1["moments.layer1.weight"].asnumpy(), state["moments.layer1.weight"][:, 256:]
    )


def transform_to_two_ranks(network, state, checkpoints, strategy, tmp_path):
    """``ms_exp.ckpt transform`` of ``checkpoints`` into ``tmp_path/two``, layer1's matmul
    split over 2 ranks; returns the new strategy file."""
    dst = {"layer1.matmul": ((1, 1), (1, 2))}
    dst_strategy = write_strategy_file(
        tmp_path / "dst_strategy.ckpt",
        checkpoint_layouts(
            {k: v.shape for k, v in state.items()}, operator_layouts(network, dst, 2)
        ),
        op_strategies=operator_strategies(network, dst, 2),
    )
    result = ckpt_cli(
        "transform",
        checkpoints,
        *("--strategy", strategy, "--dst-strategy", dst_strategy, "--output", tmp_path / "two"),
    )
    assert result.rc == 0, result.stderr
    return dst_strategy


def test_transform_8_ranks_to_2_then_merge(sliced, state, network, tmp_path):
    root, strategy, _ = sliced
    dst_strategy = transform_to_two_ranks(network, state, root / "checkpoints", strategy, tmp_path)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["rank_0", "rank_1"]
    rank1 = load(tmp_path / "two" / "rank_1" / "checkpoint1.ckpt")
    np.testing.assert_array_equal(rank1["layer1.weight"], state["layer1.weight"][:, 256:])
    np.testing.assert_array_equal(rank1["layer3.weight"], state["layer3.weight"])

    merged = load(merge_checkpoints(tmp_path / "two", dst_strategy, tmp_path / "merged"))
    for name, full in state.items():
        assert np.array_equal(merged[name], full), name


def test_merge_takes_the_newest_step_not_the_last_name(sliced, state, network, tmp_path):
    """transform_checkpoints alone would take checkpoint-9_10.ckpt (last in name order)."""
    root, strategy, _ = sliced
    layouts = operator_layouts(network, TUTORIAL, DEVICES)
    stale = {k: np.zeros_like(v) for k, v in state.items()}
    write_sliced_checkpoints(
        stale, layouts, DEVICES, tmp_path, "checkpoint", "checkpoint-9_10.ckpt"
    )
    write_sliced_checkpoints(
        state, layouts, DEVICES, tmp_path, "checkpoint", "checkpoint-10_10.ckpt"
    )
    merged = load(merge_checkpoints(tmp_path, strategy, tmp_path / "merged"))
    assert np.array_equal(merged["layer1.weight"], state["layer1.weight"])


def test_transform_refuses_a_destination_strategy_missing_a_parameter(sliced, network, tmp_path):
    root, strategy, _ = sliced
    only_weights = {k: v for k, v in operator_layouts(network, {}, 2).items() if "bias" not in k}
    dst = write_strategy_file(tmp_path / "dst.ckpt", only_weights)
    with pytest.raises(CkptError, match="has no layout for layer1.bias"):
        transform(root / "checkpoints", strategy, dst, tmp_path / "out")


# ---------------------------------------------------------------------------------------------
# Errors: one line each


@pytest.mark.parametrize(
    "strategies, message",
    [
        (
            {"layer4.matmul": ((2, 1), (1, 2))},
            "strategy for 'layer4.matmul': no such operator in Network (did you mean 'layer3.matmul'?); "
            "operators that take a strategy: layer1.matmul, layer1.add, layer2.matmul, layer2.add, "
            "layer3.matmul, layer3.add",
        ),
        (
            {"layer1.matmul": ((2, 1),)},
            "strategy for 'layer1.matmul': MatMul takes 2 inputs, got 1 tuple(s) ((2, 1),)",
        ),
        (
            {"layer1.matmul": ((2, 1), (1, 2, 1))},
            "strategy for 'layer1.matmul': input 1 (layer1.weight, shape [784, 512]) has 2 dims, "
            "got 3 factors (1, 2, 1)",
        ),
        (
            {"layer3.matmul": ((1, 1), (1, 4))},
            "strategy for 'layer3.matmul': input 1 (layer3.weight) dim 1 has size 10, not divisible by 4",
        ),
        (
            {"layer1.matmul": ((2, 2), (2, 4))},
            "strategy for 'layer1.matmul': ((2, 2), (2, 4)) uses 2*2*4 = 16 devices, which does not "
            "divide device_num=8",
        ),
        (
            {"layer1.matmul": ((2, 2), (1, 2))},
            "strategy for 'layer1.matmul': inner dims sharded inconsistently: input 0 dim 1 split 2 but "
            "input 1 dim 0 split 1",
        ),
        (
            {"layer1.add": ((2, 2), (4,))},
            "strategy for 'layer1.add': broadcast dims sharded inconsistently: input 0 dim 1 split 2 but "
            "input 1 dim 0 split 4",
        ),
        (
            {"layer1.matmul": ((2, 0), (0, 2))},
            "strategy for 'layer1.matmul': input 0 factors must be positive integers, got (2, 0)",
        ),
        (
            {"relu1": ((8, 1),)},
            "strategy for 'relu1': ReLU is not supported by the CPU layout emulation "
            "(supported: MatMul, Add)",
        ),
    ],
)
def test_bad_strategy_is_one_line_naming_the_operator(network, strategies, message):
    with pytest.raises(StrategyError) as caught:
        operator_strategies(network, strategies, DEVICES)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_nested_strategies_as_in_the_config_group(network):
    nested = {"layer1": {"matmul": [[2, 1], [1, 2]]}, "layer3": {"matmul": [[2, 2], [2, 1]]}}
    assert operator_layouts(network, nested, DEVICES) == operator_layouts(
        network, TUTORIAL, DEVICES
    )


def test_sharded_bias_layout(network):
    assert operator_layouts(network, {"layer1.add": ((2, 4), (4,))}, DEVICES)[
        "layer1.bias"
    ] == Layout((2, 4), (0,), (512,))


@pytest.mark.parametrize(
    "make_args, message",
    [
        (
            lambda d: ["merge", d / "nope", "--strategy", d / "s.ckpt"],
            "{d}/nope: not a run directory, a checkpoint folder or an MLflow run id",
        ),
        (
            lambda d: ["merge", d, "--strategy", d / "missing.ckpt"],
            "no such strategy file (--strategy): {d}/missing.ckpt",
        ),
        (
            lambda d: ["merge", d, "--strategy", d / "s.ckpt"],
            "no rank_* folders in {d} (expected rank_0 ... rank_<N-1>, one per device, as "
            "ModelCheckpoint writes them)",
        ),
    ],
)
def test_cli_errors_are_one_line_exit_2(tmp_path, make_args, message):
    (tmp_path / "s.ckpt").write_bytes(b"x")
    result = ckpt_cli(*make_args(tmp_path))
    assert result.rc == 2
    assert result.stderr.splitlines() == [f"ms_exp.ckpt: error: {message.format(d=tmp_path)}"]
    assert result.stdout == ""
