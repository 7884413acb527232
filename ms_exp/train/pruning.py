"""A job of an Optuna sweep reports its eval metric to its trial after every epoch, and
stops at the end of the epoch after which the study's pruner prunes it."""

from typing import Any, Optional

from mindspore.train import Callback

from ms_exp.search.trial import TrialLink
from ms_exp.tracking.sweep_runs import objective_metric


class ReportToTrial(Callback):
    """Reports after each epoch's evaluation (step = the epoch number), which is also what
    the study's optimisation history and pruners read; stops training when pruned (the
    regular checkpoints are still written as training ends)."""

    def __init__(self, link: TrialLink, metric: Optional[str], last_epoch: int):
        super().__init__()
        self.link = link
        self.last_epoch = last_epoch
        self.trial = link.open()
        self.metric = metric
        self.pruned_epoch: Optional[int] = None

    def on_train_epoch_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        results = {
            f"eval/{name}": float(value)
            for name, value in (params.get("eval_results") or {}).items()
        }
        name = objective_metric(results, self.metric)
        if name not in results:
            return
        epoch = params.cur_epoch_num
        value = results[name]
        self.trial.report(value, epoch)
        # After the last epoch the trial has trained to the end: it completes with its value.
        if epoch < self.last_epoch and self.trial.should_prune():
            self.pruned_epoch = epoch
            print(
                f"Optuna study {self.link.study_name} pruned trial {self.link.number} after "
                f"epoch {epoch} ({name} {value:.4f}): stopping",
                flush=True,
            )
            run_context.request_stop()
