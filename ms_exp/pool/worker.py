"""The process a pool's jobs run in: started for one share of the pool (its devices, or its
CPU cores), it runs the jobs it is sent one after another, as Hydra's basic launcher runs
them in its own process, and never outlives the launching process. Its console lines are
marked with the job that printed them (ms_exp/pool/output.py).

Spawned, not forked: the visibility variables and CPU affinity must precede MindSpore's
import, and forking a threaded process is unsafe. Its own session keeps a terminal's Ctrl-C
from reaching it, so the launcher stops each job once (a second signal skips the checkpoint).
"""

import atexit
import gc
import os
import signal
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

if TYPE_CHECKING:
    from hydra.core.utils import JobReturn


@dataclass
class JobOrder:
    """What a worker needs to run one job, as Hydra's joblib launcher sends it (but
    ``config``: the job's own, which the launching process composed to size its share), and
    the launching process's environment as it is when the job starts: the worker was started
    earlier, before a sweeper put its study or the sweep its parent run there."""

    number: int
    overrides: Sequence[str]
    hydra_context: Any
    config: Any
    task_function: Any
    singleton_state: Dict[Any, Any]
    environ: Dict[str, str]


def serve(
    connection: Connection,
    env: Dict[str, str],
    cores: Optional[Sequence[int]],
    stop_timeout: float,
    tracking_uri: Optional[str],
) -> None:
    """The worker's life: take a share, then run jobs until the launcher closes the pipe.
    ``stop_timeout``: seconds a job stopped because the launcher is gone gets to save its
    checkpoint and end its MLflow run before it is killed. ``tracking_uri``: the sweep's
    store, None untracked."""
    os.setsid()
    # Ends as a command does (ms_exp.tracking.lifecycle.exit_process): MindSpore's and MLflow's
    # atexit handlers run, Python's last garbage collection (1 s here) does not.
    atexit.register(gc.freeze)
    from ms_exp.pool.output import job_mark, mark_output, set_mark

    mark_output()
    os.environ.update(env)
    if cores:
        os.sched_setaffinity(0, cores)
    threading.Thread(
        target=_stop_when_orphaned,
        args=(stop_timeout,),
        daemon=True,
        name="ms_exp-pool-orphan-watch",
    ).start()
    _prepare_for_jobs(cores, tracking_uri)
    import cloudpickle

    while True:
        try:
            order = cloudpickle.loads(connection.recv_bytes())
        except (EOFError, OSError, KeyboardInterrupt):
            return
        os.environ.clear()
        os.environ.update({**order.environ, **env})  # the share's own variables win
        set_mark(job_mark(order.number, order.overrides))
        outcome = _run(order)
        try:
            connection.send_bytes(_pickled(outcome))
        except (BrokenPipeError, OSError):
            return
        if isinstance(outcome._return_value, (KeyboardInterrupt, SystemExit)):
            return


def _run(order: JobOrder) -> "JobReturn":
    """Hydra's run_job with the job's own config, as a launcher's worker calls it (Hydra's
    joblib launcher does the same); an interrupted job comes back FAILED with its
    interruption, so the launcher learns it was stopped."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
    from omegaconf import open_dict

    setup_globals()
    Singleton.set_state(order.singleton_state)
    config = order.config
    with open_dict(config):
        config.hydra.job.id = f"{config.hydra.job.name}_{order.number}"
        config.hydra.job.num = order.number
    HydraConfig.instance().set_config(config)
    try:
        return run_job(
            hydra_context=order.hydra_context,
            config=config,
            task_function=order.task_function,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
    except BaseException as stopped:  # run_job returns what an Exception does; not these
        return JobReturn(
            list(order.overrides), config, status=JobStatus.FAILED, _return_value=stopped
        )


def _pickled(outcome: "JobReturn") -> bytes:
    """The outcome for the launcher; an exception that does not pickle goes back as text."""
    import cloudpickle

    try:
        return cloudpickle.dumps(outcome)
    except Exception:
        error = outcome._return_value
        outcome._return_value = RuntimeError(f"{type(error).__name__}: {error}")
        return cloudpickle.dumps(outcome)


def _prepare_for_jobs(cores: Optional[Sequence[int]], tracking_uri: Optional[str]) -> None:
    """What every job here needs, done before the first one arrives (the pool starts its
    workers when the sweep starts): the job's MLflow sidecar started, so that its import of
    MLflow and of the client of the sweep's store (0.6 s for SQLite) runs beside this
    process's of MindSpore's training and data modules, not while the job waits; on the CPU,
    MindSpore's kernels given as many threads as the worker's cores (25 by default, which
    two jobs on two cores would make fight)."""
    from ms_exp.tracking.sidecar import start_spare

    start_spare(tracking_uri)
    import mindspore.dataset  # noqa: F401  (what a job's data and training import first)
    import mindspore.train  # noqa: F401
    from mindspore import device_context

    if cores:
        device_context.cpu.op_tuning.threads_num(len(cores))


def _stop_when_orphaned(stop_timeout: float) -> None:
    """The launching process died (killed, or crashed): the running job is stopped as
    SIGTERM stops it (after its step, with a checkpoint, its run KILLED), then killed if
    it has not ended in ``stop_timeout`` seconds."""
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return
    wait([parent.sentinel])
    print(
        f"ms_exp: the launching process is gone; stopping this pool worker ({os.getpid()})",
        file=sys.stderr,
        flush=True,
    )
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(stop_timeout)
    os.kill(os.getpid(), signal.SIGKILL)
