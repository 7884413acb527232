"""A run's model in MLflow's Model Registry (``tracking.register_model``).

The registered LoggedModel is the ``best`` one (by its ``ms_exp.checkpoint`` tag), else
``last``; in a sweep the parent registers the best job's at the end. Every registration is
a new version of the registered model, created the first time.
"""

import math
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from ms_exp.tracking.sweep_report import lower_is_better
from ms_exp.tracking.sweep_runs import ranking_metric

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import LoggedModel, Run
    from mlflow.entities.model_registry import ModelVersion

MODEL_TAG = "ms_exp.checkpoint"  # set by ms_exp.job.model_package on each model
PREFERRED = ("best", "last")
REGISTERED_TAG = "ms_exp.registered_model"  # on the run that registered: NAME/VERSION


def run_model(
    client: "MlflowClient", run_id: str, experiment_id: Optional[str] = None
) -> Optional["LoggedModel"]:
    """The run's LoggedModel to register: its best, else its last; None if it has none."""
    from mlflow.entities import LoggedModelStatus

    if experiment_id is None:
        experiment_id = client.get_run(run_id).info.experiment_id
    # Filtered here: a "status = 'READY'" filter matched nothing in MLflow 3.17.
    models = client.search_logged_models(
        [experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    by_name = {m.tags.get(MODEL_TAG): m for m in models if m.status == LoggedModelStatus.READY}
    return next((by_name[name] for name in PREFERRED if name in by_name), None)


def register(
    client: "MlflowClient", model: "LoggedModel", name: str, run_id: Optional[str] = None
) -> "ModelVersion":
    """A new version of registered model ``name`` holding ``model``; printed."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(name)
    # The registry resolves models:/<id> in the process's tracking store, not the client's
    # (docs/design.md#mlflow-model-version-source).
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    with _use_tracking_uri(client.tracking_uri):
        version = client.create_model_version(
            name,
            source=f"models:/{model.model_id}",
            run_id=model.source_run_id,
            model_id=model.model_id,
            tags={MODEL_TAG: model.tags.get(MODEL_TAG, "")},
        )
    client.set_tag(run_id or model.source_run_id, REGISTERED_TAG, f"{name}/{version.version}")
    print(
        f"registered model {name} version {version.version} "
        f"(models:/{name}/{version.version}): the {model.tags.get(MODEL_TAG, '')} "
        f"checkpoint of run {model.source_run_id}",
        flush=True,
    )
    return version


def register_run_model(uri: str, run_id: str, name: str) -> "ModelVersion":
    """Register run ``run_id``'s model under ``name``; raises if it logged none."""
    from ms_exp.tracking.store import store_client

    client = store_client(uri)
    model = run_model(client, run_id)
    if model is None:
        raise ValueError(f"run {run_id} logged no model")
    return register(client, model, name)


def best_child(
    children: Sequence["Run"], metric: Optional[str], direction: Optional[str] = None
) -> Tuple[Optional["Run"], str]:
    """The FINISHED child with the best ``metric`` (None: the first of eval/accuracy,
    eval/auc any child logged), and the metric; (None, metric) when none has it."""
    finished = [c for c in children if c.info.status == "FINISHED"]
    logged = {key for c in finished for key in c.data.metrics}
    metric = ranking_metric(None, logged, metric)
    scored = [
        c for c in finished if metric in c.data.metrics and not math.isnan(c.data.metrics[metric])
    ]
    if not scored:
        return None, metric
    pick = min if lower_is_better(metric, direction) else max
    return pick(scored, key=lambda c: c.data.metrics[metric]), metric


def register_sweep_best(
    client: "MlflowClient",
    parent_run_id: str,
    children: Sequence["Run"],
    name: str,
    metric: Optional[str],
    direction: Optional[str],
) -> None:
    """Register the model of the sweep's best job, by ``metric``, and tag the parent."""
    child, metric = best_child(children, metric, direction)
    if child is None:
        print(
            f"tracking.register_model={name}: not registered, no finished job of the "
            f"sweep logged {metric}",
            flush=True,
        )
        return
    model = run_model(client, child.info.run_id, child.info.experiment_id)
    if model is None:
        print(
            f"tracking.register_model={name}: not registered, the best job "
            f"({child.info.run_name}) logged no model",
            flush=True,
        )
        return
    register(client, model, name, run_id=parent_run_id)
    client.set_tag(parent_run_id, "ms_exp.sweep.best_run", child.info.run_id)
    client.set_tag(parent_run_id, "ms_exp.sweep.best_model", model.model_id)
