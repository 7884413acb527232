"""Hand a pool's devices to a sweep's jobs and get them back, however a job ends.

Each job waits for its share (``parallel.device_num`` devices, or CPU core sets), runs in
a worker kept for that share (MindSpore imported once per share), and gives it back however
it ends. Several threads may launch at once (Optuna's ``n_jobs``).
"""

import atexit
import multiprocessing
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hydra.core.utils import JobReturn

from ms_exp.config.errors import end_failed_sweep
from ms_exp.pool.devices import Share
from ms_exp.pool.worker import JobOrder, serve
from ms_exp.tracking.sweep import child_run_name


class Worker:
    """One worker process and the pipe to it."""

    def __init__(self, share: Share, stop_timeout: float, tracking_uri: Optional[str]) -> None:
        context = multiprocessing.get_context("spawn")
        self.share = share
        self.connection, theirs = context.Pipe()
        cores = share.units if share.accelerator == "CPU" else None  # the process is pinned there
        self.process = context.Process(
            target=serve,
            name=f"ms_exp-pool-{share.label}",
            args=(theirs, share.env, cores, stop_timeout, tracking_uri),
        )
        self.process.start()
        theirs.close()
        self.stopping = False  # told to stop its job (once: twice stops it without a checkpoint)

    def run(self, order: JobOrder) -> JobReturn:
        """The job's JobReturn; raises EOFError when the process died before answering."""
        import cloudpickle

        self.connection.send_bytes(cloudpickle.dumps(order))
        return cloudpickle.loads(self.connection.recv_bytes())

    def stop_job(self) -> None:
        if not self.stopping and self.process.is_alive():
            self.stopping = True
            self.process.terminate()  # SIGTERM: the job stops after its step, KILLED

    def hang_up(self) -> None:
        """Close the pipe: the process ends once its job has."""
        self.connection.close()

    def close(self, timeout: float) -> None:
        """Let the process end (its pipe closed), killed after ``timeout`` seconds."""
        self.hang_up()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


class DevicePool:
    """The shares of one sweep: free units, idle workers by share, and busy workers."""

    def __init__(
        self,
        accelerator: str,
        units: Sequence[int],
        stop_timeout: float,
        tracking_uri: Optional[str] = None,
    ) -> None:
        """``tracking_uri``: the sweep's MLflow store, whose client each worker's sidecar
        imports before the first job comes."""
        self.accelerator = accelerator
        self.units = list(units)
        self.stop_timeout = stop_timeout
        self.tracking_uri = tracking_uri
        self._free = list(units)
        self._idle: Dict[Tuple[int, ...], Worker] = {}
        self._busy: List[Worker] = []
        self._changed = threading.Condition()
        self._closed = False
        self.restore: Dict[int, Any] = {}  # signal -> its handler before the pool's
        # Hydra's basic sweeper reads the results: a lost job ends the sweep (LostJob).
        self.lost_jobs_end_sweep = False

    def units_of(self, worker: Worker) -> str:
        units = "cores" if self.accelerator == "CPU" else f"{self.accelerator} devices"
        return f"{units} {worker.share.label}"

    def _worker(self, units: Tuple[int, ...]) -> Worker:
        return Worker(Share(self.accelerator, units), self.stop_timeout, self.tracking_uri)

    def capacity(self, per_job: int) -> int:
        return len(self.units) // per_job

    def warm(self, per_job: int) -> None:
        """A worker started now for each share of ``per_job`` units, idle until a job takes
        it: their start (an interpreter, MindSpore, MLflow) overlaps the sweep's own."""
        with self._changed:
            for first in range(0, self.capacity(per_job) * per_job, per_job):
                share = tuple(self.units[first : first + per_job])
                self._idle[share] = self._worker(share)

    def run(self, per_job: int, order: JobOrder, stop_others: Callable[[], bool]) -> JobReturn:
        """Run one job on ``per_job`` units once they are free; its JobReturn. The units are
        back in the pool when this returns or raises."""
        from hydra.core.utils import JobStatus

        worker = self._take(per_job, stop_others)
        if worker is None:
            why = (
                "the sweep was stopped"
                if self._closed
                else "another job of the sweep failed (sweep.fail_fast)"
            )
            skipped = NotStarted(f"job #{order.number} was not started: {why}")
            return JobReturn(list(order.overrides), status=JobStatus.FAILED, _return_value=skipped)
        # Named as its MLflow run will be: by its swept values.
        name = child_run_name(list(order.overrides))
        job = f"job #{order.number}{f' ({name})' if name else ''}"
        print(f"{job} on {self.units_of(worker)} (process {worker.process.pid})", flush=True)
        alive = False
        try:
            outcome = worker.run(order)
            alive = not isinstance(outcome._return_value, (KeyboardInterrupt, SystemExit))
            return outcome
        except (EOFError, OSError):
            worker.close(self.stop_timeout)  # its pipe is gone; so is it, or it is killed
            died = WorkerDied(
                f"{job} on {self.units_of(worker)}: its worker process {worker.process.pid} "
                f"{how_it_ended(worker.process.exitcode)} before the job ended"
            )
            lost = LostJob(list(order.overrides), status=JobStatus.FAILED, _return_value=died)
            lost.ends_sweep = self.lost_jobs_end_sweep
            # Said as it happens, once: the job's own code never ran to say anything.
            print(f"ms_exp: error: {died}", file=sys.stderr, flush=True)
            return lost
        finally:
            self._give_back(worker, keep=alive and not worker.stopping)

    def stop_all(self) -> None:
        """Every running job stopped once (SIGTERM); no new job starts."""
        with self._changed:
            self._closed = True
            busy = list(self._busy)
            self._changed.notify_all()
        for worker in busy:
            worker.stop_job()

    def close(self) -> None:
        """Every worker ended: idle ones at once, running jobs stopped and given
        ``stop_timeout`` seconds to save and end their runs."""
        self.stop_all()
        with self._changed:
            workers = [*self._idle.values(), *self._busy]
            self._idle.clear()
        # Every pipe closed first: the workers end side by side (MindSpore's teardown takes
        # 1.5 s or more a process), not each after the one before.
        for worker in workers:
            worker.hang_up()
        for worker in workers:
            worker.close(self.stop_timeout)
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self.restore.items():
                signal.signal(signum, handler)
            self.restore.clear()

    def _take(self, per_job: int, stop_others: Callable[[], bool]) -> Optional[Worker]:
        with self._changed:
            while len(self._free) < per_job and not self._closed and not stop_others():
                self._changed.wait()
            if self._closed or stop_others():
                return None
            # A free share with an idle worker (MindSpore already imported there), else the
            # first free units in the pool's order.
            share = next(
                (s for s in self._idle if len(s) == per_job and all(u in self._free for u in s)),
                tuple(sorted(self._free, key=self.units.index)[:per_job]),
            )
            for unit in share:
                self._free.remove(unit)
            worker = self._idle.pop(share, None)
            # An idle worker on any of these units may still hold device memory there.
            retired = [self._idle.pop(key) for key in list(self._idle) if set(key) & set(share)]
        if worker is not None and not worker.process.is_alive():
            retired.append(worker)  # it died while idle (killed, out of memory): a new one
            worker = None
        for old in retired:
            old.close(self.stop_timeout)
        if worker is None:
            worker = self._worker(share)
        with self._changed:
            self._busy.append(worker)
        return worker

    def _give_back(self, worker: Worker, keep: bool) -> None:
        with self._changed:
            self._busy.remove(worker)
            self._free.extend(worker.share.units)
            if keep and not self._closed:
                self._idle[worker.share.units] = worker
            self._changed.notify_all()
        if not keep or self._closed:
            worker.close(self.stop_timeout)


class NotStarted(RuntimeError):
    """A job not started: another one of a fail-fast sweep failed, or the sweep stopped."""


class WorkerDied(RuntimeError):
    """The job's process ended without answering (killed, out of memory, a crash)."""


class LostJob(JobReturn):
    """A job whose worker process died, its line printed as that was found. Read by Hydra's
    basic sweeper (``ends_sweep``) as the sweep's first failure, it ends the sweep
    (end_failed_sweep: Hydra would add a traceback of this module's code). Other readers (the
    Optuna sweeper) get WorkerDied, a failure like any other."""

    ends_sweep = False

    @property
    def return_value(self) -> Any:
        if self.ends_sweep:
            end_failed_sweep()
        raise self._return_value

    @return_value.setter
    def return_value(self, value: Any) -> None:
        self._return_value = value


def how_it_ended(exitcode: Optional[int]) -> str:
    """``was killed by SIGKILL``, ``exited with code 0``: from multiprocessing's exitcode."""
    if exitcode is None:
        return "ended"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def launch_jobs(
    pool: DevicePool, orders: Sequence[JobOrder], share_of: Callable[[int], int], fail_fast: bool
) -> List[JobReturn]:
    """Every job of ``orders`` on the pool, as many at once as it has shares for; each
    job's JobReturn in order. ``share_of(index)``: the units job ``index`` holds, asked as
    it is about to start. Ctrl-C or SIGTERM here stops every running job once, waits for
    them, then goes on up."""
    from hydra.core.utils import JobStatus

    failed = threading.Event()

    def one(index: int) -> JobReturn:
        outcome = pool.run(
            share_of(index), orders[index], stop_others=lambda: fail_fast and failed.is_set()
        )
        if outcome.status == JobStatus.FAILED:
            failed.set()
        return outcome

    # Threads enough for every share the first job's size makes; jobs holding more units
    # wait for them in their thread.
    most = max(1, min(len(orders), pool.capacity(share_of(0)))) if orders else 1
    executor = ThreadPoolExecutor(max_workers=most, thread_name_prefix="ms_exp-pool")
    futures = [executor.submit(one, index) for index in range(len(orders))]
    try:
        return [future.result() for future in futures]
    except BaseException:
        pool.stop_all()
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


# The pools of this process, closed when the command ends (ms_exp.run) or, at the latest,
# when the interpreter exits.
_open: List[DevicePool] = []


def close_pools() -> None:
    while _open:
        _open.pop().close()


atexit.register(close_pools)


def keep_until_closed(pool: DevicePool) -> DevicePool:
    if pool not in _open:
        _open.append(pool)
    return pool


def open_pool(pool: DevicePool) -> DevicePool:
    """``pool``, closed with the others (close_pools). SIGINT and SIGTERM to this process
    first stop its running jobs, then do what they did before (ms_exp.run turns them into
    KeyboardInterrupt). Without it a signal raised in the main thread while the Optuna
    sweeper's threads wait for their trials would wait forever. Only the main thread can set
    handlers (Hydra sets the launcher up there); close() puts the earlier ones back."""
    keep_until_closed(pool)
    if threading.current_thread() is not threading.main_thread():
        return pool
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        pool.restore[signum] = previous

        def handler(number: int, frame: Optional[FrameType], previous: Any = previous) -> None:
            pool.stop_all()
            if callable(previous):
                previous(number, frame)
            else:
                signal.signal(number, signal.SIG_DFL)
                signal.raise_signal(number)

        signal.signal(signum, handler)
    return pool
