"""Finding a job that already finished with the same config, so a re-run sweep skips it.

Every run is tagged with a digest of its resolved config (``ms_exp.config_digest``). Paths
inside the job's own run directory (the strategy file's default location) are replaced by
a placeholder and the ``tracking`` section, the progress bar and ``trainer.resume`` are left
out: they change where and how a result is recorded or reached, not the result. With
``tracking.skip_finished=true`` a job whose digest matches a FINISHED run of the same
experiment is not trained again; a re-run of a sweep with a failed or missing job therefore
trains only those.
"""

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Optional, cast

from omegaconf import DictConfig, OmegaConf

DIGEST_TAG = "ms_exp.config_digest"
_NOT_PART_OF_THE_RESULT = (
    ("tracking",),
    ("sweep",),
    ("trainer", "progress_bar"),
    ("trainer", "resume"),
)


def config_digest(cfg: DictConfig, run_dir: Path) -> str:
    # A DictConfig's container is a dict.
    tree = cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    tree.pop("hydra", None)
    for path in _NOT_PART_OF_THE_RESULT:
        node = tree
        for key in path[:-1]:
            node = node.get(key, {})
        node.pop(path[-1], None)
    text = json.dumps(tree, sort_keys=True, default=str)
    text = text.replace(str(Path(run_dir).resolve()), "<run dir>")
    return hashlib.sha256(text.encode()).hexdigest()


def find_finished(client, experiment_name: str, digest: str):
    """The newest FINISHED run of the experiment with this config digest, or None."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"attributes.status = 'FINISHED' and tags.`{DIGEST_TAG}` = '{digest}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def skip_note(run) -> Optional[str]:
    accuracy = run.data.metrics.get("eval/accuracy")
    shown = f", eval/accuracy {accuracy:.4f}" if accuracy is not None else ""
    return (
        f"skipped: run {run.info.run_id} ({run.info.run_name}) already finished with "
        f"this config{shown} (tracking.skip_finished=true)"
    )
