"""The console of a distributed job: rank 0's output once, MindSpore's cluster chatter left in
the logs, the global batch explained, and the sliced checkpoints' merge command last.

The logic here; what the headline command's console shows is checked on its job in
test_semi_auto.py (test_console_shows_rank_0_once_and_stays_short, ...)."""

from ms_exp.job.console import LauncherFilter
from ms_exp.job.launch_plan import launch_plan
from ms_exp.preflight.compose import compose_config

CHATTER = (
    "[WARNING] DISTRIBUTED(14839,7f6e2e693b80,python):2026-11-23-13:04:27.764.788 "
    "[mindspore/ccsrc/cluster/topology/cluster_context.cc:139] BuildCluster] Topology build "
    "timed out., retry(3/14400).\n"
)


def test_msrun_copies_only_rank_0_to_the_console(tmp_path):
    cfg = compose_config(["parallel=data", "parallel.launcher.master_port=8200"])
    argv = launch_plan(cfg.parallel, tmp_path).processes[0].argv
    assert argv[argv.index("--join=True") + 1] == "--tail_worker_log=0"


def test_filter_drops_cluster_chatter_keeps_errors_and_unknown_warnings():
    shown = LauncherFilter()
    # The retries become one line, once.
    assert shown.shown(CHATTER).startswith("ranks are still joining the cluster")
    assert shown.shown(CHATTER) is None
    for line in (
        "Start worker process with rank id:3, log file:x/worker_3.log. ...\n",
        "[WARNING] ME(1:2,MainProcess):t [mindspore/parallel/cluster/process_entity/"
        "_api.py:275] Distributed job is spawned. Waiting all processes to exit...\n",
        "[WARNING] DISTRIBUTED(1,2,python):t [x.cc:1] PostProcess] This node 3 rank id: 3\n",
        "[INFO] ME(1,2,python):t [x.cc:1] F] anything at INFO\n",
    ):
        assert shown.shown(line) is None, line
    for line in (
        "[ERROR] ME(1,2,python):t [x.cc:1] F] Worker process 7 exit with exception\n",
        "[WARNING] ME(1,2,python):t [x.py:1] F] a warning no rule names\n",
        "epoch: 1 step: 5, loss is 2.28\n",
    ):
        assert shown.shown(line) == line
