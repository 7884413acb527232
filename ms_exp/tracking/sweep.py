"""One MLflow parent run per Hydra multirun, with every job's run as its child.

``SweepRun`` is a Hydra callback (``hydra.callbacks`` in conf/config.yaml), called in the
launching process. It creates the store, the experiment and the parent run there, before
any job starts: jobs creating a fresh SQLite store or a new experiment at the same time lose
runs (DESIGN.md, decision 7). The parent's id goes down to the jobs in environment
variables; a job's run carries it as the ``mlflow.parentRunId`` tag, which is how the
MLflow UI nests runs. When the sweep ends, the parent gets the job counts, its status and
``sweep/summary.csv`` (one row per child: swept values, final accuracy and loss).

Hydra's basic sweeper re-raises a failed job's exception once the batch has run and Ctrl-C
unwinds straight through it; in both cases Hydra never calls ``on_multirun_end``, so
``ms_exp.run.main`` calls ``end_active_sweep`` and the parent run is never left RUNNING.

MLflow is imported only once a sweep starts: ``ms_exp.run`` imports this module, and a
refused command line must not pay for MLflow.
"""
import csv
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ms_exp.provenance import command_line

# Read by parent_run_id() in the jobs. MLflow's own MLFLOW_RUN_ID / MLFLOW_EXPERIMENT_ID are
# not set: MLflow reads them too, and they would attach every job to the parent run itself.
PARENT_RUN_ID = "MS_EXP_PARENT_RUN_ID"
PARENT_TRACKING_URI = "MS_EXP_PARENT_TRACKING_URI"
PARENT_EXPERIMENT = "MS_EXP_PARENT_EXPERIMENT_NAME"
_ENVIRONMENT = (PARENT_RUN_ID, PARENT_TRACKING_URI, PARENT_EXPERIMENT)
SUMMARY_METRICS = ("eval/accuracy", "train/loss")

_active: Optional["SweepRun"] = None


def parent_run_id(tracking_uri: str, experiment_name: str) -> Optional[str]:
    """The parent run of a job that records to ``tracking_uri`` and ``experiment_name``.

    None outside a multirun, and for a job that sweeps ``tracking.uri`` or
    ``tracking.experiment_name`` away from the parent's: the UI nests runs only within one
    experiment, and a run id means nothing in another store."""
    if (os.environ.get(PARENT_TRACKING_URI), os.environ.get(PARENT_EXPERIMENT)) != \
            (tracking_uri, experiment_name):
        return None
    return os.environ.get(PARENT_RUN_ID)


def end_active_sweep(status: str) -> None:
    """End the running sweep's parent run with ``status`` (FAILED, KILLED); no-op if none.

    Called while another error unwinds, so a failure here is reported, not raised."""
    if _active is None:
        return
    try:
        _active.finish(status)
    except Exception as error:  # the store may be what failed
        print(f"ms_exp: could not end the sweep's MLflow run: {error}", file=sys.stderr)


def swept_keys(overrides: List[str]) -> List[str]:
    """The keys a multirun's command line sweeps (``a=1,2``, ``model=mlp,resnet``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def override_values(line: str) -> Dict[str, str]:
    """``{"optimizer.lr": "0.1"}`` from a job's ``ms_exp.overrides`` tag ("k=v k=v")."""
    values = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            values[key.lstrip("+~")] = value
    return values


class SweepRun(Callback):
    def __init__(self) -> None:
        self.tracker = None  # a Tracker on the parent run, while the sweep runs
        self.swept: List[str] = []
        self.jobs = 0
        self.failed: List[str] = []

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        global _active
        tracking = config.tracking
        if not tracking.enabled:
            return
        from mlflow import MlflowClient

        from ms_exp.tracking.store import ensure_experiment, resolve_tracking_uri
        from ms_exp.tracking.tracker import Tracker

        # Resolved as run_job resolves it, so that parent and jobs agree on the store.
        uri = resolve_tracking_uri(tracking.uri)
        client = MlflowClient(uri)
        experiment_id = ensure_experiment(client, tracking.experiment_name)
        overrides = list(config.hydra.overrides.task)
        name = (f"{tracking.run_name}-sweep" if tracking.run_name else
                f"sweep-{config.hydra.job.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        run = client.create_run(experiment_id, run_name=name, tags={
            "ms_exp.sweep": "true",
            # Hydra does not change directory (version_base 1.3), so relative is to here.
            "ms_exp.sweep.dir": str(Path(config.hydra.sweep.dir).resolve()),
            "ms_exp.sweep.overrides": " ".join(overrides),
            "ms_exp.command": command_line()[:5000],
        })
        self.tracker = Tracker(client, run.info.run_id, experiment_id)
        self.swept = swept_keys(overrides)
        os.environ.update({PARENT_RUN_ID: run.info.run_id, PARENT_TRACKING_URI: uri,
                           PARENT_EXPERIMENT: tracking.experiment_name})
        _active = self

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        self.jobs += 1
        if job_return.status == JobStatus.FAILED:
            self.failed.append(f"#{config.hydra.job.num} {' '.join(job_return.overrides)}")

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        # Only reached when no job raised; another sweeper may still report failed jobs.
        self.finish("FAILED" if self.failed else "FINISHED")

    def finish(self, status: str) -> None:
        """Summarise the children and end the parent run; only the first call counts."""
        global _active
        tracker, self.tracker = self.tracker, None
        # Cleared first: a later run in this process (tests call main() again) must not
        # become a child of a finished sweep.
        for key in _ENVIRONMENT:
            os.environ.pop(key, None)
        _active = None
        if tracker is None:
            return
        try:
            if self.failed:
                tracker.set_tags({"ms_exp.sweep.failed_jobs": "; ".join(self.failed)[:5000]})
            tracker.log_metrics({"sweep/jobs": self.jobs,
                                 "sweep/failed_jobs": len(self.failed)}, step=0)
            self._log_summary(tracker)
        finally:
            tracker.finish(status)

    def _log_summary(self, tracker) -> None:
        children, token = [], None
        while True:
            page = tracker.client.search_runs(
                [tracker.experiment_id], f"tags.mlflow.parentRunId = '{tracker.run_id}'",
                max_results=1000, order_by=["attributes.start_time ASC"], page_token=token)
            children.extend(page)
            token = page.token
            if not token:
                break
        columns = ["run_id", "run_name", "status", *self.swept, *SUMMARY_METRICS]
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "summary.csv"
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, columns)
                writer.writeheader()
                for child in children:
                    values = override_values(child.data.tags.get("ms_exp.overrides", ""))
                    writer.writerow({
                        "run_id": child.info.run_id, "run_name": child.info.run_name,
                        "status": child.info.status,
                        **{key: values.get(key, "") for key in self.swept},
                        # data.metrics holds each metric's value at its last step.
                        **{m: child.data.metrics.get(m, "") for m in SUMMARY_METRICS}})
            tracker.log_artifact(path, "sweep")
