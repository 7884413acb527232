"""Start an MLflow run and end it with the status it really had.

MLflow leaves a run RUNNING on SIGTERM and marks Ctrl-C FAILED
(docs/design.md#mlflow-run-status-on-signals): here both become an exception in the main
thread and the run ends KILLED (FAILED, with the error as a tag, for any other exception).
During training the first signal waits for the step's end and its checkpoint
(ms_exp.train.loop_control.StopOnSignal); a second stops at once.
"""

import gc
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, MappingProxyType
from typing import Any, Callable, Dict, Iterator, Mapping, NoReturn, Optional, Union

from ms_exp.tracking import provenance
from ms_exp.tracking.sidecar import SidecarTracker

EXIT_INTERRUPTED = 130


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM or SIGINT."""


class EndedEarly(Exception):
    """A job stopped on purpose before its last epoch (a trial its Optuna study pruned):
    its run ends KILLED, its reason in the ``ms_exp.ended_by`` tag."""


class StepBoundary:
    """Armed while training steps run: a signal is then held (``pending``) until the step
    ends; StopOnSignal acts on it."""

    armed = False
    pending: Optional[str] = None

    @classmethod
    def reset(cls) -> None:
        cls.armed, cls.pending = False, None


class StoppedRun:
    """The run a signal ended KILLED in this process, for the command's last line: its
    MLflow run id (None without tracking) and its folder."""

    run_id: Optional[str] = None
    run_dir: Optional[Path] = None


def _mindspore_loaded() -> bool:
    return "mindspore" in sys.modules


def signal_words(signum: int) -> str:
    """The signal as the user sent it. Once MindSpore's runtime runs, Ctrl-C reaches Python
    as SIGTERM (docs/design.md#sigint-becomes-sigterm): a SIGTERM then may be either."""
    if signum == signal.SIGINT:
        return "Ctrl-C (SIGINT)"
    if signum == signal.SIGTERM and _mindspore_loaded():
        return "Ctrl-C or SIGTERM"
    return signal.Signals(signum).name


def stopped_by(interrupt: BaseException) -> str:
    """What stopped the command, in words: a KeyboardInterrupt of Python's own handler
    (no ms_exp handler installed yet) is Ctrl-C."""
    return str(interrupt) or f"stopped by {signal_words(signal.SIGINT)}"


def _raise_terminated(signum: int, frame: Optional[FrameType]) -> None:
    words = signal_words(signum)
    if StepBoundary.armed and StepBoundary.pending is None:
        StepBoundary.pending = f"stopped by {words}"
        print(
            f"ms_exp: {words}: stopping after this step and saving a checkpoint (a second "
            "one stops at once)",
            file=sys.stderr,
            flush=True,
        )
        return
    raise Terminated(f"stopped by {words}")


# Both signals: Ctrl-C before MindSpore's runtime starts reaches Python as SIGINT; once it
# runs, MindSpore 2.10's native handler turns SIGINT into SIGTERM (seen on CPU;
# docs/design.md#sigint-becomes-sigterm).
_HANDLED = (signal.SIGTERM, signal.SIGINT)


def interruptible(command: Callable[[], int]) -> int:
    """``command()`` with SIGTERM (a scheduler's, ``kill``) and Ctrl-C ending it as an
    exception, so its ``with`` blocks unwind (temporary folders removed, an MLflow run ended
    KILLED); then exit status 130, as ``ms_exp.run`` gives."""
    with terminate_as_interrupt():
        try:
            return command()
        except KeyboardInterrupt as interrupt:
            print(
                f"ms_exp: {stopped_by(interrupt)}; its temporary files were removed",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_INTERRUPTED


def exit_process(code: int) -> NoReturn:
    """End a command's process with ``code``. Its atexit handlers still run and every object
    not in a reference cycle is still freed, but Python's last garbage collection over every
    object the process made is skipped: 0.7-1.2 s at the end of each command that imported
    MLflow or MindSpore, with nothing left to record (docs/design.md#process-exit)."""
    gc.freeze()
    sys.exit(code)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in _HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class DisabledTracker:
    """Stands in for Tracker when ``tracking.enabled=false``: every call does nothing."""

    enabled = False
    run_id = None
    experiment_id = None
    tracking_uri = None
    offline_journal = None
    model_ids: Mapping[str, str] = MappingProxyType({})

    def record_provenance(self, dataset_cfg: Any, run_dir: Path, command: str) -> None:
        # Written into the run directory even when nothing is recorded in MLflow.
        provenance.record(self, dataset_cfg, run_dir, command)

    # The rest of RunTracker (ms_exp/tracking/interface.py), spelled out so that a member
    # renamed or gone shows (tests/test_tracker_interface.py); __getattr__ answers the others.
    def log_params(self, params: Mapping[str, object]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def set_tags(self, tags: Mapping[str, object]) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: Optional[str] = None) -> None:
        pass

    def log_artifacts(self, directory: Path, artifact_path: Optional[str] = None) -> None:
        pass

    def log_artifact_to(
        self, run_id: Optional[str], path: Path, artifact_path: Optional[str] = None
    ) -> None:
        pass

    def log_model(
        self,
        name: str,
        directory: Path,
        params: Mapping[str, object],
        metrics: Mapping[str, float],
        epoch: Optional[int] = None,
        tags: Optional[Mapping[str, object]] = None,
        mlmodel: Optional[Mapping[str, object]] = None,
    ) -> None:
        pass

    def wait_for_run(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def finish(self, status: Optional[str]) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def ending_tags(status: str, error: Optional[BaseException]) -> Dict[str, str]:
    """How a run that did not finish ended, as its tags: KILLED by whom, FAILED by what."""
    if status == "KILLED":
        ended_by = stopped_by(error) if isinstance(error, KeyboardInterrupt) else str(error)
        return {"ms_exp.ended_by": ended_by}
    if status == "FAILED" and error is not None:
        return {"ms_exp.error": f"{type(error).__name__}: {error}"[:5000]}
    return {}


@contextmanager
def tracked_run(
    enabled: bool,
    tracking_uri: str,
    experiment_name: str,
    run_name: str,
    tags: Mapping[str, str],
    parent_run_id: Optional[str] = None,
    run_id: Optional[str] = None,
    offline_dir: Optional[Path] = None,
    system_metrics_interval: Optional[float] = None,
) -> Iterator[Union[SidecarTracker, DisabledTracker]]:
    """Yield a tracker for a new run, or for run ``run_id`` reopened (by the sidecar
    process while the job goes on); end the run FINISHED, KILLED or FAILED. The arguments
    are :class:`SidecarTracker`'s."""
    if not enabled:
        with terminate_as_interrupt():
            yield DisabledTracker()
        return
    tracker = SidecarTracker(
        tracking_uri,
        experiment_name,
        run_name,
        tags,
        parent_run_id,
        run_id=run_id,
        offline_dir=offline_dir,
        system_metrics_interval=system_metrics_interval,
    )
    status = "FAILED"
    try:
        with terminate_as_interrupt():
            yield tracker
        status = "FINISHED"
    except BaseException as error:
        status = "KILLED" if isinstance(error, (KeyboardInterrupt, EndedEarly)) else "FAILED"
        tracker.set_tags(ending_tags(status, error))
        raise
    finally:
        tracker.finish(status)
