"""The run folder claimed before Hydra writes into it (a Hydra callback, named in
conf/config.yaml).

Hydra writes ``.hydra/`` into the run folder before the job starts, so a command refused
only then would have overwritten the owner's record: the folder (or a sweep's) is claimed
here by the rule of ms_exp/tracking/run_folder.py, and again by the job
(ms_exp/job/run_job.py) for sweep job folders and configs that leave this callback out.
"""

import sys
from pathlib import Path
from typing import Any, Callable, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ms_exp.tracking.run_folder import (
    RUN_RECORD,
    FolderRefused,
    check_owner,
    hold_folder,
    read_run_record,
    refuse_foreign,
)

EXIT_BAD_CONFIG = 2


class RunFolderClaim(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(str(config.hydra.run.dir))
        key = f"hydra.run.dir={run_dir}"

        def claim() -> None:
            hold_folder(run_dir, key)
            check_owner(run_dir, key, _resume(config), lambda: _digest(config, run_dir))

        _refusal_exits(claim)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        key = f"hydra.sweep.dir={sweep_dir}"

        def claim() -> None:
            hold_folder(sweep_dir, key)
            if _resume(config) is None:
                for record in sorted(sweep_dir.glob(f"*/{RUN_RECORD}")):
                    refuse_foreign(
                        record.parent,
                        key,
                        read_run_record(record.parent),
                        f" (a job of an earlier sweep in {sweep_dir})",
                    )

        _refusal_exits(claim)


def _resume(config: DictConfig) -> Optional[str]:
    return OmegaConf.select(config, "trainer.resume", default=None)


def _digest(config: DictConfig, run_dir: Path) -> str:
    """The job's config digest, as the job will compute it (its ``${hydra:...}`` values
    resolved against this folder)."""
    from ms_exp.preflight.compose import hydra_config_of
    from ms_exp.preflight.interpolations import without_hydra
    from ms_exp.tracking.finished import config_digest

    with hydra_config_of(config, str(run_dir)):
        return config_digest(without_hydra(config), run_dir)


def _refusal_exits(claim: Callable[[], None]) -> None:
    """Hydra reports an exception in a callback with a traceback and exit status 1; a
    refusal is one line and exit status 2, as for any other bad input."""
    try:
        claim()
    except FolderRefused as error:
        print(f"ms_exp: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_CONFIG) from None
