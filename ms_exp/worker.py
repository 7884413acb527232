"""``python -m ms_exp.worker --run-dir DIR``: one rank of a distributed job, started by msrun,
mpirun or the launching process itself (parallel.launcher.style; ms_exp/job/supervise.py).

Hydra does not run here: the launching process composed and validated the config and wrote
it to ``<run dir>/config.yaml``; every rank reads it, so all ranks share one run directory
and one MLflow run (docs/design.md#one-process-composes). Rank 0 logs metrics into the run
named by MLflow's own ``MLFLOW_RUN_ID`` (or, while the tracking server cannot be reached,
into the job's journal named by ``MS_EXP_MLFLOW_JOURNAL``); the launching process ends the
run.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from omegaconf import DictConfig

from ms_exp.config.errors import InvalidConfig
from ms_exp.config.run_config import RESOLVED_CONFIG, load_run_config
from ms_exp.data.headers import trust_image_checks
from ms_exp.parallel.launcher_config import log_dir
from ms_exp.parallel.ranks import (
    die_with_parent,
    environment_rank,
    forget_worker_pid,
    record_worker_pid,
)
from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.lifecycle import Terminated, exit_process, terminate_as_interrupt


def attach_tracker(rank_id: int) -> RunTracker:
    """Rank 0's tracker: a sidecar of its own that adds to the launching job's run (or, the
    server unreachable, its journal: ms_exp/tracking/journal.py) and leaves ending it to the job."""
    from ms_exp.tracking.journal import JOURNAL_VARIABLE
    from ms_exp.tracking.lifecycle import DisabledTracker
    from ms_exp.tracking.sidecar import SidecarTracker

    run_id = os.environ.get("MLFLOW_RUN_ID")
    journal = os.environ.get(JOURNAL_VARIABLE)
    if rank_id != 0 or not (run_id or journal):
        return DisabledTracker()
    uri = os.environ["MLFLOW_TRACKING_URI"]
    return SidecarTracker(uri, None, None, {}, run_id=run_id, journal=journal, ends_run=False)


EXIT_BAD_INPUT = 2


def read_checked_config(run_dir: Path) -> DictConfig:
    """The run's config.yaml, checked as ``python -m ms_exp.run`` checked it (but the master
    port msrun holds now): a file edited, damaged or written by another version since is
    refused in one line before MindSpore starts."""
    from ms_exp.config.run_config import choices_from_config
    from ms_exp.preflight.validate import validate_config

    path = run_dir / RESOLVED_CONFIG
    cfg = load_run_config(path)
    trust_image_checks(run_dir)  # image folders the launching process found whole
    try:
        validate_config(cfg, choices_from_config(cfg))
    except InvalidConfig as error:
        raise InvalidConfig(f"{path}: {error}") from None
    return cfg


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ms_exp.worker", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    die_with_parent()  # msrun or mpirun (or the launching process), which die with it
    try:
        cfg = read_checked_config(args.run_dir)
    except InvalidConfig as error:
        print(f"ms_exp.worker: error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    # MindSpore is imported only now, once this rank dies with its launcher.
    from ms_exp.train.context import init_env
    from ms_exp.train.rank import train

    logs = log_dir(cfg.parallel, args.run_dir)
    # The rank its launcher named (RANK_ID, mpirun's OMPI_COMM_WORLD_RANK) records its pid
    # before MindSpore's init, which waits for every rank: a rank stuck there can be stopped.
    announced = environment_rank()
    if announced is not None:
        record_worker_pid(logs, announced)
    runtime = init_env(cfg.trainer, cfg.parallel, cfg.checkpoint.strategy)
    if announced is not None and announced != runtime.rank_id:
        forget_worker_pid(logs, announced)
    record_worker_pid(logs, runtime.rank_id)
    tracker = attach_tracker(runtime.rank_id)
    with terminate_as_interrupt():
        try:
            result = train(cfg, args.run_dir, tracker, runtime)
        except Terminated as stop:
            # Asked to stop by the launcher (ms_exp.job.supervise.stop_ranks), checkpoint saved. A
            # clean exit: msrun SIGKILLs every rank when one exits with an error, and the
            # others may still be saving theirs.
            print(f"rank {runtime.rank_id}: {stop}: stopped", file=sys.stderr, flush=True)
            tracker.finish(None)
            return 0
    tracker.flush()
    tracker.finish(None)
    if runtime.rank_id == 0:
        result.save()
    return 0


if __name__ == "__main__":
    exit_process(main())
