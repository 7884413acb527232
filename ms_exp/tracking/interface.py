"""What training, job and tracking code calls on a run's tracker: :class:`RunTracker`.

Implemented structurally, with the same parameter names (tests/test_tracker_interface.py),
by ``tracker.Tracker`` (straight into MLflow), ``sidecar.SidecarTracker`` (a job's),
``journal.JournalTracker`` (while the server does not answer) and
``lifecycle.DisabledTracker`` (``tracking.enabled=false``).
"""

from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, runtime_checkable


@runtime_checkable
class RunTracker(Protocol):
    """One run's tracker: the run's identity, and every recording call on it."""

    @property
    def enabled(self) -> bool:
        """False when nothing is recorded (``tracking.enabled=false``): every call is a no-op."""

    @property
    def run_id(self) -> Optional[str]:
        """The MLflow run's id; None while there is none (disabled, or only in a journal)."""

    @property
    def experiment_id(self) -> Optional[str]:
        """The id of the run's MLflow experiment; None while there is no run."""

    @property
    def offline_journal(self) -> Optional[Path]:
        """The journal holding calls the tracking server did not take; None if none."""

    @property
    def model_ids(self) -> Mapping[str, str]:
        """The ids of the MLflow models logged in the store, by name, as of the last
        :meth:`flush` (none while the calls go to a journal)."""

    def log_params(self, params: Mapping[str, object]) -> None:
        """Log params (values as MLflow shows them) on the run."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log metric values at ``step``; may be buffered until :meth:`flush`."""

    def set_tags(self, tags: Mapping[str, object]) -> None:
        """Set tags on the run (values as strings)."""

    def log_artifact(self, path: Path, artifact_path: Optional[str] = None) -> None:
        """Upload one file into the run's artifacts under ``artifact_path``."""

    def log_artifacts(self, directory: Path, artifact_path: Optional[str] = None) -> None:
        """Upload a folder's files into the run's artifacts under ``artifact_path``."""

    def log_artifact_to(
        self, run_id: Optional[str], path: Path, artifact_path: Optional[str] = None
    ) -> None:
        """Upload one file into run ``run_id``'s artifacts (None: this run's)."""

    def record_provenance(self, dataset_cfg: Any, run_dir: Path, command: str) -> None:
        """Write ``run_dir/provenance`` (code, packages, command, data) and log it on the run."""

    def log_model(
        self,
        name: str,
        directory: Path,
        params: Mapping[str, object],
        metrics: Mapping[str, float],
        epoch: Optional[int] = None,
        tags: Optional[Mapping[str, object]] = None,
        mlmodel: Optional[Mapping[str, object]] = None,
    ) -> None:
        """Log ``directory`` (an MLflow model, ms_exp/job/model_package.py) as a LoggedModel
        named ``name`` of this run, one of its outputs, with ``params``, ``tags`` and
        ``metrics`` linked to it at the step of ``epoch``'s evaluation (None: the last);
        with ``mlmodel``, the directory's MLmodel file is written first from that spec and
        the example arrays the job saved there (ms_exp/tracking/mlmodel.py)."""

    def wait_for_run(self) -> None:
        """Block until the run exists (or is journaled); raise if it cannot be created."""

    def flush(self) -> None:
        """Block until everything logged so far is in the store."""

    def finish(self, status: Optional[str]) -> None:
        """End the run with ``status`` (FINISHED, FAILED, KILLED); None: only deliver
        what was logged, leaving the run open (rank 0 of a distributed job)."""
