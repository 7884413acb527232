"""Finding a sweep and its jobs in MLflow: the parent run named by a run id, a sweep folder
or a job folder (:func:`find_sweep`), its child runs (:func:`child_runs`), and the values a
job's command line set (:func:`override_values`).

MLflow is imported only inside the functions that call it: a job names its run with
``override_values`` (ms_exp.tracking.sweep.child_run_name) in its own process, which leaves
MLflow to its sidecar (ms_exp/tracking/sidecar.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, List

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run


class ReportError(Exception):
    """A one-line reason why there is no report (unknown sweep, metric no job has)."""


def _all_pages(search, **kwargs) -> list:
    """Every result of a search of the client's store, page after page, as mlflow.search_runs
    pages (which would search the process's store instead)."""
    from mlflow.utils import get_results_from_paginated_fn

    return get_results_from_paginated_fn(
        lambda count, token: search(**kwargs, max_results=count, page_token=token), 1000)


def child_runs(client: MlflowClient, parent: Run) -> List[Run]:
    return _all_pages(client.search_runs, experiment_ids=[parent.info.experiment_id],
                      filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                      order_by=["attributes.start_time ASC"])


def find_sweep(client: MlflowClient, target: str) -> str:
    """The parent run id of ``target``: a parent run id, a sweep folder or a job folder."""
    if "/" not in target and not Path(target).exists():  # run ids never hold a slash
        return _parent_by_id(client, target)
    folder = Path(target).resolve()
    experiments = _all_pages(client.search_experiments)
    parents = _all_pages(client.search_runs,
                         experiment_ids=[e.experiment_id for e in experiments],
                         filter_string="tags.`ms_exp.sweep` = 'true'")
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


def override_values(line: str) -> Dict[str, str]:
    """``{"optimizer.lr": "0.1"}`` from a job's ``ms_exp.overrides`` tag ("k=v k=v")."""
    values = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            values[key.lstrip("+~")] = value
    return values
