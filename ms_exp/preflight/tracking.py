"""Checks of the ``tracking`` section: the MLflow store can be written (a SQLite file's
folder) or is a URI MLflow knows."""
from pathlib import Path

from ms_exp.config.errors import positive, require
from ms_exp.preflight.paths import enough_free_space, writable_dir


def validate_tracking(cfg) -> None:
    positive("tracking", cfg, "log_every_n_steps")
    require(bool(cfg.experiment_name), "tracking.experiment_name", cfg.experiment_name,
            "a non-empty name")
    if cfg.enabled:
        uri = cfg.uri
        if uri is None:
            writable_dir("tracking.uri", uri, Path.cwd())
            enough_free_space("tracking.uri", uri, Path.cwd())
        elif uri.startswith("sqlite:///"):
            store_folder = Path(uri[len("sqlite:///"):]).parent
            writable_dir("tracking.uri", uri, store_folder)
            enough_free_space("tracking.uri", uri, store_folder)
        else:
            scheme = uri.split("://", 1)[0] if "://" in uri else ""
            allowed = ("http", "https", "file", "databricks", "postgresql", "mysql", "mssql")
            require(scheme in allowed, "tracking.uri", uri,
                    "null (sqlite:///mlflow.db here) or a URI of scheme sqlite, "
                    + ", ".join(allowed))
