"""Checks of the ``tracking`` section: the MLflow store can be written (a SQLite file's
folder, and the file a SQLite database if it exists) or is a URI MLflow knows (a server's
with a host), and names fit what MLflow stores."""

import math
import os
import posixpath
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig

from ms_exp.config.errors import InvalidConfig, positive, require
from ms_exp.preflight.paths import enough_free_space, writable_dir
from ms_exp.tracking.store import (
    DEFAULT_DB_NAME,
    holds_password,
    masked,
    not_a_database,
    password_refusal,
)

# MLflow's limit on an experiment's name (mlflow/utils/validation.py), and the run name's
# column width in its SQL stores (``runs.name``, String(250), refused by PostgreSQL, MySQL).
MAX_EXPERIMENT_NAME_LENGTH = 500
MAX_RUN_NAME_LENGTH = 250


# A key whose value is a credential wherever it stands (a user component's own argument is
# recorded like any other). Not ``pwd``, which configs also use for a working directory.
CREDENTIAL_KEY = re.compile(
    r"(?i)^(?:token|access_token|auth_token|apikey|sslpassword)$|(?:^|_)(?:password|passwd|secret|api_key)$"
)


def validate_no_credentials(task: Any, key: str = "") -> None:
    """Refuse a credential anywhere in the job's config (resolved, without Hydra's node), a
    URL's password or a value under a credential's name: every value is recorded, so a
    component reads its credential from the environment. (tracking.uri: validate_tracking.)"""
    if isinstance(task, (dict, list)):
        items = task.items() if isinstance(task, dict) else enumerate(task)
        for name, value in items:
            validate_no_credentials(value, f"{key}.{name}" if key else str(name))
        return
    named = CREDENTIAL_KEY.search(key.rpartition(".")[2]) and task not in (None, "")
    if key != "tracking.uri" and (named or (isinstance(task, str) and holds_password(task))):
        raise InvalidConfig(
            f"{key}={'***' if named else masked(task)!r}: a credential in {key} would be "
            "written into the run's records (config.yaml, the MLflow params); expected none "
            "in the config: the component reads it from the environment "
            "(docs/guides/security.md)"
        )


def validate_tracking(cfg: DictConfig) -> None:
    positive("tracking", cfg, "log_every_n_steps")
    interval = cfg.system_metrics_interval
    require(
        interval is None or (math.isfinite(interval) and interval > 0),
        "tracking.system_metrics_interval",
        interval,
        "null (no system metrics) or a number of seconds > 0",
    )
    name = cfg.experiment_name
    require(bool(name), "tracking.experiment_name", name, "a non-empty name")
    require(
        len(name) <= MAX_EXPERIMENT_NAME_LENGTH,
        "tracking.experiment_name",
        _shortened(name),
        f"a name of at most {MAX_EXPERIMENT_NAME_LENGTH} characters, MLflow's limit (it "
        f"has {len(name)})",
    )
    if cfg.run_name is not None:
        require(
            len(cfg.run_name) <= MAX_RUN_NAME_LENGTH,
            "tracking.run_name",
            _shortened(cfg.run_name),
            f"null or a name of at most {MAX_RUN_NAME_LENGTH} characters, what MLflow's "
            f"SQL stores hold (it has {len(cfg.run_name)})",
        )
    _validate_register_model(cfg)
    refused = password_refusal("tracking.uri", cfg.uri)
    if refused:
        raise InvalidConfig(refused)
    if not cfg.enabled:
        return
    key, uri = "tracking.uri", cfg.uri
    if uri is None or uri.startswith("sqlite:///"):
        if uri is None:
            database = Path.cwd() / DEFAULT_DB_NAME
            allowed = (
                f"null where {DEFAULT_DB_NAME} here is an MLflow store or does not "
                "exist yet, or the URI of another store"
            )
        else:
            require(
                uri != "sqlite:///:memory:",
                key,
                uri,
                "a SQLite file, not :memory: (a store in memory ends with the process that "
                "holds it: nothing would be recorded)",
            )
            database = Path(uri[len("sqlite:///") :])
            allowed = "an MLflow SQLite store, or a file name that does not exist yet"
        writable_dir(key, uri, database.parent)
        enough_free_space(key, uri, database.parent)
        problem = not_a_database(database)
        require(problem is None, key, uri, f"{allowed} ({problem})")
        return
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    allowed_schemes = ("http", "https", "file", "databricks", "postgresql", "mysql", "mssql")
    require(
        scheme in allowed_schemes,
        key,
        uri,
        "null (sqlite:///mlflow.db here) or a URI of scheme sqlite, " + ", ".join(allowed_schemes),
    )
    require(
        scheme != "file" or os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() == "true",
        key,
        uri,
        "sqlite:///... or a server: MLflow 3 refuses its file "
        "store (maintenance mode) unless MLFLOW_ALLOW_FILE_STORE=true",
    )
    if scheme in ("http", "https"):
        require(
            bool(urlparse(uri).hostname),
            key,
            uri,
            f"the address of an MLflow server, with its host: {scheme}://HOST[:PORT]"
            ", e.g. http://127.0.0.1:5000",
        )
        try:
            port = urlparse(uri).port
        except ValueError:
            port = -1
        require(
            port is None or 1 <= port <= 65535,
            key,
            uri,
            "the address of an MLflow server with a port from 1 to 65535, e.g. "
            "http://127.0.0.1:5000",
        )


def _validate_register_model(cfg: DictConfig) -> None:
    """A name MLflow's Model Registry takes (``_validate_model_name`` in
    mlflow/utils/validation.py: not blank, no '/' or ':', and the same name read as a file
    path), and the models it registers logged."""
    name = cfg.register_model
    if name is None:
        return
    require(
        bool(name.strip())
        and not any(c in name for c in "/:")
        and posixpath.normpath(name) == name != "."
        and not name.startswith(".."),
        "tracking.register_model",
        name,
        "null or a registered-model name: not blank, without '/' or ':', not '.' or "
        "starting with '..' (MLflow's rules)",
    )
    require(
        bool(cfg.enabled),
        "tracking.register_model",
        name,
        "null while tracking.enabled=false (the Model Registry is in the MLflow store)",
    )
    require(
        bool(cfg.log_models),
        "tracking.register_model",
        name,
        "null while tracking.log_models=false (it registers the run's logged model)",
    )


def _shortened(name: str) -> str:
    """A name too long to print whole: its start and how it ends."""
    return name if len(name) <= 60 else f"{name[:40]}...{name[-10:]}"
