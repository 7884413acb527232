"""``python -m ms_exp.worker --run-dir DIR``: one rank of a distributed job, started by msrun.

Hydra does not run here: the launching process composed and validated the config and wrote
it to ``<run dir>/config.yaml``; every rank reads it, so all ranks share one run directory
and one MLflow run (DESIGN.md, decision 2). Rank 0 logs metrics into the run named by
MLflow's own ``MLFLOW_RUN_ID``; the launching process ends the run.
"""
import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from ms_exp.config.compose import load_run_config
from ms_exp.launch import log_dir, record_worker_pid
from ms_exp.train import RESOLVED_CONFIG, train


def attach_tracker(rank_id: int):
    from ms_exp.tracking.lifecycle import DisabledTracker
    from ms_exp.tracking.tracker import Tracker

    run_id = os.environ.get("MLFLOW_RUN_ID")
    if rank_id != 0 or not run_id:
        return DisabledTracker()
    from mlflow import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    return Tracker(client, run_id, os.environ.get("MLFLOW_EXPERIMENT_ID", ""))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ms_exp.worker", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from ms_exp.context import init_env

    cfg = load_run_config(args.run_dir / RESOLVED_CONFIG)
    runtime = init_env(cfg.trainer, cfg.parallel, cfg.checkpoint.strategy)
    record_worker_pid(log_dir(cfg.parallel, args.run_dir), runtime.rank_id)
    tracker = attach_tracker(runtime.rank_id)
    result = train(cfg, args.run_dir, tracker, runtime)
    tracker.flush()
    if runtime.rank_id == 0:
        result.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
