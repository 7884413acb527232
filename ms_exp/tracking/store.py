"""Where runs are recorded: the MLflow tracking URI and the experiment.

The default store is MLflow's own default, ``sqlite:///mlflow.db`` in the working directory,
made absolute so it does not move when a job changes directory. New experiments keep their
artifacts in ``mlartifacts/`` beside the database: MLflow would otherwise create
``./mlruns``, a folder whose name MLflow also reads as its old file store (one holding
file-store experiments silently switches every later ``mlflow ui`` there to it)
(docs/design.md#mlflow-default-store, docs/design.md#mlflow-file-store).
"""
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional
from urllib.parse import urlparse

if TYPE_CHECKING:  # MLflow is imported where a store is opened, not by every job
    from mlflow import MlflowClient

DEFAULT_DB_NAME = "mlflow.db"


def resolve_tracking_uri(uri: Optional[str], workdir: Optional[Path] = None) -> str:
    if uri:
        return uri
    base = Path(workdir or os.getcwd()).resolve()
    return f"sqlite:///{base / DEFAULT_DB_NAME}"


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a ``sqlite:///`` URI, None for other stores."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):])


def missing_database(uri: str) -> Optional[Path]:
    """The SQLite file of ``uri`` if it does not exist: commands that only read a store
    refuse it, since ``MlflowClient`` would silently create an empty one."""
    database = sqlite_path(uri)
    return database if database is not None and not database.is_file() else None


def is_local_store(uri: str) -> bool:
    return sqlite_path(uri) is not None or urlparse(uri).scheme in ("", "file")


def quiet_artifact_downloads() -> None:
    """MLflow draws a progress bar for every download; in logs it is only noise."""
    if not sys.stderr.isatty():
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def ui_command(uri: str) -> str:
    """The command that opens this store in the MLflow UI, bound to the loopback address
    (the URI shell-quoted: it is printed for the user to paste into a shell)."""
    if not is_local_store(uri):
        return f"open {uri} in a browser"
    return (f"{mlflow_executable()} ui --backend-store-uri {shlex.quote(uri)} "
            "--host 127.0.0.1 --port 5000")


def mlflow_executable() -> str:
    """``mlflow`` when the shell finds this environment's own, else its full path: a
    virtual environment that is not activated has its ``mlflow`` only beside its Python."""
    beside = Path(sys.executable).parent / "mlflow"
    if not beside.is_file() or shutil.which("mlflow") == str(beside):
        return "mlflow"
    return shlex.quote(str(beside))


def ensure_experiment(client: "MlflowClient", name: str) -> str:
    """Return the id of experiment ``name``, creating it (and its artifact folder) if new."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    artifact_location = None
    db = sqlite_path(client.tracking_uri)
    if db is not None:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
        artifact_location = (db.parent / "mlartifacts" / safe).as_uri()
    return client.create_experiment(name, artifact_location=artifact_location)
