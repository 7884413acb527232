"""A sweep and its jobs in MLflow, what their command lines set, the keys a sweep varied and
its metric, for the reports; and the tags of a sweep's runs. MLflow is imported only where
called: a job uses ``override_values`` in its own process, which leaves MLflow to its sidecar.
"""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Container,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

if TYPE_CHECKING:
    import pandas
    from hydra.core.override_parser.types import Override
    from mlflow import MlflowClient
    from mlflow.entities import Run

PRUNED_EPOCH_TAG = "ms_exp.pruned_epoch"  # on a job's run: the epoch its trial was pruned at
# On an Optuna sweep's parent run (the study, its storage with any password masked) and on
# every trial's run (the study, the trial number).
STUDY_TAG = "ms_exp.optuna.study"
STORAGE_TAG = "ms_exp.optuna.storage"
TRIAL_TAG = "ms_exp.optuna.trial"
METRIC_TAG = "ms_exp.sweep.metric"  # on the parent: sweep.metric, where it is set
DIRECTION_TAG = "ms_exp.optuna.direction"  # on an Optuna sweep's parent: minimize or maximize
DEVICES_TAG = "ms_exp.devices"  # on a job of hydra/launcher=pool: the devices it held
# What a sweep optimises when sweep.metric is unset: the first of these a job logged
# (classifiers log accuracy, Wide&Deep logs AUC).
OBJECTIVE_METRICS = ("eval/accuracy", "eval/auc")


class ReportError(Exception):
    """A one-line reason why there is no report (unknown sweep, metric no job has)."""


def all_pages(search: Callable[..., Any], **kwargs: Any) -> List[Any]:
    """Every result of ``search``, page after page by MLflow's pager (mlflow.search_runs's)."""
    from mlflow.utils import get_results_from_paginated_fn

    return get_results_from_paginated_fn(
        lambda count, token: search(**kwargs, max_results=count, page_token=token), 1000
    )


def child_runs(client: MlflowClient, parent: Run) -> List[Run]:
    return all_pages(
        client.search_runs,
        experiment_ids=[parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
        order_by=["attributes.start_time ASC"],
    )


def find_sweep(client: MlflowClient, target: str) -> str:
    """The parent run id of ``target``: a parent run id, a sweep folder or a job folder."""
    if "/" not in target and not Path(target).exists():  # run ids never hold a slash
        return _parent_by_id(client, target)
    folder = Path(target).resolve()
    ids = [e.experiment_id for e in all_pages(client.search_experiments)]
    parents = all_pages(
        client.search_runs, experiment_ids=ids, filter_string="tags.`ms_exp.sweep` = 'true'"
    )
    by_dir = {p.data.tags.get("ms_exp.sweep.dir"): p.info.run_id for p in parents}
    for candidate in (folder, folder.parent):
        if str(candidate) in by_dir:
            return by_dir[str(candidate)]
    raise ReportError(f"no sweep recorded for folder {folder} in {client.tracking_uri}")


def _parent_by_id(client: MlflowClient, run_id: str) -> str:
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise ReportError(f"no run {run_id!r} in {client.tracking_uri}") from None
    if run.data.tags.get("ms_exp.sweep") == "true":
        return run_id
    sweep = run.data.tags.get("ms_exp.sweep.id")  # a job of a sweep
    hint = f" (its sweep is run {sweep})" if sweep else ""
    raise ReportError(f"run {run_id} is not the parent run of a sweep{hint}")


def read_overrides(tag: str) -> List[str]:
    """The overrides of a ``ms_exp.overrides`` or ``ms_exp.sweep.overrides`` tag, each whole
    (``model.hidden_sizes=[8, 16]``): the tag is their shlex.join; an older tag, joined by
    spaces, is split on whitespace as it was."""
    try:
        overrides = shlex.split(tag)
    except ValueError:  # an unclosed quote: an older tag
        return tag.split()
    return overrides if shlex.join(overrides) == tag else tag.split()


def parsed_overrides(lines: Iterable[str]) -> Iterator[Tuple[str, Override]]:
    """Each line with its override as Hydra's parser reads it; a line Hydra would refuse (a
    param that is no override, a piece of one that an older tag split) is left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for line in lines:
        try:
            override = parser.parse_overrides([line])[0]
        except OverrideParseException:
            continue
        yield line, override


def override_values(overrides: Iterable[str]) -> Dict[str, str]:
    """``{"optimizer.lr": "0.10"}``: the key each override sets and its value as the
    override wrote it; a deletion (``~key``) sets none."""
    return {
        override.key_or_group: line.partition("=")[2].strip()
        for line, override in parsed_overrides(overrides)
        if not override.is_delete()
    }


def job_values(job: Run) -> Dict[str, str]:
    """What the job's command line set (its ``ms_exp.overrides`` tag)."""
    return override_values(read_overrides(job.data.tags.get("ms_exp.overrides", "")))


def swept_keys(parent: Run, children: Sequence[Run]) -> List[str]:
    """The keys the sweep varied: its command line (the parent's ``ms_exp.sweep.overrides``
    tag, in order) and its params (they add the sweeper's own search space); for a parent
    ms_exp did not make, the params whose values differ between the jobs."""
    lines = read_overrides(parent.data.tags.get("ms_exp.sweep.overrides", ""))
    lines += [f"{key}={value}" for key, value in parent.data.params.items()]
    keys = [o.key_or_group for _, o in parsed_overrides(lines) if o.is_sweep_override()]
    return list(dict.fromkeys(keys)) or differing_keys([c.data.params for c in children])


def differing_keys(configs: Sequence[Mapping[str, str]]) -> List[str]:
    """The keys whose value is not the same in every config (a key some lack differs)."""
    keys = sorted({key for c in configs for key in c})
    return [key for key in keys if len({c.get(key) for c in configs}) > 1]


def objective_metric(final_eval: Container[str], metric: Optional[str]) -> Optional[str]:
    """``metric``, or the first of OBJECTIVE_METRICS the job logged."""
    return metric or next((m for m in OBJECTIVE_METRICS if m in final_eval), None)


def ranking_metric(parent: Optional[Run], logged: Container[str], metric: Optional[str]) -> str:
    """What ranks a sweep's jobs: ``metric``, else the sweep's stated one where they logged
    it, else the first of OBJECTIVE_METRICS they logged (or the first of all)."""
    stated = stated_metric(parent) if parent is not None else None
    default = objective_metric(logged, stated if stated in logged else None)
    return metric or default or OBJECTIVE_METRICS[0]


def short_names(keys: Sequence[str]) -> List[str]:
    """The last part of each dotted key (``rho`` for ``boost.rho``) unless two share it."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return last if len(set(last)) == len(last) else list(keys)


def counted(values: Iterable[str]) -> str:
    """``2 FAILED, 3 FINISHED``: how many of each value, by value."""
    return ", ".join(f"{n} {value}" for value, n in sorted(Counter(values).items()))


def stated_metric(parent: Run) -> Optional[str]:
    """The metric a sweep states it ranks by: its ``sweep.metric``, which an Optuna sweep
    optimises; None where it states none."""
    return parent.data.tags.get(METRIC_TAG) or parent.data.params.get("sweep.metric")


def stated_direction(parent: Run, metric: str, logged: Container[str]) -> Optional[str]:
    """Which way a sweep states ``metric`` is best: an Optuna sweep's direction for the
    metric it optimises; None for another metric, or a sweep that states none."""
    optimised = metric == objective_metric(logged, stated_metric(parent))
    return parent.data.tags.get(DIRECTION_TAG) if optimised else None


def jobs_per_device(children: Sequence[Run]) -> Dict[str, List[str]]:
    """Device (or core set) -> the names of the jobs that ran on it, for a sweep of
    ``hydra/launcher=pool`` (each job's tag ``ms_exp.devices``); empty for other launchers."""
    shares: Dict[str, List[str]] = {}
    for child in sorted(children, key=lambda run: run.info.start_time or 0):
        share = child.data.tags.get(DEVICES_TAG)
        if share:
            shares.setdefault(share, []).append(child.info.run_name or child.info.run_id)
    return dict(sorted(shares.items()))


def markdown(cells: "pandas.DataFrame") -> str:
    """A DataFrame of cells written as text as a Markdown table, without the columns empty in
    every row; each cell as written (not padded, "0.9000" not read back as a number)."""
    shown = cells.loc[:, (cells != "").any()]
    return shown.to_markdown(index=False, stralign=None, numalign=None, disable_numparse=True)
