"""The exception a pruned job raises. Its own module because it subclasses Optuna's, so
importing it imports Optuna: only a job whose trial was pruned, and the sweeper, need it."""

from typing import Tuple

import optuna

from ms_exp.tracking.lifecycle import EndedEarly


class TrialPruned(EndedEarly, optuna.TrialPruned):
    """The study pruned the job's trial after ``epoch``. As ms_exp's EndedEarly the job's
    MLflow run ends KILLED; as Optuna's TrialPruned, raised back in the sweeper, the trial
    ends PRUNED."""

    def __init__(self, study_name: str, epoch: int):
        super().__init__(f"pruned by Optuna study {study_name} after epoch {epoch}")
        self.study_name, self.epoch = study_name, epoch

    # Pickled back from a joblib or submitit worker.
    def __reduce__(self) -> Tuple[type, Tuple[str, int]]:
        return type(self), (self.study_name, self.epoch)
