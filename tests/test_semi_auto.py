"""The headline command: ``python -m ms_exp.run parallel=semi_auto checkpoint=sliced``.

On CPU it trains on 8 msrun ranks with the layouts emulated; its output must be what the
model-saving tutorial produces on 8 cards, and MindSpore's own transform_checkpoints must
merge the slices back into exactly the weights the same run saves integrated. Its console
(rank 0's output once, MindSpore's cluster chatter left in the logs, the global batch
explained, the sliced checkpoints' merge command last) is checked on the same job; the
console's logic is unit-tested in test_console.py."""

import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port, main_in_process, run_cli, train

# 1437 digits over 8 ranks of batch 32: 5 steps an epoch. Two epochs, the loss printed at
# every 5th step: one loss line per epoch per rank.
TUTORIAL = ("parallel=semi_auto", "trainer.epochs=2", "trainer.loss_print_interval=5")
LAST = "checkpoint-2_5.ckpt"
NOTICE = "MindSpore refuses this mode on CPU"
LOSS = re.compile(r"^epoch: \d+ step: \d+, loss is .*$", re.M)


def whole(dev_matrix, tensor_map) -> bool:
    """No tensor dim is split: each maps to nothing (-1) or to a device dim of size 1."""
    return all(m == -1 or dev_matrix[-m - 1] == 1 for m in tensor_map)


def load(path):
    import mindspore as ms

    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    """The README's headline command as a new user runs it: a fresh MLflow store, MLflow
    models logged (the default), no progress bar, two short epochs."""
    cwd = tmp_path_factory.mktemp("sliced")
    result = run_cli(
        "ms_exp.run",
        [
            *TUTORIAL,
            "checkpoint=sliced",
            "trainer.progress_bar=never",
            f"parallel.launcher.master_port={free_port()}",
        ],
        cwd,
        timeout=600,
    )
    assert result.rc == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def integrated(tmp_path_factory):
    return train(
        tmp_path_factory.mktemp("integrated"),
        *TUTORIAL,
        "checkpoint=integrated",
        f"parallel.launcher.master_port={free_port()}",
    )


@pytest.mark.distributed
@pytest.mark.e2e
def test_output_tree_is_the_tutorials_strategy_file_rank_folders_logs_and_loss_lines(sliced):
    run_dir = sliced.run_dir
    assert "parallel=semi_auto on CPU: MindSpore refuses this mode on CPU" in sliced.stdout
    assert (run_dir / "strategy.ckpt").is_file()
    for rank in range(8):
        files = {p.name for p in (run_dir / "checkpoints" / f"rank_{rank}").iterdir()}
        assert {"checkpoint-1_5.ckpt", LAST, "checkpoint-graph.meta"} <= files
        log = (run_dir / "log_output" / f"worker_{rank}.log").read_text()
        assert re.search(r"^epoch: 1 step: 5, loss is [0-9.]+$", log, re.M)
        # No API ms_exp calls is one MindSpore says it will remove.
        assert "deprecated" not in log, re.findall(r".*deprecated.*", log)
    run = sliced.store.get_run(sliced.run_id)
    assert run.data.tags["ms_exp.parallel_emulated"] == "true"
    assert run.data.tags["ms_exp.parallel_mode"] == "semi_auto"
    artifacts = {a.path for a in sliced.store.list_artifacts(sliced.run_id, "strategy")}
    assert artifacts == {"strategy/strategy.ckpt"}
    ranks = {a.path for a in sliced.store.list_artifacts(sliced.run_id, "checkpoints")}
    assert ranks == {f"checkpoints/rank_{r}" for r in range(8)}


@pytest.mark.distributed
@pytest.mark.e2e
def test_the_run_folder_holds_what_the_distributed_guide_shows(sliced):
    from test_docs import assert_listed_as_shown

    assert_listed_as_shown(
        sliced.run_dir,
        "distributed.md",
        ["", "checkpoints", "checkpoints/rank_0", "checkpoints/rank_1", "log_output"],
    )


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_sliced_run_models_its_integrated_best_and_says_why_not_its_last(sliced):
    last = sliced.run_dir / "checkpoints" / "rank_0" / LAST
    assert (
        f"no MLflow model of the last checkpoint: {last} is one rank's slice (merge the "
        "slices with ms_exp.ckpt merge, then evaluate with ms_exp.eval --checkpoint)"
    ) in sliced.stdout
    run = sliced.store.get_run(sliced.run_id)
    models = sliced.store.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{sliced.run_id}'"
    )
    assert [m.name for m in models] == ["best"]
    best = sliced.run_dir / "models" / "best" / "checkpoint.ckpt"
    assert best.read_bytes() == (last.parent / "best.ckpt").read_bytes()


@pytest.mark.distributed
@pytest.mark.e2e
def test_strategy_file_holds_mindspores_layouts(sliced):
    from ms_exp.checkpoint.transform import strategy_file_layouts

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
    full = load(integrated.run_dir / "checkpoints/rank_0" / LAST)
    for rank in range(8):
        part = load(sliced.run_dir / f"checkpoints/rank_{rank}" / LAST)
        # layer1.weight [64, 512] split 2 ways on its columns; rank r holds half c = r//2 % 2.
        assert part["layer1.weight"].shape == (64, 256)
        column = (rank // 2) % 2
        np.testing.assert_array_equal(
            part["layer1.weight"], full["layer1.weight"][:, column * 256 : (column + 1) * 256]
        )
        assert part["layer3.weight"].shape == (256, 10)
        assert part["layer2.weight"].shape == (512, 512)  # not sharded: whole on every rank
    sliced_bytes = (sliced.run_dir / "checkpoints/rank_0" / LAST).stat().st_size
    whole_bytes = (integrated.run_dir / "checkpoints/rank_0" / LAST).stat().st_size
    # layer1 and layer3 weights (and their moments) are halved; layer2 is not.
    halved = sum(full[k].nbytes for k in full if k.endswith(("layer1.weight", "layer3.weight")))
    assert sliced_bytes == pytest.approx(whole_bytes - halved / 2, rel=0.02)


@pytest.mark.distributed
@pytest.mark.e2e
def test_the_printed_merge_command_merges_the_slices_into_the_integrated_weights_bit_for_bit(
    sliced, integrated
):
    """The summary ends with the slices, the strategy file, a merge command and the eval
    command of its output; the merge, run as printed, merges with MindSpore's tool into
    exactly the weights the same run saves integrated, in the file the eval command names."""
    run_dir = sliced.run_dir
    last = sliced.stdout.splitlines()[-4:]
    assert last[0] == (
        f"sliced checkpoints (one slice per rank): {run_dir}/checkpoints/{{rank_0 ... rank_7}}"
    )
    assert last[1] == f"strategy file: {run_dir / 'strategy.ckpt'}"
    assert (run_dir / "strategy.ckpt").is_file()
    prefix = "merge them into one checkpoint: "
    assert last[2].startswith(prefix) and last[2].endswith(f"-m ms_exp.ckpt merge {run_dir}")
    merged = subprocess.run(
        shlex.split(last[2][len(prefix) :]),
        cwd=sliced.cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert list((run_dir / "checkpoints" / "merged").rglob("*.ckpt"))
    merged_file = Path(merged.stdout.strip().splitlines()[-1])
    assert merged_file.parents[1] == run_dir / "checkpoints" / "merged"
    assert last[3].startswith("then evaluate it: ")
    assert last[3].endswith(f"-m ms_exp.eval --checkpoint {merged_file}")
    merged_weights = load(merged_file)
    full = load(integrated.run_dir / "checkpoints/rank_3" / LAST)
    assert merged_weights.keys() == full.keys()
    for name in full:
        assert np.array_equal(merged_weights[name], full[name]), name


@pytest.mark.distributed
@pytest.mark.e2e
def test_merge_by_run_id_and_eval_of_the_sliced_run(sliced, tmp_path):
    # ms_exp.ckpt's main in this process (it starts no job; the printed command above runs
    # as its own process), so that only the evaluation pays for a fresh interpreter.
    merged = main_in_process(
        "ms_exp.ckpt", ["merge", sliced.run_id, "--output", str(tmp_path / "m")], sliced.cwd
    )
    assert merged.rc == 0, merged.stderr[-2000:]
    assert merged.stdout.strip().endswith("checkpoint0.ckpt")
    result = run_cli("ms_exp.eval", ["--run-id", sliced.run_id], sliced.cwd)
    assert result.rc == 0, result.stderr[-2000:]
    merged_from = (
        f"merged {LAST} (epoch 2, step 5 of the epoch) of ranks 0-7 "
        f"({sliced.run_dir / 'checkpoints'}) with the strategy file "
        f"{sliced.run_dir / 'strategy.ckpt'}"
    )
    assert f"{merged_from}, with transform_checkpoints, for this evaluation" in result.stdout
    assert re.search(r"^result: .* ckpt= (.*)$", result.stdout, re.M).group(1) == merged_from
    final = sliced.store.get_run(sliced.run_id).data.metrics["eval/accuracy"]
    printed = float(re.search(r"'accuracy': ([0-9.]+)", result.stdout).group(1))
    assert printed == pytest.approx(final, abs=1e-9)


@pytest.mark.distributed
@pytest.mark.e2e
def test_integrated_save_writes_full_weights_on_every_rank(integrated):
    first = load(integrated.run_dir / "checkpoints/rank_0" / LAST)
    for rank in range(1, 8):
        other = load(integrated.run_dir / f"checkpoints/rank_{rank}" / LAST)
        for name in first:
            np.testing.assert_array_equal(first[name], other[name])
    assert first["layer1.weight"].shape == (64, 512)


# --- the console of the same job (moved from test_console.py, which has its logic) ----


@pytest.mark.distributed
@pytest.mark.e2e
def test_console_shows_rank_0_once_and_stays_short(sliced):
    lines = (sliced.stdout + sliced.stderr).splitlines()
    assert len(lines) <= 100, "\n".join(lines)
    assert sum(NOTICE in line for line in lines) == 1
    assert [
        line
        for line in lines
        if line.startswith(
            "8 ranks x batch 32 = global batch 256: each rank trains 5 steps per epoch"
        )
    ] != []
    assert sum("global batch" in line for line in lines) == 1
    logs = sliced.run_dir / "log_output"
    # Rank 0's loss lines, each once; the other ranks' stay in their own logs.
    shown = LOSS.findall(sliced.stdout)
    assert shown == LOSS.findall((logs / "worker_0.log").read_text()) and len(shown) == 2
    assert len(LOSS.findall((logs / "worker_5.log").read_text())) == 2
    assert not any(
        "Topology build timed out" in line or line.startswith("Start worker") for line in lines
    )
    assert f"each rank's output is in {logs}/worker_<rank>.log; rank 0's is shown here" in lines
    # What msrun printed, whole, is kept.
    assert "Start worker process with rank id:7" in (logs / "launcher.log").read_text()
    # The console log holds what the console showed.
    console_log = (sliced.run_dir / "console.log").read_text()
    assert LOSS.findall(console_log) == shown and NOTICE in console_log
    assert "Start worker process" not in console_log


@pytest.mark.distributed
@pytest.mark.e2e
def test_best_checkpoint_is_written_once_by_rank_0(sliced):
    run_dir = sliced.run_dir
    assert sorted(run_dir.glob("checkpoints/rank_*/best.ckpt")) == [
        run_dir / "checkpoints/rank_0/best.ckpt"
    ]
    assert not list(run_dir.glob("checkpoints/rank_*/best.partial.ckpt"))
    # Every rank still keeps its slice of the numbered checkpoints, which merge needs.
    assert len(list(run_dir.glob(f"checkpoints/rank_*/{LAST}"))) == 8


# --- refusals: in-process, before any job starts --------------------------------------


def test_bad_shard_strategies_are_refused_in_one_line(tmp_path):
    cases = {
        "parallel.strategies.layer1.matmul=[[2,1],[2,2]]": "inner",
        "parallel.strategies.layer1.matmul=[[2,1]]": "MatMul takes 2 inputs, got 1 tuple(s)",
        "parallel.strategies.layer1.matmul=[[3,1],[1,2]]": "not divisible by 3",
        "+parallel.strategies.layer7.matmul=[[1,1],[1,1]]": "no such operator in Network",
        "parallel.device_num=6": "does not divide device_num=6",
    }
    for override, fragment in cases.items():
        result = main_in_process("ms_exp.run", ["parallel=semi_auto", override], tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.rc == 2 and len(lines) == 1, result.stderr
        assert lines[0].startswith("ms_exp: error: parallel.strategies: strategy for 'layer")
        assert fragment in lines[0]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()
