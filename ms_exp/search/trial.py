"""The Optuna trial a job of an Optuna sweep belongs to, as the job sees it.

The sweeper puts the study's storage and name into the environment every job inherits, and
each job's trial id and number into its ``hydra.job.env_set``. A job reports its eval metric
after every epoch and stops when the pruner says so (ms_exp/train/pruning.py).
"""

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from omegaconf import DictConfig, OmegaConf

from ms_exp.tracking.sweep_runs import STUDY_TAG, TRIAL_TAG, objective_metric

if TYPE_CHECKING:
    import optuna

STORAGE_ENV = "MS_EXP_OPTUNA_STORAGE"
STUDY_ENV = "MS_EXP_OPTUNA_STUDY"
TRIAL_ENV = "MS_EXP_OPTUNA_TRIAL"
TRIAL_NUMBER_ENV = "MS_EXP_OPTUNA_TRIAL_NUMBER"


@dataclass(frozen=True)
class TrialLink:
    storage: str
    study_name: str
    trial_id: int
    number: int

    def tags(self) -> dict:
        return {STUDY_TAG: self.study_name, TRIAL_TAG: str(self.number)}

    def open(self) -> "optuna.Trial":
        """The trial, to report to and to ask whether to prune (Optuna's Trial), judged by
        the sweep's pruner (``hydra.sweeper.pruner``, in the job's Hydra config)."""
        import optuna
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import instantiate

        from ms_exp.search.study import open_storage

        # HydraConfig.get() is declared a HydraConf; what it returns is its DictConfig.
        pruner = OmegaConf.select(HydraConfig.get(), "sweeper.pruner")  # type: ignore[arg-type]
        study = optuna.load_study(
            study_name=self.study_name,
            storage=open_storage(self.storage),
            pruner=instantiate(pruner) if pruner else None,
        )
        return optuna.trial.Trial(study, self.trial_id)


def current_trial() -> Optional[TrialLink]:
    """This job's trial; None outside an Optuna sweep."""
    trial_id = os.environ.get(TRIAL_ENV)
    if not trial_id or not os.environ.get(STORAGE_ENV):
        return None
    number = int(os.environ.get(TRIAL_NUMBER_ENV, "-1"))
    return TrialLink(os.environ[STORAGE_ENV], os.environ[STUDY_ENV], int(trial_id), number)


def sweep_metric(cfg: DictConfig) -> Optional[str]:
    """The eval metric a sweep optimises and prunes by (sweep.metric); None: the first of
    OBJECTIVE_METRICS a job logs."""
    return OmegaConf.select(cfg, "sweep.metric", default=None)


def objective_value(final_eval: dict, metric: Optional[str]) -> Optional[float]:
    """The job's value for the sweeper (None: the job logged no such metric)."""
    return final_eval.get(objective_metric(final_eval, metric))
