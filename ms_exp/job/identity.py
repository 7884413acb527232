"""Who a job's MLflow run is: its name, tags and sweep parent, and the earlier FINISHED run
of the same config that ``tracking.skip_finished`` returns instead of training again."""

import shlex
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from omegaconf import DictConfig

from ms_exp.config.targets import component_name
from ms_exp.pool.devices import DEVICES_TAG, job_devices
from ms_exp.search.trial import current_trial
from ms_exp.tracking.finished import DIGEST_TAG, find_finished, skip_note
from ms_exp.tracking.sweep import child_run_name, parent_run_id, swept_tags
from ms_exp.train.result import JobResult


def run_identity(
    cfg: DictConfig, run_dir: Path, overrides: Sequence[str], uri: str, digest: str
) -> Tuple[str, Dict[str, str], Optional[str]]:
    """The MLflow run's name, tags and parent: in a multirun a child of the sweep's parent
    run, named by its swept values."""
    tags = {
        DIGEST_TAG: digest,
        "ms_exp.parallel_mode": cfg.parallel.mode,
        "ms_exp.device_num": str(cfg.parallel.device_num),
        "ms_exp.dataset": component_name(cfg.dataset),
        "ms_exp.model": component_name(cfg.model),
        "ms_exp.run_dir": str(run_dir.resolve()),
        "ms_exp.overrides": shlex.join(overrides),
    }
    devices = job_devices()
    if devices:
        tags[DEVICES_TAG] = devices  # the pool's share: which devices (or cores) it ran on
    trial = current_trial()
    if trial is not None:
        tags.update(trial.tags())
    parent = parent_run_id(uri, cfg.tracking.experiment_name)
    run_name = (
        cfg.tracking.run_name
        or f"{component_name(cfg.model)}-{component_name(cfg.dataset)}-{cfg.parallel.mode}"
    )
    if parent:
        tags["ms_exp.sweep.id"] = parent
        tags.update(swept_tags(list(overrides)))
        run_name = child_run_name(list(overrides)) or run_name
    return run_name, tags, parent


def finished_before(
    cfg: DictConfig, run_dir: Path, uri: str, digest: str, overrides: Sequence[str]
) -> Optional[JobResult]:
    """The result of a FINISHED run with this config, if there is one (skip_finished)."""
    from ms_exp.tracking.recorder import detect_outages_quickly, is_unreachable
    from ms_exp.tracking.records import RunRecords

    detect_outages_quickly()  # seconds, not MLflow's minutes of retries, for a dead server
    records = RunRecords.open(uri)
    try:
        earlier = find_finished(records, cfg.tracking.experiment_name, digest)
    except Exception as error:
        if not is_unreachable(error):
            raise
        print(
            f"ms_exp: warning: tracking.skip_finished: {uri} is unreachable, so whether "
            "this config already finished is unknown; training it",
            file=sys.stderr,
            flush=True,
        )
        return None
    if earlier is None:
        return None
    print(skip_note(earlier), flush=True)
    parent = parent_run_id(uri, cfg.tracking.experiment_name)
    if parent:
        records.tag_run(
            parent, f"ms_exp.sweep.skipped.{earlier.info.run_id}", shlex.join(overrides)[:5000]
        )
    final_eval = {k: v for k, v in earlier.data.metrics.items() if k.startswith("eval/")}
    return JobResult(
        run_dir=run_dir,
        run_id=earlier.info.run_id,
        final_eval=final_eval,
        best_value=None,
        last_checkpoint=None,
        best_checkpoint=None,
    )
