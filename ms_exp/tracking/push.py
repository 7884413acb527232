"""Copying runs from one MLflow store to another (``python -m ms_exp.runs push``): a cluster
trains into its local store, and its runs go to the team's server afterwards.

Each target run keeps where it came from in two tags (``ms_exp.pushed.from_store``,
``ms_exp.pushed.from_run``), set in the request that creates it, and each copied logged model
its source's id (``ms_exp.pushed.from_model``), set as it is created. A push compares both
sides and copies only what the target lacks: params, metric values (key, step, timestamp and
value), artifacts (path and size: a file cut short by a kill is sent again), models, dataset
inputs, then the tags with every run and model id translated to the target's, and the status
last. A second push copies nothing, a run continued after its push gains only what is new,
and a push killed half-way and started again ends as one push would have. A run id is a
random UUID, so the source run id alone finds the copy, also when the store file moved.
"""

import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ms_exp.tracking.compare import CompareError, experiment_ids
from ms_exp.tracking.registry import REGISTERED_TAG
from ms_exp.tracking.store import (
    ensure_experiment,
    password_refusal,
    quiet_artifact_downloads,
    resolve_tracking_uri,
    sqlite_path,
    store_client,
)
from ms_exp.tracking.sweep_runs import ReportError, all_pages, find_sweep
from ms_exp.tracking.ui_links import ui_lines

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import LoggedModel, Run

FROM_STORE = "ms_exp.pushed.from_store"
FROM_RUN = "ms_exp.pushed.from_run"
FROM_MODEL = "ms_exp.pushed.from_model"
# The registry's record on a logged model, which the target's registry keeps itself.
VERSIONS_TAG = "mlflow.modelVersions"
BATCH = 1000  # MLflow's most metrics in one log_batch


def size_text(size: float) -> str:
    """``size`` bytes in decimal units, as the summary line says them: 1.2 GB."""
    if size < 1000:
        return f"{size:.0f} bytes"
    for unit in ("kB", "MB"):
        size /= 1000
        if size < 1000:
            return f"{size:.1f} {unit}"
    return f"{size / 1000:.1f} GB"


def open_target(to: str, source_uri: str) -> "MlflowClient":
    """A client of the store ``to``, refused (CompareError) when it is the source or does
    not answer."""
    from ms_exp.tracking.recorder import detect_outages_quickly, is_unreachable, outage_reason

    to_db, source_db = sqlite_path(to), sqlite_path(source_uri)
    if to_db is not None and source_db is not None:
        same = to_db.resolve() == source_db.resolve()
    else:
        same = to.rstrip("/").lower() == source_uri.rstrip("/").lower()
    if same:
        raise CompareError(
            f"--to: {to}: it is the source store ({source_uri}); expected another MLflow "
            "store, e.g. the team's server http://host:5000"
        )
    detect_outages_quickly()  # seconds, not MLflow's minutes of retries, for a dead server
    try:
        return store_client(to)
    except Exception as error:
        status = getattr(getattr(error, "response", None), "status_code", None)
        why = (
            f"it does not answer ({outage_reason(error)})"
            if is_unreachable(error)
            else str(error).splitlines()[0][:200]
        )
        if status in (401, 403) or "401" in why or "403" in why:
            why = (
                "it refused the credentials (read from MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD)"
            )
        raise CompareError(
            f"--to: {to}: {why}; expected a reachable MLflow tracking server or store"
        ) from None


def select_for_push(
    client: "MlflowClient",
    experiment: Optional[str],
    sweep: Optional[str],
    run_ids: Sequence[str],
) -> List["Run"]:
    """The runs to push, every parent before its children: the experiment's (default:
    every experiment's), or the sweep's parent and jobs, or the runs named and what is
    recorded under them; each with the runs above it, so parent and child stay linked."""
    _, ids = experiment_ids(client, experiment)
    runs = {r.info.run_id: r for r in all_pages(client.search_runs, experiment_ids=ids)}
    wanted = list(run_ids)
    for run_id in wanted:
        if run_id not in runs:
            raise CompareError(
                f"--run: {run_id}: no such run in {client.tracking_uri}"
                + (f" experiment {experiment!r}" if experiment else "")
                + "; expected the id of a run in that store (python -m ms_exp.runs list)"
            )
    if sweep is not None:
        try:
            wanted.append(find_sweep(client, sweep))
        except ReportError as error:
            raise CompareError(
                f"--sweep: {sweep}: {error}; expected the parent run id or the folder of a "
                "sweep in that store"
            ) from None
    chosen = set(wanted) if wanted else set(runs)
    parent = {i: r.data.tags.get("mlflow.parentRunId") for i, r in runs.items()}
    grown = True
    while grown and wanted:  # what is recorded under a chosen run goes with it
        more = {i for i, p in parent.items() if p in chosen} - chosen
        chosen |= more
        grown = bool(more)
    for run_id in list(chosen):  # and the runs above it
        above = parent.get(run_id)
        while above and above in runs and above not in chosen:
            chosen.add(above)
            above = parent.get(above)

    def depth(run_id: str) -> int:
        above = parent.get(run_id)
        return 0 if not above or above not in chosen else 1 + depth(above)

    return sorted(
        (runs[i] for i in chosen), key=lambda r: (depth(r.info.run_id), r.info.start_time or 0)
    )


@dataclass
class Counts:
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    artifact_bytes: int = 0
    roots: List[Tuple[str, Optional[str]]] = field(default_factory=list)  # (experiment, run)


class Pusher:
    """One push from ``source`` to ``target``; ``dry``: count what would be copied only."""

    def __init__(
        self, source: "MlflowClient", target: "MlflowClient", register: bool, dry: bool
    ) -> None:
        self.source, self.target, self.register, self.dry = source, target, register, dry
        self.store = source.tracking_uri
        self.ids: Dict[str, str] = {}  # source run and model ids -> the target's
        self.versions: Dict[str, str] = {}  # NAME/VERSION in the source -> in the target
        self.experiments: Dict[str, Optional[str]] = {}
        self.copies: Dict[str, Dict[str, "Run"]] = {}
        self.counts = Counts()

    def push(self, runs: Sequence["Run"]) -> Counts:
        quiet_artifact_downloads()
        changed: Dict[str, bool] = {}
        for n, run in enumerate(runs, 1):
            changed[run.info.run_id] = self._run(run, f"run {n}/{len(runs)}")
        if self.register and not self.dry:
            for run in runs:
                self._register(run)
        for run in runs:
            copy = self.ids.get(run.info.run_id)
            if copy is not None and not self.dry:
                changed[run.info.run_id] |= self._finish(run, copy)
            if run.data.tags.get("mlflow.parentRunId") not in self.ids:
                self.counts.roots.append((self.experiments[run.info.experiment_id] or "", copy))
        self.counts.updated = sum(changed.values()) - self.counts.new
        self.counts.unchanged = len(runs) - self.counts.new - self.counts.updated
        return self.counts

    def _experiment(self, experiment_id: str) -> Optional[str]:
        if experiment_id not in self.experiments:
            name = self.source.get_experiment(experiment_id).name
            found = self.target.get_experiment_by_name(name)
            if found is None and not self.dry:
                self.experiments[experiment_id] = ensure_experiment(self.target, name)
            else:
                self.experiments[experiment_id] = found.experiment_id if found else None
            target_id = self.experiments[experiment_id]
            copies = (
                all_pages(
                    self.target.search_runs,
                    experiment_ids=[target_id],
                    filter_string=f"tags.`{FROM_RUN}` LIKE '%'",
                )
                if target_id
                else []
            )
            self.copies[experiment_id] = {c.data.tags[FROM_RUN]: c for c in copies}
        return self.experiments[experiment_id]

    def _run(self, run: "Run", label: str) -> bool:
        """Copy what the target's copy of ``run`` lacks (all of it for a new copy) but its
        tags and status; whether anything was copied."""
        source_id = run.info.run_id
        experiment_id = self._experiment(run.info.experiment_id)
        copy = self.copies[run.info.experiment_id].get(source_id)
        if copy is None:
            self.counts.new += 1
            if not self.dry:
                copy = self.target.create_run(
                    experiment_id or "",
                    start_time=run.info.start_time,
                    tags={FROM_STORE: self.store, FROM_RUN: source_id},
                    run_name=run.info.run_name,
                )
        target_id = copy.info.run_id if copy else None
        if target_id:
            self.ids[source_id] = target_id
        params = {k: v for k, v in run.data.params.items() if not copy or k not in copy.data.params}
        points = self._metrics(run, target_id)
        files, size = self._artifacts(run, target_id, label)
        models = self._models(run, target_id)
        inputs = self._inputs(run, copy)
        if params and target_id and not self.dry:
            from mlflow.entities import Param

            items = [Param(k, v) for k, v in params.items()]
            for start in range(0, len(items), 100):
                self.target.log_batch(target_id, params=items[start : start + 100])
        where = f"-> {target_id}" if target_id else "(new)"
        print(
            f"{label} {source_id} {where}: {len(params)} params, {points} metric values, "
            f"{files} artifacts ({size_text(size)}), {models} models, {inputs} inputs",
            flush=True,
        )
        return copy is None or bool(params or points or files or models or inputs)

    def _metrics(self, run: "Run", target_id: Optional[str]) -> int:
        from mlflow.entities import Metric

        count = 0
        for key in run.data.metrics:
            have = set()
            if target_id:
                have = {_point(m) for m in self.target.get_metric_history(target_id, key)}
            missing = [
                Metric(key, m.value, m.timestamp, m.step)
                for m in self.source.get_metric_history(run.info.run_id, key)
                if _point(m) not in have
            ]
            count += len(missing)
            for start in range(0, len(missing), BATCH):
                if target_id and not self.dry:
                    self.target.log_batch(target_id, metrics=missing[start : start + BATCH])
        return count

    def _artifacts(self, run: "Run", target_id: Optional[str], label: str) -> Tuple[int, int]:
        """Send every artifact the target lacks, or holds with another size; progress in a
        line per file, at most one a second."""
        import time

        from mlflow.artifacts import download_artifacts

        have = dict(_files(self.target, target_id)) if target_id else {}
        missing = [(p, s) for p, s in _files(self.source, run.info.run_id) if have.get(p) != s]
        total = sum(s or 0 for _, s in missing)
        if self.dry or not target_id or not missing:
            self.counts.artifact_bytes += total
            return len(missing), total
        sent, shown = 0, 0.0
        with tempfile.TemporaryDirectory(prefix="ms_exp_push_") as scratch:
            for n, (path, size) in enumerate(missing, 1):
                local = download_artifacts(
                    run_id=run.info.run_id,
                    artifact_path=path,
                    dst_path=scratch,
                    tracking_uri=self.store,
                )
                folder = os.path.dirname(path) or None
                self.target.log_artifact(target_id, local, folder)
                os.remove(local)
                sent += size or 0
                self.counts.artifact_bytes += size or 0
                if time.monotonic() - shown >= 1 or n == len(missing):
                    shown = time.monotonic()
                    print(
                        f"  {label} artifacts: {n}/{len(missing)} files, "
                        f"{size_text(sent)} of {size_text(total)}",
                        flush=True,
                    )
        return len(missing), total

    def _models(self, run: "Run", target_id: Optional[str]) -> int:
        """Copy the run's READY logged models the target lacks (one cut short by a kill is
        made again); a target model whose source is gone (a resumed run replaced it) goes."""
        from mlflow.entities import LoggedModelOutput, LoggedModelStatus

        ours = self._logged(self.source, run.info.experiment_id, run.info.run_id)
        ours = [m for m in ours if m.status == LoggedModelStatus.READY]
        theirs: Dict[str, "LoggedModel"] = {}
        experiment_id = self.experiments[run.info.experiment_id]
        if target_id and experiment_id:
            for model in self._logged(self.target, experiment_id, target_id):
                origin = model.tags.get(FROM_MODEL, "")
                kept = model.status == LoggedModelStatus.READY and origin not in theirs
                if kept and any(m.model_id == origin for m in ours):
                    theirs[origin] = model
                elif not self.dry:
                    self.target.delete_logged_model(model.model_id)
        for model_id, model in theirs.items():
            self.ids[model_id] = model.model_id
        missing = [m for m in ours if m.model_id not in theirs]
        if self.dry or not target_id or not experiment_id:
            return len(missing)
        steps = {o.model_id: o.step for o in (run.outputs.model_outputs if run.outputs else [])}
        for model in missing:
            made = self.target.create_logged_model(
                experiment_id,
                name=model.name,
                source_run_id=target_id,
                tags={**self._translated(model.tags), FROM_MODEL: model.model_id},
                params=model.params,
                model_type=model.model_type,
            )
            with tempfile.TemporaryDirectory(prefix="ms_exp_push_") as scratch:
                from mlflow.artifacts import download_artifacts

                local = download_artifacts(artifact_uri=model.artifact_location, dst_path=scratch)
                self.target.log_model_artifacts(made.model_id, local)
            for metric in model.metrics or []:
                self.target.log_metric(
                    target_id,
                    metric.key,
                    metric.value,
                    timestamp=metric.timestamp,
                    step=metric.step,
                    model_id=made.model_id,
                )
            self.target.finalize_logged_model(made.model_id, LoggedModelStatus.READY)
            if model.model_id in steps:
                step = steps[model.model_id]
                self.target.log_outputs(target_id, [LoggedModelOutput(made.model_id, step)])
            self.ids[model.model_id] = made.model_id
        return len(missing)

    def _logged(self, client: "MlflowClient", experiment_id: str, run_id: str) -> List[Any]:
        return all_pages(
            client.search_logged_models,
            experiment_ids=[experiment_id],
            filter_string=f"source_run_id = '{run_id}'",
        )

    def _inputs(self, run: "Run", copy: Optional["Run"]) -> int:
        """The run's dataset inputs the target's copy lacks."""
        theirs = copy.inputs.dataset_inputs if copy and copy.inputs else []
        have = {(i.dataset.name, i.dataset.digest) for i in theirs}
        ours = run.inputs.dataset_inputs if run.inputs else []
        missing = [i for i in ours if (i.dataset.name, i.dataset.digest) not in have]
        if missing and copy and not self.dry:
            self.target.log_inputs(copy.info.run_id, datasets=missing)
        return len(missing)

    def _register(self, run: "Run") -> None:
        """The registered versions of the run's models, as versions of the target's copies."""
        from mlflow.tracking._tracking_service.utils import _use_tracking_uri

        target_id = self.ids.get(run.info.run_id)
        if target_id is None:
            return
        theirs = {
            (v.name, _model_of(v)): str(v.version)
            for v in self.target.search_model_versions(f"run_id = '{target_id}'")
        }
        for version in self.source.search_model_versions(f"run_id = '{run.info.run_id}'"):
            model_id = self.ids.get(_model_of(version))
            if model_id is None:
                continue
            made = theirs.get((version.name, model_id))
            if made is None:
                if not self.target.search_registered_models(f"name = '{version.name}'"):
                    self.target.create_registered_model(version.name)
                # The registry resolves models:/<id> in the process's tracking store
                # (docs/design.md#mlflow-model-version-source).
                with _use_tracking_uri(self.target.tracking_uri):
                    made = self.target.create_model_version(
                        version.name,
                        source=f"models:/{model_id}",
                        run_id=target_id,
                        model_id=model_id,
                        tags=version.tags,
                    ).version
                print(f"  registered {version.name} version {made} (source {version.version})")
            self.versions[f"{version.name}/{version.version}"] = f"{version.name}/{made}"

    def _translated(self, tags: Dict[str, str]) -> Dict[str, str]:
        """``tags`` naming the target's run and model ids; a registered version the target
        does not hold is left out."""
        out = {}
        for key, value in tags.items():
            if key in (FROM_STORE, FROM_RUN, FROM_MODEL, VERSIONS_TAG):
                continue
            if key == REGISTERED_TAG:
                if value not in self.versions:
                    continue
                value = self.versions[value]
            for old, new in self.ids.items():
                key = key.replace(old, new)
            out[key] = self.ids.get(value, value)
        return out

    def _finish(self, run: "Run", target_id: str) -> bool:
        """The copy's tags and status as the source's; whether any changed."""
        from mlflow.entities import RunTag

        copy = self.target.get_run(target_id)
        tags = self._translated(run.data.tags)
        changed = [RunTag(k, v) for k, v in tags.items() if copy.data.tags.get(k) != v]
        for start in range(0, len(changed), 100):
            self.target.log_batch(target_id, tags=changed[start : start + 100])
        status, end = run.info.status, run.info.end_time
        if (copy.info.status, copy.info.end_time) == (status, end):
            return bool(changed)
        if status == "RUNNING":
            self.target.update_run(target_id, status=status)
        else:
            self.target.set_terminated(target_id, status=status, end_time=end)
        return True


def _model_of(version: Any) -> str:
    """The logged model of a registered version (a SQLite store's search leaves model_id
    out; its source names the model)."""
    return str(version.model_id or str(version.source).removeprefix("models:/"))


def _point(metric: Any) -> Tuple[int, int, str]:
    return (metric.step, metric.timestamp, repr(float(metric.value)))


def _files(client: "MlflowClient", run_id: str, folder: Optional[str] = None) -> Iterator[Any]:
    """(path, size) of every artifact file of the run, folders walked."""
    for entry in client.list_artifacts(run_id, folder):
        if entry.is_dir:
            yield from _files(client, run_id, entry.path)
        else:
            yield entry.path, entry.file_size


def push_lines(counts: Counts, target_uri: str, dry: bool) -> List[str]:
    """The summary line and where the pushed runs are on the target."""
    total = counts.new + counts.updated + counts.unchanged
    verb = "would push" if dry else "pushed"
    lines = [
        f"{verb} {total} run{'' if total == 1 else 's'}: {counts.new} new, "
        f"{counts.updated} updated, {counts.unchanged} unchanged, "
        f"{size_text(counts.artifact_bytes)} of artifacts"
    ]
    for experiment_id, run_id in counts.roots:
        if run_id and not dry:  # a local store's `mlflow ui` command once, then each address
            lines.extend(
                line for line in ui_lines(target_uri, experiment_id, run_id) if line not in lines
            )
    return lines


def push(
    source: "MlflowClient",
    to: str,
    experiment: Optional[str],
    sweep: Optional[str],
    run_ids: Sequence[str],
    register: bool,
    dry: bool,
) -> List[str]:
    """Push the chosen runs of ``source`` to the store ``to``; the lines to print last."""
    target_uri = resolve_tracking_uri(to)
    refused = password_refusal("--to", to)
    if refused:
        raise CompareError(refused)
    runs = select_for_push(source, experiment, sweep, run_ids)  # before a new target exists
    target = open_target(target_uri, source.tracking_uri)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # ours follow
    print(f"pushing {len(runs)} runs from {source.tracking_uri} to {target_uri}", flush=True)
    counts = Pusher(source, target, register, dry).push(runs)
    return push_lines(counts, target_uri, dry)
