"""Reading what a store recorded: a run, its artifacts, a logged model.

The modules above tracking read a store through a client of :mod:`ms_exp.tracking.store`
and these, never through MLflow itself: MLflow's refusal of a read comes back as
:class:`NotRecorded`, with MLflow's message, for the caller's own one-line error.
"""

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Tuple

if TYPE_CHECKING:  # MLflow is imported where a store is read, not by every job
    from mlflow import MlflowClient
    from mlflow.entities import LoggedModel


class NotRecorded(LookupError):
    """The store has no such run, model or artifact, or cannot read it: MLflow's message."""


@contextmanager
def reading_store() -> Iterator[None]:
    """MLflow's refusals of the reads inside (a client's calls, opening one) as NotRecorded."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as error:
        raise NotRecorded(str(error)) from None


def download(client: "MlflowClient", run_id: str, path: str, folder: Path) -> Path:
    """The run's artifact ``path`` (a file or a folder) downloaded into ``folder`` under its
    own name, as MLflow reads ``runs:/<run id>/<path>``; NotRecorded when MLflow refuses
    (a store's file system may raise its own OSError for a missing artifact)."""
    from mlflow.artifacts import download_artifacts

    with reading_store():
        return Path(
            download_artifacts(
                run_id=run_id,
                artifact_path=path,
                dst_path=str(folder),
                tracking_uri=client.tracking_uri,
            )
        )


def download_logged_model(
    client: "MlflowClient", model_id: str, folder: Path
) -> Tuple["LoggedModel", Path]:
    """The LoggedModel ``model_id`` and its files downloaded into ``folder``; NotRecorded
    when the store has no such model."""
    from mlflow.artifacts import download_artifacts

    with reading_store():
        logged = client.get_logged_model(model_id)
    return logged, Path(
        download_artifacts(artifact_uri=logged.artifact_location, dst_path=str(folder))
    )
