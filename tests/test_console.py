"""The console of a distributed job: rank 0's output once, MindSpore's cluster chatter left in
the logs, the global batch explained, and the sliced checkpoints' merge command last."""
import re
import shlex
import subprocess

import pytest
from conftest import free_port, run_cli

from ms_exp.job.console import LauncherFilter
from ms_exp.job.launch_plan import launch_plan
from ms_exp.preflight.compose import compose_config

NOTICE = "MindSpore refuses this mode on CPU"
LOSS = re.compile(r"^epoch: \d+ step: \d+, loss is .*$", re.M)
CHATTER = (
    "[WARNING] DISTRIBUTED(14839,7f6e2e693b80,python):2026-11-23-13:04:27.764.788 "
    "[mindspore/ccsrc/cluster/topology/cluster_context.cc:139] BuildCluster] Topology build "
    "timed out., retry(3/14400).\n")


def test_msrun_copies_only_rank_0_to_the_console(tmp_path):
    cfg = compose_config(["parallel=data", "parallel.launcher.master_port=8200"])
    argv = launch_plan(cfg.parallel, tmp_path).processes[0].argv
    assert argv[argv.index("--join=True") + 1] == "--tail_worker_log=0"


def test_filter_drops_cluster_chatter_keeps_errors_and_unknown_warnings():
    shown = LauncherFilter()
    # The retries become one line, once.
    assert shown.shown(CHATTER).startswith("ranks are still joining the cluster")
    assert shown.shown(CHATTER) is None
    for line in ("Start worker process with rank id:3, log file:x/worker_3.log. ...\n",
                 "[WARNING] ME(1:2,MainProcess):t [mindspore/parallel/cluster/process_entity/"
                 "_api.py:275] Distributed job is spawned. Waiting all processes to exit...\n",
                 "[WARNING] DISTRIBUTED(1,2,python):t [x.cc:1] PostProcess] This node 3 rank "
                 "id: 3\n",
                 "[INFO] ME(1,2,python):t [x.cc:1] F] anything at INFO\n"):
        assert shown.shown(line) is None, line
    for line in ("[ERROR] ME(1,2,python):t [x.cc:1] F] Worker process 7 exit with exception\n",
                 "[WARNING] ME(1,2,python):t [x.py:1] F] a warning no rule names\n",
                 "epoch: 1 step: 5, loss is 2.28\n"):
        assert shown.shown(line) == line


@pytest.fixture(scope="module")
def headline(tmp_path_factory):
    """The README's headline command, two short epochs: one loss line per epoch per rank."""
    cwd = tmp_path_factory.mktemp("headline")
    result = run_cli("ms_exp.run", ["parallel=semi_auto", "checkpoint=sliced",
                                    "trainer.progress_bar=never", "trainer.epochs=2",
                                    "trainer.loss_print_interval=5",
                                    f"parallel.launcher.master_port={free_port()}"],
                     cwd, timeout=600)
    assert result.rc == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.distributed
@pytest.mark.e2e
def test_console_shows_rank_0_once_and_stays_short(headline):
    lines = (headline.stdout + headline.stderr).splitlines()
    assert len(lines) <= 100, "\n".join(lines)
    assert sum(NOTICE in line for line in lines) == 1
    assert [line for line in lines if line.startswith("8 ranks x batch 32 = global batch 256: "
                                                      "each rank trains 5 steps per epoch")] \
        != []
    assert sum("global batch" in line for line in lines) == 1
    logs = headline.run_dir / "log_output"
    # Rank 0's loss lines, each once; the other ranks' stay in their own logs.
    shown = LOSS.findall(headline.stdout)
    assert shown == LOSS.findall((logs / "worker_0.log").read_text()) and len(shown) == 2
    assert len(LOSS.findall((logs / "worker_5.log").read_text())) == 2
    assert not any("Topology build timed out" in line or line.startswith("Start worker")
                   for line in lines)
    assert f"each rank's output is in {logs}/worker_<rank>.log; rank 0's is shown here" in lines
    # What msrun printed, whole, is kept.
    assert "Start worker process with rank id:7" in (logs / "launcher.log").read_text()
    # The console log holds what the console showed.
    console_log = (headline.run_dir / "console.log").read_text()
    assert LOSS.findall(console_log) == shown and NOTICE in console_log
    assert "Start worker process" not in console_log


@pytest.mark.distributed
@pytest.mark.e2e
def test_summary_ends_with_the_slices_strategy_and_a_merge_command_that_runs(headline):
    run_dir = headline.run_dir
    last = headline.stdout.splitlines()[-3:]
    assert last[0] == (f"sliced checkpoints (one slice per rank): "
                       f"{run_dir}/checkpoints/{{rank_0 ... rank_7}}")
    assert last[1] == f"strategy file: {run_dir / 'strategy.ckpt'}"
    assert (run_dir / "strategy.ckpt").is_file()
    prefix = "merge them into one checkpoint: "
    assert last[2].startswith(prefix) and last[2].endswith(f"-m ms_exp.ckpt merge {run_dir}")
    merged = subprocess.run(shlex.split(last[2][len(prefix):]), cwd=headline.cwd,
                            capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert list((run_dir / "checkpoints" / "merged").rglob("*.ckpt"))


@pytest.mark.distributed
@pytest.mark.e2e
def test_best_checkpoint_is_written_once_by_rank_0(headline):
    run_dir = headline.run_dir
    assert sorted(run_dir.glob("checkpoints/rank_*/best.ckpt")) == \
        [run_dir / "checkpoints/rank_0/best.ckpt"]
    assert not list(run_dir.glob("checkpoints/rank_*/best.partial.ckpt"))
    # Every rank still keeps its slice of the numbered checkpoints, which merge needs.
    assert len(list(run_dir.glob("checkpoints/rank_*/checkpoint-2_5.ckpt"))) == 8
