"""Runs left RUNNING by processes that are gone, ended KILLED by the next sweep.

A job or sweep killed with SIGKILL leaves its MLflow run RUNNING. A job holds its run
folder's lock, and a sweep its sweep folder's, for as long as it lives (run_folder.py): a
RUNNING run whose folder is on this machine with its lock free has nobody left to end it.
Runs whose folder is elsewhere are left alone: their process may be alive.
"""

from pathlib import Path
from typing import TYPE_CHECKING, List

from ms_exp.tracking.run_folder import folder_in_use

if TYPE_CHECKING:
    from mlflow import MlflowClient

ENDED_BY_TAG = "ms_exp.ended_by"
ABANDONED = "its process ended without ending the run (killed?); ended by a later command"
FOLDER_TAGS = ("ms_exp.sweep.dir", "ms_exp.run_dir")


def end_abandoned_runs(client: "MlflowClient", experiment_id: str) -> List[str]:
    """End KILLED the experiment's RUNNING runs whose process is gone; their ids."""
    ended = []
    for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'"):
        tags = run.data.tags
        folder = next((tags[key] for key in FOLDER_TAGS if key in tags), None)
        if folder is None or folder_in_use(Path(folder)) is not False:
            continue
        client.set_tag(run.info.run_id, ENDED_BY_TAG, ABANDONED)
        client.set_terminated(run.info.run_id, "KILLED")
        ended.append(run.info.run_id)
    return ended
