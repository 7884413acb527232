"""One MLflow run seen from the process that records it (a job's sidecar, a sweep's parent
run, ``ms_exp.autolog``): params, metrics, tags, artifacts, models, status.

Metrics go to MLflow's asynchronous logging in batches about every ``SUBMIT_SECONDS``, so a
step never waits for the store nor pays per-call validation (docs/design.md#mlflow-logging-cost).
"""

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar

from mlflow.entities import Metric, Param, RunTag

from ms_exp.tracking import provenance
from ms_exp.tracking.mlmodel import write_mlmodel
from ms_exp.tracking.params import param_value

if TYPE_CHECKING:
    from mlflow import MlflowClient

# How a run ended other than FINISHED, and where a resumed run keeps them.
ENDED_TAGS = ("ms_exp.ended_by", "ms_exp.error")
EARLIER_END_TAG = "ms_exp.earlier_end"
# Merge queued metric batches for up to this long before writing them.
os.environ.setdefault("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS", "1")
SUBMIT_SECONDS = 0.5  # metrics collected before one asynchronous log_batch takes them
# MLflow's limits for one log_batch call.
_PARAMS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000
T = TypeVar("T")


class Tracker:
    """Logs to one existing MLflow run through a client bound to its store."""

    enabled = True
    offline_journal: Optional[Path] = None  # calls go to the store itself, never a journal

    def __init__(self, client: "MlflowClient", run_id: str, experiment_id: str) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.model_ids: Dict[str, str] = {}
        self._pending: List[Any] = []
        self._buffer: List[Metric] = []
        self._submitted = time.monotonic()

    @classmethod
    def start(
        cls,
        client: "MlflowClient",
        experiment_name: str,
        run_name: str,
        tags: Mapping[str, str],
        parent_run_id: Optional[str] = None,
        run_id: Optional[str] = None,
    ) -> "Tracker":
        """Create a run, or with ``run_id`` reopen that one (a resumed job, or calls kept
        while the store was unreachable): RUNNING again, everything appended to it."""
        from ms_exp.tracking.store import ensure_experiment

        if run_id:
            run = client.get_run(run_id)
            client.update_run(run_id, status="RUNNING")
            tracker = cls(client, run_id, run.info.experiment_id)
            # Running again: how its last attempt ended (killed, failed) is no longer how the
            # run ended, and is kept as ``ms_exp.earlier_end`` instead.
            ended = [run.data.tags[key] for key in ENDED_TAGS if key in run.data.tags]
            if ended:
                earlier = run.data.tags.get(EARLIER_END_TAG)
                joined = "; ".join([earlier, *ended] if earlier else ended)[-5000:]
                tracker.set_tags({EARLIER_END_TAG: joined})
                for key in ENDED_TAGS:
                    if key in run.data.tags:
                        client.delete_tag(run_id, key)
            if tags:
                tracker.set_tags(tags)
            return tracker
        experiment_id = ensure_experiment(client, experiment_name)
        if parent_run_id:
            tags = {**tags, "mlflow.parentRunId": parent_run_id}
        run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags))
        return cls(client, run.info.run_id, experiment_id)

    @property
    def tracking_uri(self) -> str:
        return self.client.tracking_uri

    def log_params(self, params: Mapping[str, object]) -> None:
        items = [Param(key, param_value(value)) for key, value in params.items()]
        for batch in _batches(items, _PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=batch)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self._buffer.extend(
            Metric(key, float(value), now, int(step)) for key, value in metrics.items()
        )
        if (
            len(self._buffer) >= _METRICS_PER_BATCH - 50
            or time.monotonic() - self._submitted >= SUBMIT_SECONDS
        ):
            self._submit()

    def log_metric_rows(self, rows: List[List[Any]]) -> None:
        """``[key, value, timestamp_ms, step]`` rows, as the sidecar receives them."""
        metrics = [
            Metric(key, float(value), int(stamp), int(step)) for key, value, stamp, step in rows
        ]
        for batch in _batches(metrics, _METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=batch)

    def _submit(self) -> None:
        """Hand the collected metrics to MLflow's asynchronous queue."""
        self._submitted = time.monotonic()
        buffer, self._buffer = self._buffer, []
        for batch in _batches(buffer, _METRICS_PER_BATCH):
            operation = self.client.log_batch(self.run_id, metrics=batch, synchronous=False)
            self._pending.append(operation)
        if len(self._pending) > 256:
            self._pending = [op for op in self._pending if not _done(op)]

    def set_tags(self, tags: Mapping[str, object]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: Path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_artifacts(self, directory: Path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path)

    def log_artifact_to(
        self, run_id: Optional[str], path: Path, artifact_path: Optional[str] = None
    ) -> None:
        """Into another run (a stage-one run owns the PCA matrix its snapshots gave); None:
        this one (its id was not known yet where the call was made: kept offline)."""
        self.client.log_artifact(run_id or self.run_id, str(path), artifact_path)

    def log_dataset(self, dataset_input: Mapping[str, object]) -> None:
        """A dataset input as journaled offline (the JSON form of MLflow's proto)."""
        from google.protobuf import json_format
        from mlflow.entities import DatasetInput
        from mlflow.protos.service_pb2 import DatasetInput as DatasetInputProto

        proto = json_format.ParseDict(dataset_input, DatasetInputProto())
        provenance.log_dataset_input(self.client, self.run_id, DatasetInput.from_proto(proto))

    def record_provenance(self, dataset_cfg: Any, run_dir: Path, command: str) -> None:
        provenance.record(self, dataset_cfg, run_dir, command)

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
        """A LoggedModel of this run: ``directory``'s files as its artifacts, ``metrics``
        linked to it (at the step the run logged that epoch's evaluation), READY, and one of
        the run's outputs. ``mlmodel``: write the directory's MLmodel file first."""
        from mlflow.entities import LoggedModelOutput, LoggedModelStatus

        if mlmodel:
            try:
                write_mlmodel(directory, mlmodel)
            except Exception as error:  # noqa: BLE001 - a model never costs the run
                print(
                    f"ms_exp: warning: no MLflow model {name!r} logged for this run "
                    f"({type(error).__name__}: {error})",
                    file=sys.stderr,
                    flush=True,
                )
                return
        self.flush()  # the run's train/epoch history places the metrics
        # One model of each name per run: a resumed run's replaces its earlier attempt's
        # (also one that attempt was killed while logging).
        for earlier in self.client.search_logged_models(
            [self.experiment_id], filter_string=f"source_run_id = '{self.run_id}'"
        ):
            if earlier.name == name:
                self.client.delete_logged_model(earlier.model_id)
        model = self.client.create_logged_model(
            self.experiment_id,
            name=name,
            source_run_id=self.run_id,
            params={key: param_value(value) for key, value in params.items()},
            tags={key: str(value) for key, value in (tags or {}).items()},
            model_type="mindspore",
        )
        model_id = model.model_id
        try:
            self.client.log_model_artifacts(model_id, str(directory))
            # The step at which the run logged the end of ``epoch`` (None: the last), so the
            # model's metrics sit on the run's own evaluation; 0 when it logged no such epoch.
            steps = [
                m.step
                for m in self.client.get_metric_history(self.run_id, "train/epoch")
                if epoch is None or int(m.value) == int(epoch)
            ]
            step = max(steps) if steps else 0
            for key, value in metrics.items():
                # The run's own point, logged again with the model's id: MLflow keeps it
                # once in the run (same key, step, value and timestamp) and links it to the
                # model (docs/design.md#mlflow-model-metrics).
                history = self.client.get_metric_history(self.run_id, key)
                point = next((m for m in history if m.step == step), None)
                self.client.log_metric(
                    self.run_id,
                    key,
                    point.value if point else float(value),
                    timestamp=point.timestamp if point else None,
                    step=step,
                    model_id=model_id,
                )
        except BaseException:
            self.client.finalize_logged_model(model_id, LoggedModelStatus.FAILED)
            raise
        self.client.finalize_logged_model(model_id, LoggedModelStatus.READY)
        self.client.log_outputs(self.run_id, [LoggedModelOutput(model_id, step)])
        self.set_tags({f"ms_exp.model.{name}": model_id})
        self.model_ids[name] = model_id

    def wait_for_run(self) -> None:
        """The run exists from the start here (see SidecarTracker)."""

    def flush(self) -> None:
        """Wait until every collected metric is in the store."""
        self._submit()
        for operation in self._pending:
            operation.wait()
        self._pending.clear()

    def finish(self, status: Optional[str]) -> None:
        self.flush()
        if status is not None:  # None: only delivered, the run left open (RunTracker.finish)
            self.client.set_terminated(self.run_id, status=status)


def _batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size``: MLflow's limits for one log_batch call."""
    return (items[start : start + size] for start in range(0, len(items), size))


def _done(operation: Any) -> bool:
    futures = getattr(operation, "_operation_futures", None)
    return futures is not None and all(f.done() for f in futures)
