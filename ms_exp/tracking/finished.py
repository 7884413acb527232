"""Finding a job that already finished with the same config, so a re-run sweep skips it.

Every run is tagged with a digest of its resolved config (``ms_exp.config_digest``), paths
inside its run directory replaced by a placeholder and what changes where or how a result
is recorded, not the result, left out. With ``tracking.skip_finished=true`` a job whose
digest matches a FINISHED run of the same experiment is not trained again.
"""

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, cast

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from mlflow.entities import Run

    from ms_exp.tracking.records import RunRecords

DIGEST_TAG = "ms_exp.config_digest"
_NOT_PART_OF_THE_RESULT = ("tracking", "sweep", "trainer.progress_bar", "trainer.resume")


def config_digest(cfg: DictConfig, run_dir: Path) -> str:
    # A DictConfig's container is a dict.
    tree = cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    tree.pop("hydra", None)
    for path in _NOT_PART_OF_THE_RESULT:
        *parents, last = path.split(".")
        node = tree
        for key in parents:
            node = node.get(key, {})
        node.pop(last, None)
    text = json.dumps(tree, sort_keys=True, default=str)
    text = text.replace(str(Path(run_dir).resolve()), "<run dir>")
    return hashlib.sha256(text.encode()).hexdigest()


def find_finished(records: "RunRecords", experiment_name: str, digest: str) -> Optional["Run"]:
    """The newest FINISHED run of the experiment with this config digest, or None."""
    return records.newest_finished(experiment_name, f"tags.`{DIGEST_TAG}` = '{digest}'")


def skip_note(run: "Run") -> str:
    accuracy = run.data.metrics.get("eval/accuracy")
    shown = f", eval/accuracy {accuracy:.4f}" if accuracy is not None else ""
    return (
        f"skipped: run {run.info.run_id} ({run.info.run_name}) already finished with "
        f"this config{shown} (tracking.skip_finished=true)"
    )
