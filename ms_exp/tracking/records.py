"""Reading what a store recorded: a run, its artifacts, a logged model.

The modules above tracking read a store through :class:`RunRecords`, never through MLflow
itself: MLflow's refusal of a read they expect refused comes back as :class:`NotRecorded`,
with MLflow's message, for the caller's own one-line error.
"""

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Optional, Set, Tuple, Union

from ms_exp.tracking.store import StoreError, existing_store, is_run_id, open_client

if TYPE_CHECKING:  # MLflow is imported where a store is read, not by every job
    from mlflow import MlflowClient
    from mlflow.entities import LoggedModel, Run
    from mlflow.entities.model_registry import ModelVersion


JOB_RUN = "the id of a job's run (32 hex digits, printed as 'MLflow run <id>' by the job)"


def is_job_run(run: "Run") -> bool:
    """Whether ``run`` is a job's: not a sweep's parent run, nor an evaluation's."""
    tags = run.data.tags
    return tags.get("ms_exp.sweep") != "true" and "ms_exp.evaluated_checkpoint" not in tags


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


class RunRecords:
    """A store as the modules above tracking read it (and tag a sweep's parent run in it):
    every MLflow call they make is a method here, so a second store or a test double is
    this one class. Runs and models come back as MLflow's entities."""

    def __init__(self, client: "MlflowClient") -> None:
        self.client = client
        self.uri = client.tracking_uri

    @classmethod
    def open(cls, uri: str) -> "RunRecords":
        """The store at ``uri``, unchecked: MLflow creates a missing local one (open_client)."""
        return cls(open_client(uri))

    @classmethod
    def existing(cls, uri: str, hint: str = "pass --tracking-uri") -> "RunRecords":
        """The store at ``uri``; StoreError when it does not exist (existing_store)."""
        return cls(existing_store(uri, hint))

    def run(self, run_id: str) -> "Run":
        """The run ``run_id``; NotRecorded when the store has none."""
        with reading_store():
            return self.client.get_run(run_id)

    def job_run(self, run_id: str) -> "Run":
        """The run of one ``ms_exp.run`` job; StoreError says what ``run_id`` is instead (an
        experiment id, a run name, a sweep's parent run, an evaluation, nothing in the store)."""
        from mlflow.exceptions import MlflowException

        if not is_run_id(run_id):
            raise StoreError(f"not a run id{self._what_else(run_id)}", JOB_RUN)
        try:
            run = self.client.get_run(run_id)
        except MlflowException as error:
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise StoreError(
                    f"cannot read it from {self.uri} ({str(error).splitlines()[0][:200]})",
                    JOB_RUN,
                ) from None
            raise StoreError(f"no such run in {self.uri}", f"{JOB_RUN} in that store") from None
        tags = run.data.tags
        if tags.get("ms_exp.sweep") == "true":
            children = self.client.search_runs(
                [run.info.experiment_id],
                f"tags.mlflow.parentRunId = '{run_id}'",
                max_results=1000,
                order_by=["attributes.start_time ASC"],
            )
            ids = [c.info.run_id for c in children]
            listed = ", ".join(ids[:4]) + (f" (and {len(ids) - 4} more)" if len(ids) > 4 else "")
            raise StoreError(
                f"this is the parent run of a sweep ({len(ids)} jobs), not a job's run",
                f"the run of one of its jobs: {listed or 'none recorded'}",
            )
        if "ms_exp.evaluated_checkpoint" in tags:
            raise StoreError(
                "this is an evaluation's run (ms_exp.eval), not a job's run",
                f"the run it evaluated, {tags.get('mlflow.parentRunId', '(unknown)')}",
            )
        return run

    def _what_else(self, text: str) -> str:
        """What ``text`` names in the store when it is not a run id, as a clause."""
        from mlflow.exceptions import MlflowException

        if text.isdigit():
            try:
                experiment = self.client.get_experiment(text)
                return f": it is the id of experiment {experiment.name!r}"
            except MlflowException:
                return ""
        if "'" in text or not text.strip():
            return ""
        experiments = [e.experiment_id for e in self.client.search_experiments(max_results=1000)]
        named = self.client.search_runs(
            experiments, f"attributes.run_name = '{text}'", max_results=3
        )
        if named:
            return f": it is the name of run {', '.join(r.info.run_id for r in named)}"
        return ""

    def run_recorded_from(self, run_dir: Path) -> Optional[str]:
        """The id of the newest job run recorded from run directory ``run_dir`` (its
        ``ms_exp.run_dir`` tag), or None: what an evaluation of a file in that folder is
        linked to. Only the id is read: the config stays the one the caller chose."""
        if "'" in str(run_dir):  # MLflow's filter cannot hold it
            return None
        experiments = [e.experiment_id for e in self.client.search_experiments(max_results=1000)]
        runs = self.client.search_runs(
            experiments,
            f"tags.`ms_exp.run_dir` = '{run_dir}'",
            max_results=20,
            order_by=["attributes.start_time DESC"],
        )
        return next((r.info.run_id for r in runs if is_job_run(r)), None)

    def newest_finished(self, experiment_name: str, tag_filter: str) -> Optional["Run"]:
        """The newest FINISHED run of the experiment that ``tag_filter`` (MLflow's filter
        syntax) matches, or None."""
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is None:
            return None
        runs = self.client.search_runs(
            [experiment.experiment_id],
            filter_string=f"attributes.status = 'FINISHED' and {tag_filter}",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return runs[0] if runs else None

    def artifact_paths(self, run_id: str, folder: str) -> Set[str]:
        """The paths of the run's artifacts directly in ``folder``."""
        return {a.path for a in self.client.list_artifacts(run_id, folder)}

    def download(self, run_id: str, path: str, folder: Union[str, Path]) -> Path:
        """The run's artifact ``path`` (a file or a folder) downloaded into ``folder`` under
        its own name, as MLflow reads ``runs:/<run id>/<path>``; NotRecorded when MLflow
        refuses (a store's file system may raise its own OSError for a missing artifact)."""
        from mlflow.artifacts import download_artifacts

        with reading_store():
            return Path(
                download_artifacts(
                    run_id=run_id,
                    artifact_path=path,
                    dst_path=str(folder),
                    tracking_uri=self.uri,
                )
            )

    def download_logged_model(self, model_id: str, folder: Path) -> Tuple["LoggedModel", Path]:
        """The LoggedModel ``model_id`` and its files downloaded into ``folder``; NotRecorded
        when the store has no such model."""
        from mlflow.artifacts import download_artifacts

        with reading_store():
            logged = self.client.get_logged_model(model_id)
        return logged, Path(
            download_artifacts(artifact_uri=logged.artifact_location, dst_path=str(folder))
        )

    def model_versions(self, name: str) -> List[str]:
        """The versions of registered model ``name``, in order (none for a name with a quote,
        which MLflow's filter cannot hold)."""
        if "'" in name:
            return []
        found = self.client.search_model_versions(f"name = '{name}'")
        return sorted((str(v.version) for v in found), key=int)

    def registered_models(self) -> List[str]:
        """The names of the registered models, sorted."""
        return sorted(m.name for m in self.client.search_registered_models())

    def model_version(self, name: str, version: str) -> "ModelVersion":
        """Version ``version`` of registered model ``name``; NotRecorded when MLflow refuses."""
        with reading_store():
            return self.client.get_model_version(name, version)

    def tag_run(self, run_id: str, key: str, value: str) -> None:
        """Set tag ``key`` of run ``run_id`` (a job's note on its sweep's parent run)."""
        self.client.set_tag(run_id, key, value)
