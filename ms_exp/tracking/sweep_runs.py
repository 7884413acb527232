"""Finding a sweep and its jobs in MLflow: the parent run named by a run id, a sweep folder
or a job folder (:func:`find_sweep`), its child runs (:func:`child_runs`), the values a
job's command line set (:func:`override_values` of the overrides :func:`read_overrides`
reads from a tag), and the Markdown both reports' tables are written in (:func:`markdown`).

MLflow is imported only inside the functions that call it: a job names its run with
``override_values`` (ms_exp.tracking.sweep.child_run_name) in its own process, which leaves
MLflow to its sidecar (ms_exp/tracking/sidecar.py).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Sequence

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


def read_overrides(tag: str) -> List[str]:
    """The overrides of a ``ms_exp.overrides`` or ``ms_exp.sweep.overrides`` tag, each as the
    command line gave it to Hydra (``model.hidden_sizes=[8, 16]`` whole): the tag is their
    shlex.join. A tag written before that, joined by spaces, is split on whitespace."""
    try:
        overrides = shlex.split(tag)
    except ValueError:  # an unclosed quote: an older tag
        return tag.split()
    return overrides if shlex.join(overrides) == tag else tag.split()


def override_values(overrides: Sequence[str]) -> Dict[str, str]:
    """``{"optimizer.lr": "0.10"}``: the key each override sets, as Hydra's parser reads it,
    and its value as the override wrote it; deletions (``~key``) and lines Hydra would
    refuse (a piece of an override that an older tag split) are left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser, values = OverridesParser.create(), {}
    for line in overrides:
        try:
            override = parser.parse_overrides([line])[0]
        except OverrideParseException:
            continue
        if not override.is_delete():
            values[override.key_or_group] = line.partition("=")[2].strip()
    return values



def markdown(cells) -> str:
    """A DataFrame of cells already written as text as a Markdown table, without the columns
    empty in every row; each cell as written (tabulate neither pads it nor reads "0.9000"
    back as a number)."""
    shown = cells.loc[:, (cells != "").any()]
    return shown.to_markdown(index=False, stralign=None, numalign=None, disable_numparse=True)
