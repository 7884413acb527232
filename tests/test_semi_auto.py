"""The headline command: ``python -m ms_exp.run parallel=semi_auto checkpoint=sliced``.

On CPU it trains on 8 msrun ranks with the layouts emulated; its output must be what the
model-saving tutorial produces on 8 cards, and MindSpore's own transform_checkpoints must
merge the slices back into exactly the weights the same run saves integrated."""
import re

import numpy as np
import pytest
from conftest import free_port, run_cli, train

# 1437 digits over 8 ranks of batch 32: 5 steps an epoch, so every step prints its loss.
TUTORIAL = ("parallel=semi_auto", "trainer.epochs=1", "trainer.loss_print_interval=1")


def whole(dev_matrix, tensor_map) -> bool:
    """No tensor dim is split: each maps to nothing (-1) or to a device dim of size 1."""
    return all(m == -1 or dev_matrix[-m - 1] == 1 for m in tensor_map)


def load(path):
    import mindspore as ms

    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    return train(tmp_path_factory.mktemp("sliced"), *TUTORIAL, "checkpoint=sliced",
                 f"parallel.launcher.master_port={free_port()}")


@pytest.fixture(scope="module")
def integrated(tmp_path_factory):
    return train(tmp_path_factory.mktemp("integrated"), *TUTORIAL, "checkpoint=integrated",
                 f"parallel.launcher.master_port={free_port()}")


@pytest.mark.distributed
@pytest.mark.e2e
def test_output_tree_is_the_tutorials_strategy_file_rank_folders_logs_and_loss_lines(sliced):
    run_dir = sliced.run_dir
    assert "parallel=semi_auto on CPU: MindSpore refuses this mode on CPU" in sliced.stdout
    assert (run_dir / "strategy.ckpt").is_file()
    for rank in range(8):
        files = {p.name for p in (run_dir / "checkpoints" / f"rank_{rank}").iterdir()}
        assert {"checkpoint-1_5.ckpt", "checkpoint-graph.meta"} <= files
        log = (run_dir / "log_output" / f"worker_{rank}.log").read_text()
        assert re.search(r"^epoch: 1 step: 5, loss is [0-9.]+$", log, re.M)
    run = sliced.store.get_run(sliced.run_id)
    assert run.data.tags["ms_exp.parallel_emulated"] == "true"
    assert run.data.tags["ms_exp.parallel_mode"] == "semi_auto"
    artifacts = {a.path for a in sliced.store.list_artifacts(sliced.run_id, "strategy")}
    assert artifacts == {"strategy/strategy.ckpt"}
    ranks = {a.path for a in sliced.store.list_artifacts(sliced.run_id, "checkpoints")}
    assert ranks == {f"checkpoints/rank_{r}" for r in range(8)}


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_sliced_run_models_its_integrated_best_and_says_why_not_its_last(sliced):
    last = sliced.run_dir / "checkpoints" / "rank_0" / "checkpoint-1_5.ckpt"
    assert (f"no MLflow model of the last checkpoint: {last} is one rank's slice (merge the "
            "slices with ms_exp.ckpt merge, then evaluate with ms_exp.eval --checkpoint)"
            ) in sliced.stdout
    run = sliced.store.get_run(sliced.run_id)
    models = sliced.store.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{sliced.run_id}'")
    assert [m.name for m in models] == ["best"]
    best = sliced.run_dir / "models" / "best" / "checkpoint.ckpt"
    assert best.read_bytes() == (last.parent / "best.ckpt").read_bytes()


@pytest.mark.distributed
@pytest.mark.e2e
def test_strategy_file_holds_mindspores_layouts(sliced):
    from ms_exp.parallel.layout import strategy_file_layouts

    layouts = strategy_file_layouts(sliced.run_dir / "strategy.ckpt")
    assert layouts["layer1.weight"] == ((2, 1, 2, 2), (2, 1))
    assert layouts["moments.layer1.weight"] == ((2, 1, 2, 2), (2, 1))
    assert layouts["layer3.weight"] == ((2, 2, 1, 2), (2, 1))
    # MindSpore's data-parallel default for the unsharded layer2: its weight's dims map to
    # size-1 device dims, so it is whole on every rank.
    assert layouts["layer2.weight"] == ((8, 1, 1), (1, 0))
    assert all(whole(*layouts[name]) for name in ("layer2.weight", "layer1.bias"))


@pytest.mark.distributed
@pytest.mark.e2e
def test_each_rank_holds_its_slice_about_1_over_k_of_the_parameter(sliced, integrated):
    full = load(integrated.run_dir / "checkpoints/rank_0/checkpoint-1_5.ckpt")
    for rank in range(8):
        part = load(sliced.run_dir / f"checkpoints/rank_{rank}/checkpoint-1_5.ckpt")
        # layer1.weight [64, 512] split 2 ways on its columns; rank r holds half c = r//2 % 2.
        assert part["layer1.weight"].shape == (64, 256)
        column = (rank // 2) % 2
        np.testing.assert_array_equal(part["layer1.weight"],
                                      full["layer1.weight"][:, column * 256:(column + 1) * 256])
        assert part["layer3.weight"].shape == (256, 10)
        assert part["layer2.weight"].shape == (512, 512)  # not sharded: whole on every rank
    sliced_bytes = (sliced.run_dir / "checkpoints/rank_0/checkpoint-1_5.ckpt").stat().st_size
    whole_bytes = (integrated.run_dir / "checkpoints/rank_0/checkpoint-1_5.ckpt").stat().st_size
    # layer1 and layer3 weights (and their moments) are halved; layer2 is not.
    halved = sum(full[k].nbytes for k in full if k.endswith(("layer1.weight", "layer3.weight")))
    assert sliced_bytes == pytest.approx(whole_bytes - halved / 2, rel=0.02)


@pytest.mark.distributed
@pytest.mark.e2e
def test_merging_the_slices_with_mindspores_tool_gives_the_integrated_weights_bit_for_bit(
        sliced, integrated, tmp_path):
    merged = run_cli("ms_exp.ckpt", ["merge", str(sliced.run_dir), "--output",
                                     str(tmp_path / "merged")], sliced.cwd)
    assert merged.rc == 0, merged.stderr[-2000:]
    merged_weights = load(merged.stdout.strip().splitlines()[-1])
    full = load(integrated.run_dir / "checkpoints/rank_3/checkpoint-1_5.ckpt")
    assert merged_weights.keys() == full.keys()
    for name in full:
        assert np.array_equal(merged_weights[name], full[name]), name


@pytest.mark.distributed
@pytest.mark.e2e
def test_merge_by_run_id_and_eval_of_the_sliced_run(sliced, tmp_path):
    merged = run_cli("ms_exp.ckpt", ["merge", sliced.run_id, "--output", str(tmp_path / "m")],
                     sliced.cwd)
    assert merged.rc == 0, merged.stderr[-2000:]
    assert merged.stdout.strip().endswith("checkpoint0.ckpt")
    result = run_cli("ms_exp.eval", ["--run-id", sliced.run_id], sliced.cwd)
    assert result.rc == 0, result.stderr[-2000:]
    merged_from = (f"merged checkpoint-1_5.ckpt (epoch 1, step 5 of the epoch) of ranks 0-7 "
                   f"({sliced.run_dir / 'checkpoints'}) with the strategy file "
                   f"{sliced.run_dir / 'strategy.ckpt'}")
    assert f"{merged_from}, with transform_checkpoints, for this evaluation" in result.stdout
    assert re.search(r"^result: .* ckpt= (.*)$", result.stdout, re.M).group(1) == merged_from
    final = sliced.store.get_run(sliced.run_id).data.metrics["eval/accuracy"]
    printed = float(re.search(r"'accuracy': ([0-9.]+)", result.stdout).group(1))
    assert printed == pytest.approx(final, abs=1e-9)


@pytest.mark.distributed
@pytest.mark.e2e
def test_integrated_save_writes_full_weights_on_every_rank(integrated):
    first = load(integrated.run_dir / "checkpoints/rank_0/checkpoint-1_5.ckpt")
    for rank in range(1, 8):
        other = load(integrated.run_dir / f"checkpoints/rank_{rank}/checkpoint-1_5.ckpt")
        for name in first:
            np.testing.assert_array_equal(first[name], other[name])
    assert first["layer1.weight"].shape == (64, 512)


@pytest.mark.distributed
@pytest.mark.e2e
def test_auto_parallel_on_cpu_runs_data_parallel_layouts_and_says_so(tmp_path):
    result = train(tmp_path, "parallel=auto", "parallel.device_num=2", "checkpoint=sliced",
                   "trainer.epochs=1", f"parallel.launcher.master_port={free_port()}")
    assert "parallel=auto on CPU" in result.stdout
    assert "data-parallel layouts (every parameter whole on every rank)" in result.stdout
    from ms_exp.parallel.layout import strategy_file_layouts

    layouts = strategy_file_layouts(result.run_dir / "strategy.ckpt")
    assert layouts and all(whole(*layout) for layout in layouts.values())
    part = load(result.run_dir / "checkpoints/rank_1/checkpoint-1_22.ckpt")
    assert part["layer1.weight"].shape == (64, 512)
    run = result.store.get_run(result.run_id)
    assert run.data.params["parallel.search_mode"] == "sharding_propagation"


@pytest.mark.e2e
def test_bad_shard_strategies_are_refused_in_one_line(tmp_path):
    cases = {
        "parallel.strategies.layer1.matmul=[[2,1],[2,2]]": "inner",
        "parallel.strategies.layer1.matmul=[[2,1]]": "MatMul takes 2 inputs, got 1 tuple(s)",
        "parallel.strategies.layer1.matmul=[[3,1],[1,2]]": "not divisible by 3",
        "+parallel.strategies.layer7.matmul=[[1,1],[1,1]]": "no such operator in Network",
        "parallel.device_num=6": "does not divide device_num=6",
    }
    for override, fragment in cases.items():
        result = run_cli("ms_exp.run", ["parallel=semi_auto", override], tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.rc == 2 and len(lines) == 1, result.stderr
        assert lines[0].startswith("ms_exp: error: parallel.strategies: strategy for 'layer")
        assert fragment in lines[0]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()
