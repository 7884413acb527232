"""Where stage two finds stage one: its final weights and its snapshot folder.

Given as paths, or looked up from the stage-one run (``boost.stage_one_run_id``, or
``latest``), whose files are read locally where they are, else downloaded; explicit paths win.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple

from omegaconf import DictConfig

from ms_exp.config.errors import ConfigError

LATEST = "latest"
SNAPSHOTS_TAG = "ms_exp.snapshots.dir"
# Where downloaded stage-one artifacts are kept, below the working directory.
DOWNLOADS = Path(".ms_exp") / "stage_one"


@dataclass
class StageOne:
    run_id: Optional[str]
    weights: Path
    snapshots: Optional[Path]


def resolve_stage_one(boost_cfg: DictConfig, tracking_cfg: DictConfig) -> StageOne:
    run_id = boost_cfg.stage_one_run_id
    weights = boost_cfg.pretrained_weight_path
    snapshots = boost_cfg.weight_load_dir
    if run_id:
        run_id, run_weights, run_snapshots = _from_run(run_id, tracking_cfg)
        weights = weights or run_weights
        snapshots = snapshots or run_snapshots
    if not weights:
        raise ConfigError(
            "boost.pretrained_weight_path",
            None,
            "stage one's final checkpoint (or boost.stage_one_run_id=<run id>|"
            "latest); run +experiment=dim_reduce_stage_one first",
            problem="boost=dim_reduce needs the stage-one weights",
        )
    return StageOne(
        run_id, Path(weights).expanduser(), Path(snapshots).expanduser() if snapshots else None
    )


def fill_stage_one(cfg: DictConfig) -> None:
    """Write what ``resolve_stage_one`` found into ``cfg.boost``."""
    stage = resolve_stage_one(cfg.boost, cfg.tracking)
    cfg.boost.stage_one_run_id = stage.run_id
    cfg.boost.pretrained_weight_path = str(stage.weights)
    cfg.boost.weight_load_dir = str(stage.snapshots) if stage.snapshots else None


def _from_run(run_id: str, tracking_cfg: DictConfig) -> Tuple[str, Optional[Path], Path]:
    from ms_exp.tracking.records import NotRecorded, RunRecords
    from ms_exp.tracking.store import missing_store, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_cfg.uri)
    db = missing_store(uri)
    if db is not None:
        raise ConfigError(
            "boost.stage_one_run_id",
            run_id,
            "a stage-one run: run stage one first, here (python -m ms_exp.run "
            "+experiment=dim_reduce_stage_one), or name its store with "
            "tracking.uri=...",
            problem=f"there is no store ({db} does not exist)",
        )
    records = RunRecords.open(uri)
    if run_id == LATEST:
        run = _latest_stage_one(records, tracking_cfg.experiment_name, uri)
    else:
        try:
            run = records.run(run_id)
        except NotRecorded:
            raise ConfigError(
                "boost.stage_one_run_id", run_id, f"the id of a run in {uri}", problem="no such run"
            ) from None
    tags = run.data.tags
    if SNAPSHOTS_TAG not in tags:
        raise ConfigError(
            "boost.stage_one_run_id",
            run.info.run_id,
            "a stage-one run (checkpoint.snapshots.per_epoch >= 1)",
            problem="this run kept no weight snapshots",
        )
    run_dir = Path(tags.get("ms_exp.run_dir", ""))
    last = tags.get("ms_exp.checkpoint.last", "")
    weights = run_dir / last if last else None
    snapshots = Path(tags[SNAPSHOTS_TAG])
    if (weights is not None and not weights.is_file()) or not snapshots.is_dir():
        weights, snapshots = _download(records, run.info.run_id, last)
    return run.info.run_id, weights, snapshots


def _latest_stage_one(records: Any, experiment_name: str, uri: str) -> Any:
    run = records.newest_finished(experiment_name, f"tags.`{SNAPSHOTS_TAG}` LIKE '%'")
    if run is None:
        raise ConfigError(
            "boost.stage_one_run_id",
            LATEST,
            f"a finished stage-one run in experiment {experiment_name!r} of "
            f"{uri}; run +experiment=dim_reduce_stage_one first",
            problem="there is none",
        )
    return run


def _download(records: Any, run_id: str, last: str) -> Tuple[Optional[Path], Path]:
    """Stage one ran elsewhere: fetch its final checkpoint and snapshots from MLflow."""
    target = (DOWNLOADS / run_id).resolve()
    try:
        snapshots = records.download(run_id, "snapshots", target)
        weights = records.download(run_id, last, target) if last else None
    except Exception as error:  # MLflow raises several types for a missing artifact
        raise ConfigError(
            "boost.stage_one_run_id",
            run_id,
            "a stage-one run whose run directory or artifacts still exist",
            problem=f"its files are gone ({type(error).__name__})",
        ) from None
    return weights, snapshots
