"""Start an MLflow run and end it with the status it really had.

MLflow leaves a run RUNNING when the process gets SIGTERM and marks Ctrl-C FAILED
(DESIGN.md, decision 7). Here SIGTERM and SIGINT become an exception in the main thread, so training
unwinds through the same path as Ctrl-C, and both end the run KILLED; any other exception
ends it FAILED with the error recorded as a tag.
"""
import signal
from contextlib import contextmanager
from typing import Iterator, Mapping, Optional, Union

from mlflow import MlflowClient
from mlflow.entities import RunStatus

from ms_exp.tracking.store import ensure_experiment
from ms_exp.tracking.tracker import DisabledTracker, Tracker


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM or SIGINT."""


def _raise_terminated(signum, frame):
    raise Terminated(f"received signal {signal.Signals(signum).name}")


# Both signals: Ctrl-C before MindSpore's runtime starts reaches Python as SIGINT; once it
# runs, MindSpore 2.10's native handler turns SIGINT into SIGTERM (seen on CPU).
_HANDLED = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in _HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def tracked_run(enabled: bool, tracking_uri: str, experiment_name: str, run_name: str,
                tags: Mapping[str, str],
                parent_run_id: Optional[str] = None) -> Iterator[Union[Tracker, DisabledTracker]]:
    """Yield a Tracker for a new run; end the run FINISHED, KILLED or FAILED."""
    if not enabled:
        with terminate_as_interrupt():
            yield DisabledTracker()
        return
    client = MlflowClient(tracking_uri)
    experiment_id = ensure_experiment(client, experiment_name)
    run_tags = dict(tags)
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, run_name=run_name, tags=run_tags)
    tracker = Tracker(client, run.info.run_id, experiment_id)
    status = RunStatus.to_string(RunStatus.FAILED)
    try:
        with terminate_as_interrupt():
            yield tracker
        status = RunStatus.to_string(RunStatus.FINISHED)
    except KeyboardInterrupt as interrupt:
        status = RunStatus.to_string(RunStatus.KILLED)
        tracker.set_tags({"ms_exp.ended_by": str(interrupt) or "KeyboardInterrupt"})
        raise
    except BaseException as error:
        tracker.set_tags({"ms_exp.error": f"{type(error).__name__}: {error}"[:5000]})
        raise
    finally:
        tracker.finish(status)
