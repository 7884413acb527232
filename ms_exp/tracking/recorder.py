"""A job's calls applied to its MLflow run, as long as the store answers; kept if not.

A call MLflow refuses is the job's mistake: one warning, the run ends FAILED with the error
as a tag and the job raises at its end. An HTTP store that does not answer is nobody's: one
warning, then every call goes to the journal in the run directory
(ms_exp/tracking/journal.py), delivered if the store answers when the run ends. A local
store that cannot be opened is a refusal, so the job still stops before training. An outage
must show in seconds, not after MLflow's 4 minutes of retries (:func:`detect_outages_quickly`).
"""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

from ms_exp.tracking import journal as journals

if TYPE_CHECKING:
    from ms_exp.tracking.tracker import Tracker

ENDED_WITHOUT_STATUS = "the job's process ended without ending the run (killed?)"
_QUICK_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
_OUTAGE_STATUS = (502, 503, 504)
# Damaged lines of a journal named one by one; one damaged throughout says the rest in one.
_DAMAGE_NAMED = 5


def _say(message: str) -> None:
    print(f"ms_exp: {message}", file=sys.stderr, flush=True)


class StoreUnreachable(RuntimeError):
    """The tracking server did not answer; the journal stays for a later upload."""


def detect_outages_quickly() -> None:
    for key, value in _QUICK_HTTP.items():
        os.environ.setdefault(key, value)


def is_unreachable(error: Optional[BaseException]) -> bool:
    """Whether ``error`` (or what it was raised from) says the store did not answer."""
    import requests
    import urllib3

    from ms_exp.tracking.store import causes

    outages = (
        requests.ConnectionError,
        requests.Timeout,
        urllib3.exceptions.MaxRetryError,
        urllib3.exceptions.NewConnectionError,
        urllib3.exceptions.ProtocolError,
        ConnectionError,
        TimeoutError,
    )
    return any(
        isinstance(cause, outages)
        or getattr(getattr(cause, "response", None), "status_code", None) in _OUTAGE_STATUS
        for cause in causes(error)
    )


def outage_reason(error: Optional[BaseException]) -> str:
    text = str(error)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text or "timeout" in text.lower():
        return "no answer in time"
    for status in _OUTAGE_STATUS:
        if str(status) in text:
            return f"HTTP {status}"
    return "not reachable"


class RunRecorder:
    """Applies calls to one run: delivered while the store answers, journaled after.
    ``spec``: :meth:`Tracker.start`'s arguments and the tracking URI. Without a
    ``journal_path`` a store that does not answer counts as a refusal; with ``strict`` it
    raises :class:`StoreUnreachable` (a replay must not journal itself). ``ends_run=False``
    for rank 0 of a distributed job, whose run the launching job ends."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        journal_path: Union[str, Path, None] = None,
        ends_run: bool = True,
        strict: bool = False,
        system_metrics_interval: Optional[float] = None,
    ) -> None:
        self.spec = dict(spec)
        self.journal_path = Path(journal_path) if journal_path else None
        self.ends_run = ends_run
        self.strict = strict
        self.tracker: Optional[Tracker] = None  # the run in the store, while it answers
        self.journal: Optional[journals.JournalTracker] = None  # once it does not
        self.errors: List[str] = []
        # Seconds between system-metrics samples (None: none), taken while the run is open
        # in the store by the recorder that ends it (rank 0's is sampled by the job's).
        self.system_metrics_interval = system_metrics_interval
        self.system_metrics: Optional[Any] = None

    @property
    def run_id(self) -> Optional[str]:
        return self.tracker.run_id if self.tracker is not None else self.spec.get("run_id")

    @property
    def experiment_id(self) -> Optional[str]:
        return self.tracker.experiment_id if self.tracker is not None else None

    @property
    def model_ids(self) -> Dict[str, str]:
        if self.journal is None and self.tracker is not None:
            return dict(self.tracker.model_ids)
        return {}  # a journal's models get their ids when it is delivered

    def open(self) -> None:
        from ms_exp.tracking.store import store_client
        from ms_exp.tracking.tracker import Tracker

        detect_outages_quickly()
        if not self.ends_run and not self.spec.get("run_id"):
            self._go_offline(None)  # the launching job's run exists only in the journal
            return
        try:
            arguments = {k: v for k, v in self.spec.items() if k != "tracking_uri"}
            self.tracker = Tracker.start(store_client(self.spec["tracking_uri"]), **arguments)
        except Exception as error:
            if not self._goes_offline(error):
                raise
            self._go_offline(error)
            return
        if not self.ends_run:
            return
        from ms_exp.tracking.system_metrics import start_system_metrics

        try:
            self.system_metrics = start_system_metrics(
                self.tracker.run_id,
                self.spec["tracking_uri"],
                self.system_metrics_interval,
                resume=bool(self.spec.get("run_id")),
            )
        except Exception as error:  # noqa: BLE001 - the run goes on without them
            _say(f"warning: no system metrics ({type(error).__name__}: {error})")

    def _stop_system_metrics(self, deliver: bool = True) -> None:
        """``deliver=False``: the store stopped answering, the pending samples are dropped."""
        from ms_exp.tracking.system_metrics import stop_without_logging

        monitor, self.system_metrics = self.system_metrics, None
        if deliver and monitor is not None:
            monitor.finish()
        else:
            stop_without_logging(monitor)

    def record(self, call: str, arguments: Mapping[str, Any]) -> None:
        if self.journal is None:
            try:
                getattr(self.tracker, call)(**arguments)
                return
            except Exception as error:
                if not self._goes_offline(error):
                    self._refused(call, error)
                    return
                self._go_offline(error)
        getattr(self.journal, call)(**arguments)

    def flush(self) -> List[str]:
        if self.journal is None and self.tracker is not None:
            self.record("flush", {})
        return self.errors

    def finish(self, status: Optional[str]) -> Optional[Path]:
        """End the run with ``status`` (``None``: only flush, for rank 0); return the
        journal if it could not be delivered."""
        if self.errors and status == "FINISHED":
            self.record(
                "set_tags", {"tags": {"ms_exp.error": f"MLflow refused {self.errors[0]}"[:5000]}}
            )
            status = "FAILED"
        # Its last samples go in while the run is still RUNNING (the monitor stops logging
        # into an ended run).
        self._stop_system_metrics(deliver=self.journal is None)
        if not self.ends_run:
            self.flush()
            self._close_journal()
            return self.journal_path if self.journal_path and self.journal_path.exists() else None
        if self.journal is None and self.journal_path is not None and self.journal_path.exists():
            self._go_offline(None)  # rank 0 kept its metrics there: they come first
        self.record("finish", {"status": status})
        if self.journal is None:
            return None
        assert self.journal_path is not None  # the journal is there
        self._close_journal()
        try:
            delivered = replay(self.journal_path)
        except StoreUnreachable:
            return self.journal_path
        except Exception as error:  # noqa: BLE001 - the journal stays; the upload shows why
            _say(
                f"error: {self.journal_path}: not delivered ({type(error).__name__}:"
                f" {error}); upload with: "
                f"{journals.upload_command(journals.run_dir_of(self.journal_path))}"
            )
            return self.journal_path
        _say(f"{self.spec['tracking_uri']} answers again: {delivered}")
        return None

    def _goes_offline(self, error: Exception) -> bool:
        """Whether ``error`` is an outage the journal takes; strict, it raises
        StoreUnreachable instead."""
        if self.strict and is_unreachable(error):
            raise StoreUnreachable(outage_reason(error)) from error
        return self.journal_path is not None and is_unreachable(error)

    def _refused(self, call: str, error: Exception) -> None:
        self.errors.append(f"{call}: {type(error).__name__}: {error}")
        if len(self.errors) == 1:
            _say(f"warning: {self.errors[0]}")

    def _go_offline(self, error: Optional[BaseException]) -> None:
        assert self.journal_path is not None  # rank 0 has one; without, an outage raises
        self._stop_system_metrics(deliver=False)
        start = {**self.spec, "run_id": self.run_id}
        journal = journals.Journal(self.journal_path, start)
        self.journal = journals.JournalTracker(journal)
        self.tracker = None
        if journal.created and error is not None:
            run_dir = journals.run_dir_of(self.journal_path)
            _say(
                f"warning: tracking.uri={self.spec['tracking_uri']} is unreachable "
                f"({outage_reason(error)}); training goes on and its MLflow calls are kept "
                f"in {self.journal_path}; they are delivered when the run ends if the "
                f"server is back, else upload them with: "
                f"{journals.upload_command(run_dir)}"
            )

    def _close_journal(self) -> None:
        if self.journal is not None:
            self.journal.journal.close()


@dataclass
class Delivered:
    """What a replay put into the store, in words."""

    path: Path
    run_id: Optional[str]
    experiment_id: Optional[str]
    tracking_uri: str
    counts: Dict[str, int] = field(default_factory=dict)
    status: Optional[str] = None

    def count(self, call: str, arguments: Mapping[str, Any]) -> None:
        sizes = {
            "log_params": ("params", "params"),
            "log_metric_rows": ("rows", "metric values"),
            "set_tags": ("tags", "tags"),
        }
        if call in sizes:
            key, what = sizes[call]
            self.counts[what] = self.counts.get(what, 0) + len(arguments[key])
        elif call.startswith("log_artifact") or call == "log_dataset":
            what = "datasets" if call == "log_dataset" else "artifact uploads"
            self.counts[what] = self.counts.get(what, 0) + 1
        elif call == "log_model":
            self.counts["models"] = self.counts.get("models", 0) + 1
        elif call == "finish":
            self.status = arguments["status"]

    def __str__(self) -> str:
        what = ", ".join(f"{name}: {n}" for name, n in self.counts.items()) or "nothing new"
        ended = f", ended {self.status}" if self.status else ""
        return (
            f"run {self.run_id} (experiment {self.experiment_id}) in {self.tracking_uri}: "
            f"{what}{ended} (from {self.path})"
        )


def replay(path: Path, tracking_uri: Optional[str] = None) -> Delivered:
    """Deliver the journal at ``path`` into its run (created if it never existed), in
    ``tracking_uri`` if given, else the job's; remove it once all of it is in the store.
    Raises :class:`StoreUnreachable` when the store does not answer: the next replay goes
    on from what ``<journal>.delivered`` counts."""
    path = Path(path)
    calls, damage = journals.parse(path)
    start = calls[0] if calls else None
    if calls and start is None:
        raise ValueError(
            f"{path}: its start line (line 1) is damaged, so which run it is "
            f"for cannot be told; nothing delivered"
        )
    if start is None or start.get("call") != "start":
        raise ValueError(f"{path}: not an ms_exp MLflow journal (no start line)")
    progress = journals.Progress(path)
    spec = {k: v for k, v in start.items() if k != "call"}
    if tracking_uri:
        spec["tracking_uri"] = tracking_uri
    if progress.run_id:
        spec["run_id"] = progress.run_id
    # A run that is no longer RUNNING was ended by a later attempt (a resumed job) after
    # this journal's attempt went offline: what the journal adds is history, and how the
    # run ended stays as that attempt left it.
    ended_later = _status_if_ended(spec)
    recorder = RunRecorder(spec, strict=True)
    recorder.open()
    delivered = Delivered(path, recorder.run_id, recorder.experiment_id, spec["tracking_uri"])
    progress.save(recorder.run_id, max(progress.lines, 1))
    _skip_damage(path, damage, recorder.run_id, progress)
    finished = False
    # The lines after the start line not delivered yet (None: damaged).
    for number in range(max(progress.lines, 1), len(calls)):
        call = calls[number]
        if call is not None:
            arguments = {k: v for k, v in call.items() if k != "call"}
            if call["call"] == "finish":
                recorder.finish(ended_later or arguments["status"])
                finished = True
            else:
                recorder.record(call["call"], arguments)
            delivered.count(call["call"], arguments)
        progress.save(recorder.run_id, number + 1)
    if finished and ended_later:
        delivered.status = ended_later
    if not finished and not any(c and c["call"] == "finish" for c in calls[: progress.lines]):
        # A damaged finish line that still names its status says how the job ended.
        said = next((s for s in (line.finish_status() for line in damage) if s), None)
        if ended_later or said:
            recorder.finish(ended_later or said)
        else:
            recorder.record("set_tags", {"tags": {"ms_exp.ended_by": ENDED_WITHOUT_STATUS}})
            recorder.finish("KILLED")
        delivered.status = ended_later or said or "KILLED"
    path.unlink()
    progress.remove()
    return delivered


def _skip_damage(
    path: Path, damage: List[journals.Damage], run_id: Optional[str], progress: journals.Progress
) -> None:
    """Keep the journal's damaged lines beside it, and name those this replay skips."""
    damaged = [line for line in damage if not line.cut_off]
    kept = journals.keep_damaged(path, damaged) if damaged else None
    skipped = [line for line in damage if line.number > progress.lines]
    for line in skipped[:_DAMAGE_NAMED]:
        if line.cut_off:
            what = (
                f"line {line.number}, the last, is cut off (its job ended while writing "
                f"it) and was left out ({line.held()})"
            )
        else:
            what = f"line {line.number} is damaged and was skipped ({line.held()}); kept in {kept}"
        _say(f"warning: journal of run {run_id}: {what}")
    if len(skipped) > _DAMAGE_NAMED:
        _say(
            f"warning: journal of run {run_id}: {len(skipped) - _DAMAGE_NAMED} more "
            f"damaged lines were skipped; kept in {kept}"
        )


def _status_if_ended(spec: Mapping[str, Any]) -> Optional[str]:
    """The status of the journal's run in the store if it is no longer RUNNING; None for a
    run the journal creates, or one still RUNNING."""
    if not spec.get("run_id"):
        return None
    from ms_exp.tracking.store import store_client

    try:
        status = store_client(spec["tracking_uri"]).get_run(spec["run_id"]).info.status
    except Exception as error:  # noqa: BLE001 - opening the run below says what is wrong
        if is_unreachable(error):
            raise StoreUnreachable(outage_reason(error)) from error
        return None
    return None if status == "RUNNING" else status


def deliver_earlier_journals(run_dir: Path) -> None:
    """Before a run is resumed, the journals its earlier attempts left in ``run_dir`` go into
    the store, so the resumed job knows which steps the store holds. A store that still
    does not answer leaves them for the upload command."""
    for path in journals.journals_in(run_dir):
        try:
            delivered = replay(path)
        except StoreUnreachable as error:
            _say(
                f"warning: {path}: an earlier attempt's journal is not delivered, "
                f"the store does not answer ({error}); upload it later with: "
                f"{journals.upload_command(run_dir)}"
            )
            return
        except ValueError as error:
            _say(f"warning: {error}; left in place")
            continue
        print(f"delivered an earlier attempt's journal: {delivered}", flush=True)
