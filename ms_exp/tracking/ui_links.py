"""Where to see runs in the MLflow UI: the command that opens a store and the addresses ms_exp
prints for a run, a sweep's jobs compared and a sweep's runs table.

Addresses say ``workflowType=machine_learning`` (docs/design.md#mlflow-ui-view); a sweep's
runs table opens on a view stored in its experiment, as the UI's "Share" button stores one.
"""

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence
from urllib.parse import quote, urlparse

from ms_exp.tracking.store import is_local_store

if TYPE_CHECKING:
    from mlflow import MlflowClient

LOCAL_UI = "http://127.0.0.1:5000"
TRAINING_VIEW = "workflowType=machine_learning"
SHARED_VIEW_TAG = "mlflow.sharedViewState."
# A compare page draws every run in each plot and a column per run: past this many runs it
# is hard to read, so a larger sweep's page compares its best.
COMPARED_AT_MOST = 10


def mlflow_executable() -> str:
    """``mlflow`` when the shell finds this environment's own, else its full path: a
    virtual environment that is not activated has its ``mlflow`` only beside its Python."""
    beside = Path(sys.executable).parent / "mlflow"
    if not beside.is_file() or shutil.which("mlflow") == str(beside):
        return "mlflow"
    return shlex.quote(str(beside))


def ui_command(uri: str) -> str:
    """The command that opens this store in the MLflow UI, bound to the loopback address
    (the URI shell-quoted: it is printed for the user to paste into a shell)."""
    if not is_local_store(uri):
        return f"open {uri} in a browser"
    return (
        f"{mlflow_executable()} ui --backend-store-uri {shlex.quote(uri)} "
        "--host 127.0.0.1 --port 5000"
    )


def ui_base(uri: str) -> Optional[str]:
    """Where the UI of the store at ``uri`` is served: the address of the printed ``mlflow
    ui`` command for a local store, the tracking server itself, or unknown (None)."""
    if is_local_store(uri):
        return LOCAL_UI
    if urlparse(uri).scheme.lower() in ("http", "https"):
        return uri.rstrip("/")
    return None


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"


def compare_url(base: str, experiment_id: str, run_ids: Sequence[str]) -> str:
    """MLflow's compare page of ``run_ids``, its JSON lists URL-encoded (a terminal ends a
    link at a bracket or quote)."""
    runs = quote(json.dumps(list(run_ids), separators=(",", ":")), safe="")
    experiments = quote(json.dumps([experiment_id]), safe="")
    return f"{base}/#/compare-runs?runs={runs}&experiments={experiments}&{TRAINING_VIEW}"


def ui_lines(uri: str, experiment_id: str, run_id: str) -> List[str]:
    """How to see a run in the MLflow UI: the command that opens a local store and the run's
    address, or the address on the tracking server."""
    base = ui_base(uri)
    if base is None:
        return [f"open it with: {ui_command(uri)}"]
    if not is_local_store(uri):
        return [f"open it in a browser: {run_url(base, experiment_id, run_id)}"]
    return [
        f"open it with: {ui_command(uri)}",
        f"  then browse to {run_url(base, experiment_id, run_id)}",
    ]


def share_sweep_view(
    client: "MlflowClient",
    experiment_id: str,
    parent_run_id: str,
    keys: Sequence[str],
    metric: str,
    lowest_first: bool,
) -> str:
    """Store the runs-table view of a sweep's jobs in its experiment; its share key."""
    view = {
        "searchFilter": f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        "orderByKey": f"metrics.`{metric}`",
        "orderByAsc": lowest_first,
        "selectedColumns": [
            *(f"params.`{key}`" for key in keys),
            f"metrics.`{metric}`",
            "attributes.`Duration`",
        ],
    }
    client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG + parent_run_id, json.dumps(view))
    return parent_run_id


def sweep_lines(
    uri: str,
    experiment_id: str,
    parent_run_id: str,
    ranked: Sequence[str],
    metric: str,
    share_key: Optional[str],
) -> List[str]:
    """How to see a sweep in the MLflow UI: its parent run, its jobs on one compare page
    (the best :data:`COMPARED_AT_MOST` of ``ranked``, best first) and its runs table."""
    lines = ui_lines(uri, experiment_id, parent_run_id)
    base = ui_base(uri)
    if base is None or not ranked:
        return lines
    compared = list(ranked[:COMPARED_AT_MOST])
    which = (
        "its jobs"
        if len(compared) == len(ranked)
        else f"its best {len(compared)} jobs of {len(ranked)} by {metric}"
    )
    lines.append(f"  compare {which}: {compare_url(base, experiment_id, compared)}")
    if share_key is not None:
        lines.append(
            f"  its jobs in a table, swept keys and {metric} as columns: "
            f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey={share_key}"
            f"&{TRAINING_VIEW}"
        )
    return lines
