"""Comparing runs without the MLflow UI: the table of a store's runs with the config keys that
differ among them and their final metrics (:func:`runs_table`), the best run by a metric
(:func:`best_run`) and what differs between two runs (:func:`run_diff`); ``python -m
ms_exp.runs`` prints them, and ``ms_exp.runs.table`` returns the table to a notebook.
What is unknown (an experiment, a sweep, a run id, a metric no run logged) raises
CompareError, one line naming what exists.
"""

from __future__ import annotations

import difflib
import json
import math
import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import pandas

from ms_exp.tracking.params import relative_to_run
from ms_exp.tracking.records import RunRecords, is_job_run
from ms_exp.tracking.registry import best_child
from ms_exp.tracking.store import StoreError, existing_store, password_refusal, resolve_tracking_uri
from ms_exp.tracking.sweep_report import lower_is_better
from ms_exp.tracking.sweep_runs import (
    ReportError,
    all_pages,
    counted,
    differing_keys,
    find_sweep,
    ranking_metric,
    read_overrides,
    stated_direction,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

# The columns every table starts with; the config keys that differ and the metrics follow.
RUN_COLUMNS = ("run_id", "name", "status", "start", "duration_s")
# A run's final metrics unless asked for others: its evaluation and its training loss (the
# system, checkpoint and throughput metrics are the run's cost, not its result).
EVAL_PREFIX = "eval/"
TRAIN_LOSS = "train/loss"
CHECKPOINTS = ("best", "last")
ISO_UTC = "%Y-%m-%dT%H:%M:%S.%fZ"


class CompareError(ValueError):
    """One line: what was asked for, and what the store holds instead."""


def open_store(tracking_uri: Optional[str]) -> MlflowClient:
    """The store at ``tracking_uri`` (default: the one ``ms_exp.run`` records in from here);
    one with a password in its URI, or one that does not exist, is refused."""
    refused = password_refusal("--tracking-uri", tracking_uri)
    if refused:
        raise CompareError(refused)
    uri = resolve_tracking_uri(tracking_uri)
    try:
        return existing_store(uri)
    except StoreError as error:
        raise CompareError(
            f"--tracking-uri: {uri}: {error.problem}; expected an existing "
            "MLflow store (run this where the runs ran, or pass "
            "--tracking-uri)"
        ) from None


@dataclass
class Selection:
    """The runs asked for, newest first, and what was asked (for messages and defaults)."""

    runs: List[Run]
    where: str
    sweep: Optional[Run] = None


def select_runs(
    client: MlflowClient,
    experiment: Optional[str] = None,
    sweep: Optional[str] = None,
    filter_string: Optional[str] = None,
) -> Selection:
    """The job runs of ``experiment`` (default: every experiment), or of the sweep ``sweep``
    (its parent run id, its folder or one of its job folders), that match ``filter_string``
    (MLflow's search syntax), newest first. A sweep's parent run and an evaluation's run
    (``ms_exp.eval``) are not a job's and are left out."""
    from mlflow.exceptions import MlflowException

    parent = None
    filters = [filter_string] if filter_string else []
    if sweep is not None:
        try:
            parent = client.get_run(find_sweep(client, sweep))
        except ReportError as error:
            raise CompareError(
                f"--sweep: {sweep}: {error}; expected the parent run id or "
                "the folder of a sweep: " + newest(client, "tags.`ms_exp.sweep` = 'true'")
            ) from None
        filters.insert(0, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    names, ids = experiment_ids(client, experiment)
    if parent is not None and experiment is None:
        ids = [parent.info.experiment_id]
    elif parent is not None and parent.info.experiment_id not in ids:
        raise CompareError(
            f"--sweep: {sweep}: its runs are in experiment "
            f"{names.get(parent.info.experiment_id)!r}, not {experiment!r}"
        )
    try:
        runs = all_pages(
            client.search_runs,
            experiment_ids=ids,
            filter_string=" and ".join(filters),
            order_by=["attributes.start_time DESC"],
        )
    except MlflowException as error:
        if error.error_code != "INVALID_PARAMETER_VALUE":
            raise
        raise CompareError(
            f"--filter: {filter_string}: {str(error).splitlines()[0][:300]}; "
            "expected MLflow's search syntax, e.g. \"params.optimizer.lr = "
            "'0.1' and metrics.`eval/accuracy` > 0.9\""
        ) from None
    where = (
        f"sweep {parent.info.run_id}"
        if parent is not None
        else f"experiment {experiment!r}"
        if experiment is not None
        else "the store"
    )
    where += f" ({client.tracking_uri})"
    return Selection([r for r in runs if is_job_run(r)], where, parent)


def experiment_ids(
    client: MlflowClient, experiment: Optional[str]
) -> Tuple[Dict[str, str], List[str]]:
    """Every experiment's name by id, and the ids of ``experiment`` (None: all of them)."""
    names = {e.experiment_id: e.name for e in all_pages(client.search_experiments)}
    if experiment is None:
        return names, list(names)
    ids = [i for i, name in names.items() if name == experiment]
    if not ids:
        raise CompareError(
            f"--experiment: {experiment}: no such experiment in "
            f"{client.tracking_uri}; expected one of: " + ", ".join(sorted(names.values()))
        )
    return names, ids


def config(run: Run) -> Dict[str, str]:
    """The run's params, a path inside its own folder relative to that folder (as a job
    records it), so that it differs between two runs only when their experiments differ."""
    folder = run.data.tags.get("ms_exp.run_dir")
    if not folder:
        return dict(run.data.params)
    return {k: str(v) for k, v in relative_to_run(run.data.params, Path(folder)).items()}


def logged_metrics(runs: Sequence[Run]) -> List[str]:
    return sorted({name for run in runs for name in run.data.metrics})


def final_metrics(runs: Sequence[Run], metrics: Optional[Sequence[str]] = None) -> List[str]:
    """``metrics`` (each refused unless a run logged it), else every ``eval/`` metric the
    runs logged and ``train/loss``."""
    logged = logged_metrics(runs)
    if metrics:
        for metric in metrics:
            check_metric(metric, logged)
        return list(dict.fromkeys(metrics))
    return [m for m in logged if m.startswith(EVAL_PREFIX)] + [m for m in logged if m == TRAIN_LOSS]


def check_metric(metric: str, logged: Sequence[str]) -> None:
    expected = f"one the runs logged: {', '.join(logged) or 'none'}"
    refuse_unknown("--metric", metric, logged, "no run logged it", expected)


def refuse_unknown(flag: str, name: str, known: Sequence[str], why: str, expected: str) -> None:
    """A ``flag`` value that names none of ``known``: one line, with the closest name."""
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise CompareError(f"{flag}: {name}: {why}{hint}; expected {expected}")


def duration_s(run: Run) -> float:
    if run.info.end_time is None or run.info.start_time is None:
        return math.nan  # still running, or its process was lost
    return (run.info.end_time - run.info.start_time) / 1000


def runs_table(
    runs: Sequence[Run],
    metrics: Optional[Sequence[str]] = None,
    keys: Optional[Sequence[str]] = None,
) -> pandas.DataFrame:
    """One row per run in the order given: id, name, status, start (UTC), duration in
    seconds, the config keys ``keys`` (default: those whose values differ among the runs;
    text, as MLflow holds params) and the final metrics (numbers; NaN where a run lacks
    one)."""
    configs = [config(run) for run in runs]
    if keys is None:
        keys = differing_keys(configs) if len(runs) > 1 else []
    shown = final_metrics(runs, metrics) if runs else []
    rows = [
        {
            "run_id": run.info.run_id,
            "name": run.info.run_name,
            "status": run.info.status,
            "start": pandas.Timestamp(run.info.start_time, unit="ms", tz="UTC"),
            "duration_s": duration_s(run),
            **{key: values.get(key, "") for key in keys},
            **{metric: run.data.metrics.get(metric, math.nan) for metric in shown},
        }
        for run, values in zip(runs, configs)
    ]
    return pandas.DataFrame(rows, columns=[*RUN_COLUMNS, *keys, *shown])


def table(
    experiment: Optional[str] = None,
    sweep: Optional[str] = None,
    filter: Optional[str] = None,
    tracking_uri: Optional[str] = None,
    metrics: Optional[Sequence[str]] = None,
) -> pandas.DataFrame:
    """The runs of ``python -m ms_exp.runs list`` with the same arguments, as a DataFrame
    (for a notebook): newest first, the config keys that differ among them, their final
    metrics. Raises CompareError naming what exists when something asked for does not."""
    client = open_store(tracking_uri)
    return runs_table(select_runs(client, experiment, sweep, filter).runs, metrics)


def as_text(frame: pandas.DataFrame) -> pandas.DataFrame:
    """The table's cells as text for the terminal: start in local time to the second,
    durations to 0.1 s, metrics to 4 decimals, nothing where a value is missing."""
    cells = frame.astype(object).copy()
    if len(frame) and "start" in frame:
        local = datetime.now().astimezone().tzinfo
        cells["start"] = frame["start"].dt.tz_convert(local).dt.strftime("%Y-%m-%d %H:%M:%S")
    for column in frame.columns:
        if column == "duration_s":
            cells[column] = [_number(v, ".1f") for v in frame[column]]
        elif column not in RUN_COLUMNS and frame[column].dtype.kind == "f":
            cells[column] = [_number(v, ".4f") for v in frame[column]]
    return cells


def _number(value: float, spec: str) -> str:
    return "" if value is None or math.isnan(value) else format(value, spec)


def render(frame: pandas.DataFrame, form: str) -> str:
    """The table as ``table`` (aligned columns), ``markdown``, ``csv`` or ``json`` (these two
    hold the values as MLflow does, the start as an ISO 8601 time in UTC)."""
    if form == "csv":
        return frame.to_csv(index=False, date_format=ISO_UTC)
    if form == "json":
        # json, not DataFrame.to_json: that rounds floats to 15 digits, unlike MLflow's.
        cells = frame.astype(object).where(frame.notna(), None)
        if len(frame):
            cells["start"] = frame["start"].dt.strftime(ISO_UTC)
        return json.dumps(cells.to_dict("records"), indent=2)
    fmt = "pipe" if form == "markdown" else "simple"
    return as_text(frame).to_markdown(index=False, tablefmt=fmt, disable_numparse=True)


@dataclass
class Best:
    run: Run
    metric: str
    lowest: bool
    why: str  # where the direction came from
    candidates: int  # the finished runs that logged the metric
    checkpoints: Dict[str, str]

    @property
    def value(self) -> float:
        return self.run.data.metrics[self.metric]


def best_run(
    client: MlflowClient,
    selection: Selection,
    metric: Optional[str] = None,
    lowest: Optional[bool] = None,
) -> Best:
    """The finished run with the best ``metric`` (default: as the sweep report ranks); best
    is lowest when ``lowest`` says so, else as the sweep states it for its objective, else
    by the metric's name. A tie goes to the run that started first."""
    finished = [r for r in selection.runs if r.info.status == "FINISHED"]
    if not finished:
        raise CompareError(
            f"no finished run in {selection.where}; expected runs that "
            f"finished (statuses: {counted(r.info.status for r in selection.runs) or 'no runs'})"
        )
    logged = logged_metrics(finished)
    metric = ranking_metric(selection.sweep, logged, metric)
    check_metric(metric, logged)
    direction = (
        stated_direction(selection.sweep, metric, logged) if selection.sweep is not None else None
    )
    if lowest is not None:
        direction, why = ("minimize" if lowest else "maximize"), ("--min" if lowest else "--max")
    elif direction:
        why = f"as the sweep {direction.lower()}s it"
    else:
        why = "by the metric's name; --min or --max to choose"
    # best_child keeps the first of equal values: the earliest run.
    run, _ = best_child(list(reversed(finished)), metric, direction)
    if run is None:
        raise CompareError(f"--metric: {metric}: no finished run has a value for it (NaN)")
    scored = sum(1 for r in finished if metric in r.data.metrics)
    return Best(
        run, metric, lower_is_better(metric, direction), why, scored, checkpoints(client, run)
    )


def checkpoints(client: MlflowClient, run: Run) -> Dict[str, str]:
    """Where the run's best and last checkpoints are (its ``ms_exp.checkpoint.*`` tags): the
    file in its run folder when it is there, else the artifact logged to the run; empty for
    one the run did not save (checkpoint=none, checkpoint.keep_best=false)."""
    found = {}
    folder = Path(run.data.tags.get("ms_exp.run_dir", ""))
    for which in CHECKPOINTS:
        artifact = run.data.tags.get(f"ms_exp.checkpoint.{which}", "")
        if not artifact:
            found[which] = ""
        elif (folder / artifact).is_file():
            found[which] = str(folder / artifact)
        elif artifact in {
            a.path for a in client.list_artifacts(run.info.run_id, str(Path(artifact).parent))
        }:
            found[which] = f"runs:/{run.info.run_id}/{artifact}"
        else:
            found[which] = f"{folder / artifact} (no longer there, and not logged to the run)"
    return found


def best_lines(best: Best) -> List[str]:
    run = best.run
    order = "lowest" if best.lowest else "highest"
    count = f"{best.candidates} finished run{'s' if best.candidates != 1 else ''}"
    overrides = read_overrides(run.data.tags.get("ms_exp.overrides", ""))
    lines = [
        f"best run: {run.info.run_id} ({run.info.run_name})",
        f"{best.metric}: {best.value:.6g}, the {order} of {count} ({best.why})",
        f"overrides: {shlex.join(overrides) or '(none)'}",
    ]
    for which in CHECKPOINTS:
        lines.append(f"{which} checkpoint: {best.checkpoints[which] or '(none saved)'}")
    return lines


def job_runs(client: MlflowClient, ids: Sequence[Tuple[str, str]]) -> List[Run]:
    """The runs of ``(label, run id)`` pairs, each refused in one line saying what it is
    instead (RunRecords.job_run)."""
    runs = []
    for label, run_id in ids:
        try:
            runs.append(RunRecords(client).job_run(run_id))
        except StoreError as error:
            unknown = error.problem.startswith(("no such run", "not a run id"))
            known = f" (the newest: {newest(client)})" if unknown else ""
            raise CompareError(
                f"{label}: {run_id}: {error.problem}; expected {error.allowed}{known}"
            ) from None
    return runs


def newest(client: MlflowClient, filter_string: str = "", count: int = 3) -> str:
    """The newest few runs matching ``filter_string`` (job runs when it is empty), as
    ``id (name)``: what a refusal names as existing."""
    experiments = [e.experiment_id for e in all_pages(client.search_experiments)]
    runs = client.search_runs(
        experiments, filter_string, max_results=100, order_by=["attributes.start_time DESC"]
    )
    chosen = [r for r in runs if filter_string or is_job_run(r)][:count]
    return ", ".join(f"{r.info.run_id} ({r.info.run_name})" for r in chosen) or "none recorded"


def run_diff(client: MlflowClient, a: Run, b: Run, metrics: Optional[Sequence[str]] = None) -> str:
    """Markdown: the config keys that differ, the final metrics with B - A, the checkpoints."""
    configs = [config(a), config(b)]
    keys = differing_keys(configs)
    lines = [
        f"A: {a.info.run_id} ({a.info.run_name}, {a.info.status})",
        f"B: {b.info.run_id} ({b.info.run_name}, {b.info.status})",
        "",
    ]
    total = len(set(configs[0]) | set(configs[1]))
    if keys:
        frame = pandas.DataFrame(
            [[k, configs[0].get(k, "(unset)"), configs[1].get(k, "(unset)")] for k in keys],
            columns=["config key", "A", "B"],
        )
        lines += [f"config: {len(keys)} of {total} keys differ", "", _md(frame)]
    else:
        lines.append(f"config: the same {total} keys and values")
    shown = final_metrics([a, b], metrics)
    if shown:
        rows = []
        for metric in shown:
            va, vb = (run.data.metrics.get(metric, math.nan) for run in (a, b))
            rows.append([metric, _number(va, ".4f"), _number(vb, ".4f"), _number(vb - va, "+.4f")])
        frame = pandas.DataFrame(rows, columns=["final metric", "A", "B", "B - A"])
        lines += ["", "final metrics:", "", _md(frame)]
    found = [checkpoints(client, run) for run in (a, b)]
    rows = [[which, *(f[which] or "(none saved)" for f in found)] for which in CHECKPOINTS]
    frame = pandas.DataFrame(rows, columns=["checkpoint", "A", "B"])
    lines += ["", "checkpoints:", "", _md(frame)]
    return "\n".join(lines)


def _md(frame: pandas.DataFrame) -> str:
    return frame.to_markdown(index=False, disable_numparse=True)
