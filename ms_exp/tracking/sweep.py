"""One MLflow parent run per Hydra multirun, with every job's run as its child.

``SweepRun``, a Hydra callback, creates the store, experiment and parent run before any job
starts (docs/design.md#mlflow-concurrent-first-use); the jobs' runs get the parent's id
through the environment, and the parent gets the counts, status and report at the end.

Where Hydra never calls ``on_multirun_end`` (a failed job re-raised, Ctrl-C),
``ms_exp.run.main`` calls ``end_active_sweep``. MLflow is imported only once a sweep starts.
"""

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional
from urllib.parse import unquote, urlparse

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ms_exp.tracking.provenance import command_line
from ms_exp.tracking.sweep_runs import (
    DIRECTION_TAG,
    METRIC_TAG,
    PRUNED_EPOCH_TAG,
    child_runs,
    jobs_per_device,
    override_values,
    parsed_overrides,
    short_names,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from ms_exp.tracking.sweep_report import SweepReport
    from ms_exp.tracking.tracker import Tracker

# Read by parent_run_id() in the jobs. MLflow's own MLFLOW_RUN_ID / MLFLOW_EXPERIMENT_ID are
# not set: MLflow reads them too, and they would attach every job to the parent run itself.
PARENT_RUN_ID = "MS_EXP_PARENT_RUN_ID"
PARENT_TRACKING_URI = "MS_EXP_PARENT_TRACKING_URI"
PARENT_EXPERIMENT = "MS_EXP_PARENT_EXPERIMENT_NAME"
SWEPT_KEYS = "MS_EXP_SWEPT_KEYS"  # JSON list: the keys a job's run name is made of
SWEPT_TAG = "ms_exp.swept."  # + key: a job's value of each swept key
_ENVIRONMENT = (PARENT_RUN_ID, PARENT_TRACKING_URI, PARENT_EXPERIMENT, SWEPT_KEYS)

_active: Optional["SweepRun"] = None


def parent_run_id(tracking_uri: str, experiment_name: str) -> Optional[str]:
    """The parent run of a job that records to ``tracking_uri`` and ``experiment_name``; None
    outside a multirun, and for a job that sweeps either away from the parent's: the UI nests
    runs only within one experiment, and a run id means nothing in another store."""
    parent = (os.environ.get(PARENT_TRACKING_URI), os.environ.get(PARENT_EXPERIMENT))
    return os.environ.get(PARENT_RUN_ID) if parent == (tracking_uri, experiment_name) else None


def swept_values(overrides: List[str]) -> Dict[str, str]:
    """The values a sweep's job was given for the keys the sweep varies, as typed."""
    keys = json.loads(os.environ.get(SWEPT_KEYS) or "[]")
    values = override_values(overrides)
    return {key: values[key] for key in keys if key in values}


def swept_tags(overrides: List[str]) -> Dict[str, str]:
    """``ms_exp.swept.<key>`` for each swept key: what the UI groups a sweep's runs by."""
    return {f"{SWEPT_TAG}{key}": value[:5000] for key, value in swept_values(overrides).items()}


def child_run_name(overrides: List[str]) -> Optional[str]:
    """A job's run name in a sweep: its swept values, ``rho=0.4,gamma=0.9,sigma=0.2``, so
    runs are told apart at a glance in the UI's run list and charts."""
    values = swept_values(overrides)
    if not values:
        return None
    labels = short_names(list(values))
    return ",".join(f"{label}={_short(value)}" for label, value in zip(labels, values.values()))


def _short(value: str) -> str:
    """Sampled floats (Optuna) to 4 significant digits; anything else as written."""
    try:
        number = float(value)
    except ValueError:
        return value
    return value if len(value) <= 8 else f"{number:.4g}"


def end_active_sweep(status: str) -> None:
    """End the running sweep's parent run with ``status`` (FAILED, KILLED); no-op if none.
    Called while another error unwinds, so a failure here is reported, not raised."""
    if _active is None:
        return
    try:
        _active.finish(status)
    except Exception as error:  # the store may be what failed
        print(f"ms_exp: could not end the sweep's MLflow run: {error}", file=sys.stderr)


def tag_active_sweep(tags: Dict[str, str]) -> None:
    """Tags on the running sweep's parent run (the Optuna sweeper names its study there);
    no-op when the sweep is not tracked."""
    if _active is not None and _active.tracker is not None:
        _active.tracker.set_tags(tags)


def swept_keys(config: DictConfig) -> List[str]:
    """The keys a multirun sweeps: on its command line (``a=1,2``) and in the sweeper's own
    ``hydra.sweeper.params``."""
    from omegaconf import OmegaConf

    parsed = parsed_overrides(config.hydra.overrides.task)
    keys = [o.key_or_group for _, o in parsed if o.is_sweep_override()]
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    return keys + [str(key) for key in params if str(key) not in keys]


def sweep_params(config: DictConfig) -> Dict[str, str]:
    """The parent run's params: every override of the sweep's command line as written
    (``boost.rho`` -> ``0.4,0.55,0.7``), and the sweeper's search space."""
    from omegaconf import OmegaConf

    params = override_values(config.hydra.overrides.task)
    for key, value in (OmegaConf.select(config, "hydra.sweeper.params") or {}).items():
        params.setdefault(str(key), str(value))
    return params


class SweepRun(Callback):
    def __init__(self) -> None:
        self.tracker: Optional[Tracker] = None  # on the parent run, while the sweep runs
        self.swept: List[str] = []
        self.jobs = 0
        self.failed: List[str] = []
        self.register_as: Optional[str] = None  # tracking.register_model
        self.metric: Optional[str] = None  # sweep.metric

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _active
        tracking = config.tracking
        if not tracking.enabled:
            return
        from omegaconf import OmegaConf

        from ms_exp.tracking.store import resolve_tracking_uri, store_client
        from ms_exp.tracking.tracker import Tracker

        # Resolved as run_job resolves it, so that parent and jobs agree on the store.
        uri = resolve_tracking_uri(tracking.uri)
        _end_abandoned(store_client(uri), tracking.experiment_name)
        overrides = list(config.hydra.overrides.task)
        name = (
            f"{tracking.run_name}-sweep"
            if tracking.run_name
            else f"sweep-{config.hydra.job.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        self.metric = OmegaConf.select(config, "sweep.metric", default=None)
        self.tracker = Tracker.start(
            store_client(uri),
            tracking.experiment_name,
            name,
            {
                "ms_exp.sweep": "true",
                # Hydra does not change directory (version_base 1.3), so relative is to here.
                "ms_exp.sweep.dir": str(Path(config.hydra.sweep.dir).resolve()),
                "ms_exp.sweep.overrides": shlex.join(overrides),
                "ms_exp.command": command_line()[:5000],
                **({METRIC_TAG: self.metric} if self.metric else {}),  # the report ranks by it
            },
        )
        self.tracker.log_params(sweep_params(config))
        self.swept = swept_keys(config)
        self.register_as = tracking.register_model
        os.environ.update(
            {
                PARENT_RUN_ID: self.tracker.run_id,
                PARENT_TRACKING_URI: uri,
                PARENT_EXPERIMENT: tracking.experiment_name,
                SWEPT_KEYS: json.dumps(self.swept),
            }
        )
        _active = self

    def __getstate__(self) -> Dict[str, Any]:
        # A launcher's workers (joblib's, the pool's) get a copy of Hydra's callbacks with
        # each job: the parent run stays here, and MLflow's import (2 s) out of the worker.
        return {**self.__dict__, "tracker": None}

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        # Hydra calls this for a single run too, and in a launcher's worker; only a tracked
        # sweep's launching process has a parent run (finish() counts from the store).
        if self.tracker is None:
            return
        self.jobs += 1
        from ms_exp.tracking.lifecycle import EndedEarly

        # A trial the Optuna study pruned stopped on purpose: it did not fail.
        pruned = isinstance(job_return._return_value, EndedEarly)
        if job_return.status == JobStatus.FAILED and not pruned:
            self.failed.append(
                f"{_job_number(config, self.jobs - 1)} {' '.join(job_return.overrides or [])}"
            )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.finish("FINISHED")

    def finish(self, status: str) -> None:
        """Count and summarise the children, end the parent run (FAILED if any job failed);
        only the first call counts."""
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
            parent = tracker.client.get_run(tracker.run_id)
            children = child_runs(tracker.client, parent)
            failed_runs = [c for c in children if c.info.status == "FAILED"]
            # A job can also fail before its run exists (only the callback saw it).
            failed = self.failed or [
                f"{c.info.run_name}: {c.data.tags.get('ms_exp.error', '')}" for c in failed_runs
            ]
            failures = max(len(self.failed), len(failed_runs))
            if failures and status == "FINISHED":
                status = "FAILED"
            if failed:
                tracker.set_tags({"ms_exp.sweep.failed_jobs": "; ".join(failed)[:5000]})
            # Jobs skipped as already finished (tracking.skip_finished) tagged the parent.
            tags = parent.data.tags
            skipped = sum(key.startswith("ms_exp.sweep.skipped.") for key in tags)
            finished = sum(c.info.status == "FINISHED" for c in children)
            pruned = sum(PRUNED_EPOCH_TAG in c.data.tags for c in children)
            jobs = max(self.jobs, len(children) + skipped)
            counts = f"{finished} of {jobs} jobs finished" + (
                f", {pruned} pruned" if pruned else ""
            )
            shares = jobs_per_device(children)
            per_device = "; ".join(
                f"{share}: {len(names)} ({', '.join(names)})" for share, names in shares.items()
            )
            if per_device:
                tracker.set_tags({"ms_exp.sweep.jobs_per_device": per_device[:5000]})
            tracker.log_metrics(
                {
                    "sweep/jobs": jobs,
                    "sweep/finished_jobs": finished,
                    "sweep/failed_jobs": failures,
                    "sweep/pruned_jobs": pruned,
                    "sweep/skipped_jobs": skipped,
                },
                step=0,
            )
            # Optuna's best trial, written by the sweeper into the sweep folder.
            best = Path(tags.get("ms_exp.sweep.dir", "")) / "optimization_results.yaml"
            if best.is_file():
                tracker.log_artifact(best, "sweep")
            report = _log_report(tracker)
            if self.register_as and status == "FINISHED":
                from ms_exp.tracking.registry import register_sweep_best

                # The best job's model (a sweep's jobs do not register their own); a failure
                # is said, and never changes the sweep's status.
                try:
                    register_sweep_best(
                        tracker.client,
                        tracker.run_id,
                        children,
                        self.register_as,
                        self.metric,
                        tags.get(DIRECTION_TAG),
                    )
                except Exception as error:
                    print(
                        f"ms_exp: warning: tracking.register_model={self.register_as}: not "
                        f"registered ({type(error).__name__}: {error})",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            tracker.finish(status)
        last_lines = f"\nfailed: {'; '.join(failed)[:2000]}" if failed else ""
        if per_device:
            last_lines += f"\njobs per device: {per_device[:2000]}"
        print(
            where_lines(tracker, tags.get("ms_exp.sweep.dir"), report, f"{status}, {counts}")
            + last_lines,
            flush=True,
        )


def _job_number(config: DictConfig, counted: int) -> str:
    """``#<hydra.job.num>``; the jobs counted before it when Hydra left the number unset
    (``???`` outside a multirun): reading an unset value raises, and Hydra turns a raising
    callback into a warning on every failed job."""
    from omegaconf import OmegaConf

    number = OmegaConf.select(config, "hydra.job.num", default=None)
    return f"#{counted if number is None else number}"


def _log_report(tracker: "Tracker") -> Optional["SweepReport"]:
    """The sweep report as artifacts of the parent, its table printed; a report that cannot
    be made is said (None), but never changes the sweep's status."""
    from ms_exp.tracking.sweep_report import write_report

    try:
        report = write_report(tracker.client, tracker.run_id, own_sweep=True)
    except Exception as error:
        print(f"ms_exp: no sweep report: {error}", file=sys.stderr)
        return None
    print(report.markdown, flush=True)
    return report


def where_lines(
    tracker: "Tracker", sweep_dir: Optional[str], report: Optional["SweepReport"], outcome: str
) -> str:
    """The lines a sweep prints last: where its jobs' folders, its report and its parent run
    are, the command that writes the report again and the one that opens the MLflow UI."""
    from ms_exp.tracking.store import python_command, resolve_tracking_uri
    from ms_exp.tracking.ui_links import sweep_lines, ui_lines

    uri = tracker.tracking_uri
    lines = [f"sweep folder: {sweep_dir} (a folder per job, by number)"] if sweep_dir else []
    if report is not None:
        parsed = urlparse(report.artifact_uri)  # a file: URI as the folder it names
        lines += [
            f"sweep report: {', '.join(report.files)}",
            f"  in {unquote(parsed.path) if parsed.scheme == 'file' else report.artifact_uri}",
        ]
    lines.append(
        f"MLflow parent run {tracker.run_id} (experiment {tracker.experiment_id}, "
        f"{outcome}) in {uri}"
    )
    store = "" if uri == resolve_tracking_uri(None) else f" --tracking-uri {shlex.quote(uri)}"
    lines.append(f"report again: {python_command()} -m ms_exp.report {tracker.run_id}{store}")
    if report is None:
        lines += ui_lines(uri, tracker.experiment_id, tracker.run_id)
    else:
        lines += sweep_lines(
            uri,
            tracker.experiment_id,
            tracker.run_id,
            report.ranked,
            report.metric,
            report.share_key,
        )
    return "\n".join(lines)


def _end_abandoned(client: "MlflowClient", experiment_name: str) -> None:
    """An earlier sweep (or job) killed outright left runs RUNNING: ended KILLED, said in a
    line, before this sweep's runs join them (ms_exp/tracking/abandoned.py)."""
    from ms_exp.tracking.abandoned import end_abandoned_runs

    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return
    ended = end_abandoned_runs(client, experiment.experiment_id)
    if ended:
        print(
            f"runs {', '.join(ended)} were RUNNING, their process gone: marked KILLED", flush=True
        )
