"""``hydra/sweeper=optuna``: the sweeper's typed config with hydra-optuna-sweeper's key names
(that plugin pins optuna<3, docs/design.md#optuna-rdb-storage), its samplers and pruners;
registered by the sweeper plugin (hydra_plugins/ms_exp_optuna_sweeper).
"""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

SWEEPER_TARGET = "hydra_plugins.ms_exp_optuna_sweeper.optuna_sweeper.OptunaSweeper"


class Direction(Enum):
    maximize = 1  # the job returns its final eval/accuracy (or sweep.metric): larger is better
    minimize = 2


@dataclass
class TPESamplerConf:
    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    n_startup_trials: int = 10  # random trials before TPE models the results
    multivariate: bool = False


@dataclass
class RandomSamplerConf:
    _target_: str = "optuna.samplers.RandomSampler"
    seed: Optional[int] = None


@dataclass
class BruteForceSamplerConf:
    """Every combination of a discrete space (choice, range, a,b,c) once, in random order."""

    _target_: str = "optuna.samplers.BruteForceSampler"
    seed: Optional[int] = None


@dataclass
class NopPrunerConf:
    _target_: str = "optuna.pruners.NopPruner"


@dataclass
class MedianPrunerConf:
    """Stops a trial whose eval metric at an epoch is worse than the median of the earlier
    trials at the same epoch."""

    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: int = 5  # trials that always run to the end first
    n_warmup_steps: int = 0  # no trial is pruned before this epoch (epochs count from 1)
    interval_steps: int = 1
    n_min_trials: int = 1


@dataclass
class SuccessiveHalvingPrunerConf:
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Any = "auto"  # epochs before the first cut; auto: Optuna estimates it
    reduction_factor: int = 4
    min_early_stopping_rate: int = 0


@dataclass
class HyperbandPrunerConf:
    _target_: str = "optuna.pruners.HyperbandPruner"
    min_resource: int = 1
    max_resource: Any = "auto"  # epochs of a full trial; auto: the most a trial reported
    reduction_factor: int = 3


SAMPLERS = {
    "tpe": TPESamplerConf,
    "random": RandomSamplerConf,
    "brute_force": BruteForceSamplerConf,
}
PRUNERS = {
    "none": NopPrunerConf,
    "median": MedianPrunerConf,
    "successive_halving": SuccessiveHalvingPrunerConf,
    "hyperband": HyperbandPrunerConf,
}
NO_PRUNER = NopPrunerConf._target_


@dataclass
class OptunaSweeperConf:
    _target_: str = SWEEPER_TARGET
    # The sampler and pruner reach the sweeper as config: it instantiates them once the
    # study is open (a resumed study's sampler seed moves on).
    _recursive_: bool = False
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}, {"pruner": "none"}])
    sampler: Any = MISSING  # composed from the defaults above (a None here would win)
    pruner: Any = MISSING
    direction: Direction = Direction.maximize
    # An Optuna RDB URL; None: optuna.db beside the MLflow SQLite store (else in the working
    # directory). Running the same command again resumes the study stored there.
    storage: Optional[str] = None
    # None: named after the command line (its overrides and search space), so that the same
    # command resumes the same study and another one starts its own.
    study_name: Optional[str] = None
    # The study's COMPLETE and PRUNED trials, all workers together: a worker starts trials
    # until there are this many (failed ones do not count).
    n_trials: int = 20
    # Trials this process runs at once; more than 1 needs a launcher that runs jobs in their
    # own processes (hydra/launcher=concurrent or slurm).
    n_jobs: int = 1
    # Seconds between a running trial's signs of life in the storage; a trial silent for
    # twice as long (its worker died) is marked FAIL.
    heartbeat_interval: int = 10
    # key -> search space in Hydra's override grammar (interval(0.1,0.5), choice(a,b),
    # range(1,5), tag(log,interval(1e-4,1e-1))); the command line adds more.
    params: Optional[Dict[str, str]] = None


def register_sweeper_configs() -> None:
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="ms_exp")
    for group, nodes in (("sampler", SAMPLERS), ("pruner", PRUNERS)):
        for name, node in nodes.items():
            store.store(group=f"hydra/sweeper/{group}", name=name, node=node, provider="ms_exp")
