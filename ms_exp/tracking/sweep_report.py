"""A sweep's report: one table (``summary.csv``, ``summary.md``) and a few plots that
compare its jobs, logged as artifacts of its parent run under ``report/``
(:func:`write_report`; what each file holds is in ``python -m ms_exp.report --help``).

Written when a sweep ends (ms_exp.tracking.sweep), and again by ``python -m ms_exp.report``.
"""

import math
import re
import statistics
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import pandas
from mlflow import MlflowClient
from mlflow.entities import Run

from ms_exp.tracking.study_report import study_part
from ms_exp.tracking.sweep_runs import (
    STORAGE_TAG,
    STUDY_TAG,
    ReportError,
    child_runs,
    job_values,
    markdown,
    ranking_metric,
    short_names,
    stated_direction,
    swept_keys,
)
from ms_exp.tracking.ui_links import share_sweep_view

REPORT_DIR = "report"
FINAL_METRICS = ("eval/accuracy", "eval/auc", "eval/loss", "train/loss")
LOSS_CURVE = "train/loss"
SAVE_TIME = "checkpoint/save_time_s"
_BYTES_METRIC = re.compile(r"checkpoint/bytes_rank_(\d+)$")
# Where a sweep states no direction: metrics where smaller is better; anything else
# (accuracy, throughput) is best when larger.
_LOWER_IS_BETTER = ("loss", "error", "time", "bytes")
STAGE_ONE_PARAM = "boost.stage_one_run_id"
_MAX_TICKS = 12  # swept values with a tick each on a plot
_CELL_CHARS = 80  # in summary.md (a failed job's error); summary.csv keeps all of it
Rows = Sequence[Mapping[str, Any]]  # the summary table's, as records


@dataclass
class SweepReport:
    parent_run_id: str
    experiment_id: str
    artifact_uri: str  # where summary.csv, summary.md and the plots were logged
    files: List[str]
    markdown: str  # summary.md (a title line and the table), then an Optuna study's part
    metric: str  # what ranks the jobs
    ranked: List[str]  # the jobs' run ids, best first
    share_key: str  # of the runs-table view of the jobs (ms_exp.tracking.ui_links)


@dataclass
class Reference:
    """A score the jobs are measured against: a horizontal line on the plots."""

    label: str
    value: float
    run_id: Optional[str] = None


def lower_is_better(metric: str, direction: Optional[str] = None) -> bool:
    """Whether smaller ``metric`` is better: as ``direction`` says, else by the metric's name."""
    if direction:
        return direction.lower() == "minimize"
    return any(word in metric for word in _LOWER_IS_BETTER)


def summary_table(
    children: Sequence[Run], keys: Sequence[str], metric: str, lowest_first: bool
) -> pandas.DataFrame:
    """One row per job, best ``metric`` first; a job without it, or with NaN, last."""
    ranks = sorted(
        {
            int(m.group(1))
            for child in children
            for name in child.data.metrics
            if (m := _BYTES_METRIC.match(name))
        }
    )
    with_save_time = any(SAVE_TIME in child.data.metrics for child in children)
    logged = {name for child in children for name in child.data.metrics}
    metrics = [metric] + [m for m in FINAL_METRICS if m != metric and m in logged]
    columns = [
        "run_name",
        "job",
        "status",
        *keys,
        *metrics,
        "duration_s",
        *(["ckpt_save_s"] if with_save_time else []),
        *[f"ckpt_bytes_rank_{rank}" for rank in ranks],
        "error",
        "run_id",
    ]
    rows = []
    for child in children:
        values = job_values(child)
        found = child.data.metrics  # each metric's value at its last step
        info = child.info
        rows.append(
            {
                "run_name": info.run_name,
                "job": Path(child.data.tags.get("ms_exp.run_dir", "")).name,
                "status": info.status,
                # As the job's command line wrote it; a key swept by other means from params.
                **{key: values.get(key, child.data.params.get(key, "")) for key in keys},
                **{m: found.get(m) for m in metrics},
                "duration_s": (info.end_time - info.start_time) / 1000 if info.end_time else None,
                "ckpt_save_s": found.get(SAVE_TIME),
                **{
                    f"ckpt_bytes_rank_{r}": _whole(found.get(f"checkpoint/bytes_rank_{r}"))
                    for r in ranks
                },
                "error": child.data.tags.get("ms_exp.error", ""),
                "run_id": info.run_id,
            }
        )
    # Objects, not numbers: a byte count stays whole, and a diverged job's NaN stays apart
    # from a missing value (None) in summary.csv.
    table = pandas.DataFrame(rows, columns=columns, dtype=object)
    return table.sort_values(metric, ascending=lowest_first, kind="stable", ignore_index=True)


def _usable(value: Optional[float]) -> bool:
    """False for a job without the metric, and for NaN (a diverged loss) that cannot sort."""
    return value is not None and not math.isnan(value)


def _whole(value: Optional[float]) -> Optional[int]:
    # MLflow hands every metric back as a float; a byte count reads better without ".0".
    return None if value is None else int(value)


def _md_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 100 else f"{value:.1f}"
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 3] + "..."


def stage_one_references(
    client: MlflowClient, children: Sequence[Run], metric: str
) -> List[Reference]:
    """``metric`` of the stage-one runs that stage-two jobs (boost=dim_reduce) started from
    (their ``boost.stage_one_run_id`` param): what those jobs must beat."""
    from mlflow.exceptions import MlflowException

    ids = sorted(
        {child.data.params.get(STAGE_ONE_PARAM) for child in children} - {None, "", "null", "None"}
    )
    references = []
    for run_id in ids:
        try:
            value = client.get_run(run_id).data.metrics.get(metric)
        except MlflowException:
            continue
        if _usable(value):
            references.append(Reference(f"stage one ({run_id[:8]}): {value:.4f}", value, run_id))
    return references


def _figure() -> Tuple[Any, Any]:
    # Figure() draws with Agg and leaves pyplot's global backend and state alone: the sweep
    # callback calls this inside the training process.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    return figure, figure.subplots()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def metric_figure(
    rows: Rows, key: str, metric: str, references: Sequence[Reference] = ()
) -> Optional[Any]:
    """``metric`` for every job against the value of ``key`` (a Figure; None when no job
    has the metric): one tick per value, evenly spaced, in order (numbers by size) and
    labelled as the sweep gave it; past 12 numbers, a numeric axis. Jobs that share a value
    sit side by side around its tick, so none hides another; the line (or marks) is their
    mean; ``references`` are horizontal lines, such as stage one's score."""
    points = [(str(row[key]), row[metric]) for row in rows if _usable(row[metric])]
    if not points:
        return None
    figure, axes = _figure()
    texts = [x for x, _ in points]
    try:
        numbers: Optional[List[float]] = [float(x) for x in texts]
    except ValueError:
        numbers = None
    xs: Sequence[float]
    if numbers is not None and len(set(numbers)) > _MAX_TICKS:
        xs = numbers
        values = sorted(set(xs))
        width = 0.25 * min(b - a for a, b in zip(values, values[1:]))
    else:
        # Ticks on a numeric axis at the values themselves let the jobs spread around one
        # value read as other values (4 jobs at rho 0.4 as 0.38 to 0.42): a band around
        # each value's own tick cannot.
        order: List[Any] = sorted(set(numbers if numbers is not None else texts))
        keys: Sequence[Any] = numbers if numbers is not None else texts
        written = dict(zip(keys, texts))
        xs = [order.index(k) for k in keys]
        width = 0.3
        axes.set_xticks(range(len(order)), [written[k] for k in order])
        axes.set_xlim(-0.5, len(order) - 0.5)
    ys = [y for _, y in points]
    by_x = defaultdict(list)
    for x, y in zip(xs, ys):
        by_x[x].append(y)
    ordered = sorted(by_x)
    means = [statistics.mean(by_x[x]) for x in ordered]
    # Over the other swept keys' values: with one swept key, the jobs themselves.
    mean_label = f"mean of the jobs with each {key}"
    if numbers is not None and len(ordered) > 1:
        axes.plot(ordered, means, color="grey", label=mean_label)
    else:
        axes.hlines(
            means,
            [x - width / 2 for x in ordered],
            [x + width / 2 for x in ordered],
            color="grey",
            label=mean_label,
        )
    axes.scatter(_side_by_side(xs, width), ys, zorder=3, label="each job")
    for reference in references:
        axes.axhline(reference.value, linestyle="--", color="tab:red", label=reference.label)
    axes.set_xlabel(key)
    axes.set_ylabel(metric)
    missing = len(rows) - len(points)
    without = f"; {missing} failed or without it" if missing else ""
    axes.set_title(f"{metric} against {key} ({len(points)} jobs{without})")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def _side_by_side(xs: Sequence[float], width: float) -> List[float]:
    """Each x moved within ``width`` so that jobs with the same value are spread evenly
    around it instead of drawn on top of each other; a value only one job has stays put."""
    total, spread = Counter(xs), []
    seen: Counter[float] = Counter()
    for x in xs:
        n, i = total[x], seen[x]
        seen[x] += 1
        spread.append(x if n == 1 else x + width * (i / (n - 1) - 0.5))
    return spread


def plot_loss_curves(folder: Path, client: MlflowClient, rows: Rows, keys: Sequence[str]) -> None:
    figure, axes = _figure()
    labels = short_names(keys)
    drawn = 0
    for row in rows:
        history = sorted(client.get_metric_history(row["run_id"], LOSS_CURVE), key=lambda m: m.step)
        if not history:
            continue
        label = ", ".join(f"{name}={row[key]}" for name, key in zip(labels, keys))
        axes.plot(
            [m.step for m in history],
            [m.value for m in history],
            label=label or row["run_name"],
            linewidth=1,
        )
        drawn += 1
    if not drawn:
        return
    axes.set_xlabel("global step")
    axes.set_ylabel(LOSS_CURVE)
    axes.set_title(f"{LOSS_CURVE} of {drawn} jobs")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.savefig(folder / "train_loss.png", dpi=110)


def write_report(
    client: MlflowClient,
    parent_run_id: str,
    metric: Optional[str] = None,
    optuna_storage: Optional[str] = None,
    own_sweep: bool = False,
) -> SweepReport:
    """Write the sweep's report and log it into the parent run (running or finished) under
    ``report/``. Raises ReportError when the sweep has no jobs or none logged ``metric``.
    An Optuna sweep's report adds its study, read from ``optuna_storage`` or else the
    storage the parent's tag names (only a local file, unless ``own_sweep``)."""
    parent = client.get_run(parent_run_id)
    children = child_runs(client, parent)
    if not children:
        raise ReportError(f"sweep run {parent_run_id} has no child runs")
    logged = {name for child in children for name in child.data.metrics}
    metric = ranking_metric(parent, logged, metric)
    if logged and metric not in logged:
        raise ReportError(
            f"no job of sweep {parent_run_id} logged {metric!r}; they logged: "
            + ", ".join(sorted(logged))
        )
    keys = swept_keys(parent, children)
    # An Optuna sweep states which way is best for what it optimises, a basic sweep nothing.
    direction = stated_direction(parent, metric, logged)
    lowest_first = lower_is_better(metric, direction)
    table = summary_table(children, keys, metric, lowest_first)
    rows = table.to_dict("records")
    title = (
        f"Sweep {parent.info.run_name} ({parent_run_id}): {len(rows)} jobs, by {metric}, "
        f"{'lowest' if lowest_first else 'highest'} first"
        + (f", as the sweep {direction.lower()}s it" if direction else "")
    )
    references = stage_one_references(client, children, metric)
    for reference in references:
        title += (
            f"\n\nStage one (run {reference.run_id}), which the jobs started from: "
            f"{metric} {reference.value:.4f}"
        )
    with tempfile.TemporaryDirectory(prefix="ms_exp_report_") as scratch:
        folder = Path(scratch)
        # summary.csv in full; summary.md without run ids and empty columns
        table.map(lambda value: "" if value is None else value).to_csv(
            folder / "summary.csv", index=False, na_rep="nan"
        )
        text = f"{title}\n\n{markdown(table.drop(columns='run_id').map(_md_cell))}\n"
        (folder / "summary.md").write_text(text)
        for key in keys:
            figure = metric_figure(rows, key, metric, references)
            if figure is not None:
                figure.savefig(folder / f"{_slug(metric)}_vs_{_slug(key)}.png", dpi=110)
        plot_loss_curves(folder, client, rows, keys)
        text += _study_markdown(parent, optuna_storage, folder, own_sweep)
        client.log_artifacts(parent_run_id, scratch, REPORT_DIR)
        files = sorted(p.name for p in folder.iterdir())
    share_key = share_sweep_view(
        client, parent.info.experiment_id, parent_run_id, keys, metric, lowest_first
    )
    return SweepReport(
        parent_run_id,
        parent.info.experiment_id,
        f"{parent.info.artifact_uri}/{REPORT_DIR}",
        files,
        text,
        metric,
        list(table["run_id"]),
        share_key,
    )


def _study_markdown(parent: Run, storage: Optional[str], folder: Path, own_sweep: bool) -> str:
    study = parent.data.tags.get(STUDY_TAG)
    if study is None:
        return ""
    try:
        part = study_part(
            storage or parent.data.tags.get(STORAGE_TAG, ""),
            study,
            folder,
            recorded=not (storage or own_sweep),
        )
    except ReportError as error:  # the jobs' table and plots stand without the study
        return f"\nno study part: {error}\n"
    return f"\n{part.markdown}"
