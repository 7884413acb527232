"""A job's MLflow run kept by a second process, the sidecar, so training never waits for MLflow.

Importing MLflow and creating the run cost the default job about 2 s before its first step;
a thread would not hide it (the GIL), a process on the other core does
(docs/design.md#mlflow-sidecar). Every tracker call becomes one JSON line on the sidecar's
stdin, written by a thread, for a :class:`ms_exp.tracking.recorder.RunRecorder`; the job
waits only where it needs an answer (``wait_for_run``, the run's id, ``flush``/``finish``,
where a refused call raises :class:`TrackingFailed`).
"""

import contextlib
import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, TextIO, Tuple, Union

from ms_exp.tracking.journal import CallWriter, new_journal_path

SUBMIT_SECONDS = 0.5
# What the sidecar may be asked to do: Tracker's recording methods, nothing else.
RECORDING_CALLS = (
    "log_params log_metric_rows set_tags log_artifact log_artifacts log_artifact_to "
    "record_provenance log_model"
).split()


class TrackingFailed(RuntimeError):
    """The sidecar could not create the run, or MLflow refused something sent to it."""


class SidecarTracker(CallWriter):
    """The job's side: the interface of :class:`ms_exp.tracking.tracker.Tracker`."""

    enabled = True

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: Optional[str],
        run_name: Optional[str],
        tags: Mapping[str, str],
        parent_run_id: Optional[str] = None,
        run_id: Optional[str] = None,
        offline_dir: Optional[Path] = None,
        journal: Union[str, Path, None] = None,
        ends_run: bool = True,
        system_metrics_interval: Optional[float] = None,
    ) -> None:
        """``run_id``: reopen that run (a resumed job) instead of creating one.
        ``offline_dir``: where a journal is kept if the tracking server cannot be reached
        (the run directory); without it an unreachable server is an error like any other.
        Rank 0 of a distributed job passes the job's ``journal`` instead, and
        ``ends_run=False``: the launching job ends the run (ms_exp/worker.py)."""
        self.tracking_uri = tracking_uri
        if journal is None and offline_dir is not None:
            journal = new_journal_path(offline_dir)
        self.journal = Path(journal) if journal else None
        self._process = _idle_sidecar() or _new_sidecar(tracking_uri)
        self._outbox: "queue.SimpleQueue" = queue.SimpleQueue()
        self._writer = threading.Thread(
            target=self._write_lines, name="ms_exp-sidecar", daemon=True
        )
        self._writer.start()
        self._rows: List[list] = []
        self._submitted = time.monotonic()
        self._ids: Optional[Tuple[str, str]] = None
        self._start_error: Optional[TrackingFailed] = None
        self._ended = False
        self.kept_journal: Optional[Path] = None
        self._model_ids: Dict[str, str] = {}
        # A sidecar kept from an earlier job of this process works where this job does.
        self._send(
            "start",
            tracking_uri=tracking_uri,
            experiment_name=experiment_name,
            run_name=run_name,
            tags=dict(tags),
            parent_run_id=parent_run_id,
            run_id=run_id,
            journal=str(self.journal) if self.journal else None,
            ends_run=ends_run,
            system_metrics_interval=system_metrics_interval,
            cwd=os.getcwd(),
            environ={k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")},
        )

    @property
    def run_id(self) -> Optional[str]:
        """None while the server was unreachable from the start (the run is in the journal)."""
        return self._run_ids()[0]

    @property
    def experiment_id(self) -> Optional[str]:
        return self._run_ids()[1]

    @property
    def model_ids(self) -> Mapping[str, str]:
        """As of the last :meth:`flush`: the sidecar's tracker logged them."""
        return self._model_ids

    @property
    def offline_journal(self) -> Optional[Path]:
        """The journal, once the server stopped answering (or rank 0 found it so)."""
        if self.kept_journal is not None:
            return self.kept_journal
        return self.journal if self.journal is not None and self.journal.exists() else None

    def wait_for_run(self) -> None:
        """Block until the sidecar has created the run or started its journal; raise if it
        could do neither."""
        self._run_ids()

    def _run_ids(self) -> Tuple[str, str]:
        if self._start_error is not None:
            raise self._start_error
        if self._ids is None:
            try:
                reply = self._reply()
            except TrackingFailed as error:
                self._start_error = error
                raise
            if "error" in reply:
                self._start_error = TrackingFailed(
                    f"tracking.uri={self.tracking_uri}: no MLflow run could be created: "
                    f"{reply['error']}"
                )
                raise self._start_error
            self._ids = (reply["run_id"], reply["experiment_id"])
        return self._ids

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self._rows.extend([key, float(value), now, int(step)] for key, value in metrics.items())
        if time.monotonic() - self._submitted >= SUBMIT_SECONDS:
            self._submit()

    def record_provenance(self, dataset_cfg: Any, run_dir: Path, command: str) -> None:
        from omegaconf import OmegaConf

        self._send(
            "record_provenance",
            dataset_cfg=OmegaConf.to_container(dataset_cfg, resolve=True, enum_to_str=True),
            run_dir=str(Path(run_dir).absolute()),
            command=command,
        )

    def flush(self) -> None:
        """Wait until everything sent so far is in the store."""
        self._submit()
        self._run_ids()
        self._send("flush")
        reply = self._reply()
        self._raise_errors(reply)
        self._model_ids = reply["models"]

    def finish(self, status: Optional[str]) -> None:
        """End the run with ``status`` (None: only deliver what was sent, for rank 0) and
        wait until the sidecar is done with it."""
        if self._ended:
            return
        self._ended = True
        self._submit()
        try:
            self._run_ids()
        except TrackingFailed:
            self._close()
            return  # no run to end; the job has raised or raises this already
        self._send("finish", status=status)
        reply = self._reply()
        self.kept_journal = Path(reply["journal"]) if reply.get("journal") else None
        self._stop_writer()
        _IDLE.append(self._process)  # the next job of this process starts faster
        if status == "FINISHED":
            # Otherwise the job is raising its own error already (a refusal was warned of).
            self._raise_errors(reply)

    def _submit(self) -> None:
        self._submitted = time.monotonic()
        if self._rows:
            rows, self._rows = self._rows, []
            self._send("log_metric_rows", rows=rows)

    def _send(self, call: str, **arguments: Any) -> None:
        self._outbox.put({"call": call, **arguments})

    def _write_lines(self) -> None:
        stdin = self._process.stdin
        assert stdin is not None  # both pipes are opened with the process
        while True:
            message = self._outbox.get()
            if message is None:
                break
            try:
                stdin.write(json.dumps(message) + "\n")
                stdin.flush()
            except (OSError, ValueError):
                break  # the sidecar is gone; _reply reports how it ended

    def _reply(self) -> Dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait()
            if code < 0:  # killed: it printed nothing, there is no error above to read
                raise TrackingFailed(
                    f"the MLflow sidecar process (pid {self._process.pid}) was killed by "
                    f"{signal.Signals(-code).name} before answering; the run keeps what it "
                    f"had delivered (continue it with trainer.resume=auto)"
                )
            raise TrackingFailed(
                f"the MLflow sidecar process ended (exit status {code}) "
                f"before answering; its error is printed above"
            )
        return json.loads(line)

    def _stop_writer(self) -> None:
        self._outbox.put(None)
        self._writer.join()

    def _close(self) -> None:
        self._stop_writer()
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        self._process.wait()

    @staticmethod
    def _raise_errors(reply: Mapping[str, Any]) -> None:
        errors = reply.get("errors") or []
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise TrackingFailed(f"MLflow refused {errors[0]}{more}")


# Sidecars whose run has ended, kept for the next job of this process (a sweep's): a new one
# costs MLflow's import again, about 2 s. Each exits when this process does (stdin closes).
_IDLE: List[subprocess.Popen] = []


def start_spare(tracking_uri: Optional[str] = None) -> None:
    """A sidecar started now for this process's first job, so that MLflow's import (and
    that of the store of ``tracking_uri``) runs while the process composes its config and
    imports MindSpore (``ms_exp.run``, a pool's worker)."""
    _IDLE.append(_new_sidecar(tracking_uri))


def _new_sidecar(tracking_uri: Optional[str] = None) -> subprocess.Popen:
    store = [tracking_uri.split(":", 1)[0]] if tracking_uri else []
    return subprocess.Popen(
        [sys.executable, "-m", __name__, *store],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _import_ahead(scheme: Optional[str]) -> None:
    """Import what the first ``start`` needs before it comes: the job is still starting.
    MLflow imports its SQL store when a client first opens one: 1-3 s, as long as MLflow's
    own import (docs/benchmarks/overhead.md)."""
    from mlflow.store.db.db_types import DATABASE_ENGINES

    import ms_exp.tracking.recorder  # noqa: F401
    import ms_exp.tracking.tracker  # noqa: F401

    if scheme is not None and scheme.split("+")[0] in DATABASE_ENGINES:
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


def _idle_sidecar() -> Optional[subprocess.Popen]:
    while _IDLE:
        process = _IDLE.pop()
        if process.poll() is None:
            return process
    return None


# How MLflow's REST client reports a server turning a request away for its credentials.
_REFUSED = re.compile(r"error code (401|403) != 200")


def start_error(error: Exception) -> str:
    """Why no run could be created, in one line; a server that refuses the job's credentials
    (an MLflow server with authentication) says where they come from."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    refused = _REFUSED.search(text)
    if refused is None:
        return text
    given = (
        "MLFLOW_TRACKING_USERNAME is not set"
        if not os.environ.get("MLFLOW_TRACKING_USERNAME")
        else "check them"
    )
    return (
        f"the server refused the job's credentials (HTTP {refused.group(1)}): it reads "
        f"them from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD ({given})"
    )


def serve(requests: Iterable[str], replies: TextIO) -> int:
    """Open a run from a ``start`` request, record every following request into it until
    ``finish``; then wait for the next ``start``, until stdin closes."""
    from ms_exp.tracking.recorder import ENDED_WITHOUT_STATUS, RunRecorder

    recorder: Optional[RunRecorder] = None

    def answer(message: Mapping[str, object]) -> None:
        try:
            replies.write(json.dumps(message) + "\n")
            replies.flush()
        except OSError:
            # The job died before reading its answer (SIGKILL during start-up): stdin's end
            # comes next, and the run must still be ended KILLED there.
            pass

    for line in requests:
        request = json.loads(line)
        call = request.pop("call")
        if call == "start":
            try:
                # The job's working directory and MLflow variables (a kept sidecar may have
                # served a job with others).
                os.chdir(request.pop("cwd"))
                environ = request.pop("environ")
                for key in [k for k in os.environ if k.startswith("MLFLOW_") and k not in environ]:
                    del os.environ[key]
                os.environ.update(environ)
                options = {
                    "journal_path": request.pop("journal"),
                    "ends_run": request.pop("ends_run"),
                    "system_metrics_interval": request.pop("system_metrics_interval", None),
                }
                recorder = RunRecorder(request, **options)  # the rest: Tracker.start and its URI
                recorder.open()
            except Exception as error:  # reported to the job, which stops before training
                answer({"error": start_error(error)})
                return 1
            answer({"run_id": recorder.run_id, "experiment_id": recorder.experiment_id})
        elif recorder is None:
            raise ValueError(f"sidecar call {call!r} before start")
        elif call == "flush":
            answer({"errors": recorder.flush(), "models": recorder.model_ids})
        elif call == "finish":
            kept = recorder.finish(request["status"])
            answer({"errors": recorder.errors, "journal": str(kept) if kept else None})
            recorder = None
        elif call in RECORDING_CALLS:
            recorder.record(call, request)
        else:
            raise ValueError(f"unknown sidecar call {call!r}")
    if recorder is not None:
        if recorder.ends_run:
            recorder.record("set_tags", {"tags": {"ms_exp.ended_by": ENDED_WITHOUT_STATUS}})
        recorder.finish("KILLED")
    return 0


def main() -> int:
    # Ctrl-C and a group's SIGTERM are for the job; the sidecar records how it ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Replies own stdout; anything MLflow prints goes to stderr.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # MLflow's SQL store logs every failed statement with two chained tracebacks before it
    # raises (a full disk: dozens of them); the recorder reports each refusal in one line.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    _import_ahead(sys.argv[1] if len(sys.argv) > 1 else None)
    return serve(sys.stdin, replies)


if __name__ == "__main__":
    code = main()
    # Every run served has ended and MLflow has answered each of its calls (the queued ones
    # too): Python's finalization, tearing down MLflow's and SQLAlchemy's modules, would
    # keep the job's stderr open for another 1.5-1.9 s after the job has exited
    # (docs/design.md#sidecar-exit).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
