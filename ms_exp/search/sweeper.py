"""The sweep loop behind ``hydra/sweeper=optuna``: one Optuna study, resumed when it
exists, whose trials are Hydra jobs.

``Study.optimize`` runs the loop, so Optuna's heartbeat, ``TrialPruned`` and
``MaxTrialsCallback`` apply as they are. Each trial is a job of the configured Hydra
launcher in ``<sweep dir>/<trial number>``, unique across workers.
"""

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Tuple, cast

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from ms_exp.config.errors import end_failed_sweep
from ms_exp.search.space import job_override, split_space, suggest
from ms_exp.search.study import (
    DONE_STATES,
    WORKER_ATTR,
    default_storage,
    default_study_name,
    fail_dead_trials,
    open_storage,
    trials_by_state,
    worker_identity,
)
from ms_exp.search.trial import STORAGE_ENV, STUDY_ENV, TRIAL_ENV, TRIAL_NUMBER_ENV
from ms_exp.tracking.store import masked
from ms_exp.tracking.sweep_runs import DIRECTION_TAG, OBJECTIVE_METRICS, STORAGE_TAG, STUDY_TAG

if TYPE_CHECKING:
    import optuna
    from hydra.plugins.launcher import Launcher
    from hydra.types import HydraContext, TaskFunction

RESULTS_FILE = "optimization_results.yaml"  # the best trial, as Hydra's Optuna sweeper writes it


class NoObjective(ValueError):
    """A job returned no value to optimise."""


class OptunaSearch(Sweeper):
    """The sweeper; Hydra instantiates it as hydra_plugins' OptunaSweeper."""

    def __init__(
        self,
        sampler: Any,
        pruner: Any,
        direction: Any,
        storage: Optional[str],
        study_name: Optional[str],
        n_trials: int,
        n_jobs: int,
        heartbeat_interval: int,
        params: Optional[Dict[str, str]],
    ) -> None:
        self.sampler, self.pruner = sampler, pruner
        self.direction = getattr(direction, "name", str(direction))
        self.storage, self.study_name = storage, study_name
        self.n_trials, self.n_jobs = n_trials, n_jobs
        self.heartbeat_interval = heartbeat_interval
        self.params = dict(params or {})
        # Set by setup(), which Hydra calls before sweep().
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(
        self, *, hydra_context: "HydraContext", task_function: "TaskFunction", config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    # -----------------------------------------------------------------------------------
    def sweep(self, arguments: List[str]) -> Any:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        assert self.config is not None and self.hydra_context is not None  # setup() ran
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        params = [f"{key}={value}" for key, value in self.params.items()]
        space, fixed = split_space(parser.parse_overrides([*params, *arguments]))
        url = self.storage or default_storage(self.config.tracking.uri)
        name = self.study_name or default_study_name(
            self.config.hydra.job.name,
            arguments,
            {k: repr(d) for k, d in space.items()},
            self.direction,
        )
        study = self._open_study(url, name)
        # The jobs (and their ranks) find the study in this process's environment: the
        # storage is the sweep's, not one of a job's overrides.
        os.environ.update({STORAGE_ENV: url, STUDY_ENV: name})
        try:
            import optuna

            sweep_dir = Path(self.config.hydra.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            done = sum(
                len(v) for state, v in trials_by_state(study).items() if state in DONE_STATES
            )
            failures: List[Tuple[int, BaseException]] = []  # trial number, what its job raised
            fail_fast = bool(OmegaConf.select(self.config, "sweep.fail_fast", default=False))
            if done >= self.n_trials:
                print(
                    f"study {name}: {done} of hydra.sweeper.n_trials={self.n_trials} trials "
                    f"done already; nothing to run (raise n_trials to run more)",
                    flush=True,
                )
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    # At most the trials still missing from this worker (its failures do not
                    # count as done, and must not make it loop); fewer when others fill them.
                    states = tuple(optuna.trial.TrialState[s] for s in DONE_STATES)
                    study.optimize(
                        self._objective(space, fixed, failures),
                        n_trials=self.n_trials - done,
                        n_jobs=self.n_jobs,
                        catch=() if fail_fast else (Exception,),
                        callbacks=[optuna.study.MaxTrialsCallback(self.n_trials, states=states)],
                    )
            self._write_results(study, sweep_dir)
            if failures:  # every job ran: the first failure is said
                number, error = failures[0]
                end_failed_sweep(
                    f"{len(failures)} of this sweep's trials failed; the first, "
                    f"trial {number}: {type(error).__name__}: {error}"
                )
            return []
        finally:
            # A later run in this process (tests call main() again) is no trial.
            for key in (STORAGE_ENV, STUDY_ENV):
                os.environ.pop(key, None)

    def _open_study(self, url: str, name: str) -> "optuna.Study":
        import optuna
        from hydra.utils import instantiate

        from ms_exp.tracking.sweep import tag_active_sweep

        storage = open_storage(url, self.heartbeat_interval)
        # A Direction's name (ms_exp.search.options): minimize or maximize.
        direction = cast(Literal["minimize", "maximize"], self.direction)
        study = optuna.create_study(
            storage=storage, study_name=name, direction=direction, load_if_exists=True
        )
        if study.direction.name.lower() != self.direction:
            raise ValueError(
                f"hydra.sweeper.direction={self.direction}: the study {name} in "
                f"{masked(url)} was created to {study.direction.name.lower()}; "
                f"expected that, or another hydra.sweeper.study_name"
            )
        dead = fail_dead_trials(study, storage)
        earlier = len(study.get_trials(deepcopy=False))
        sampler = cast(Dict[str, Any], OmegaConf.to_container(self.sampler, resolve=True))
        if earlier and sampler.get("seed") is not None:
            # A resumed study with the seed it started with would draw its first trials'
            # values again; the seed moves on by the trials it already has.
            sampler["seed"] += earlier
        study.sampler = instantiate(sampler)
        study.pruner = instantiate(self.pruner)
        states = ", ".join(f"{len(v)} {k}" for k, v in trials_by_state(study).items())
        print(
            f"Optuna study {name} in {masked(url)} ({self.direction}): {states or 'no trials'}; "
            f"running trials until hydra.sweeper.n_trials={self.n_trials} are "
            f"{' or '.join(DONE_STATES)}",
            flush=True,
        )
        if dead:
            print(
                f"trials {', '.join(map(str, dead))} were RUNNING when their worker stopped "
                f"(its process is gone, or it stopped sending heartbeats): marked FAIL",
                flush=True,
            )
        tag_active_sweep({STUDY_TAG: name, STORAGE_TAG: masked(url), DIRECTION_TAG: self.direction})
        return study

    def _objective(
        self, space: Dict[str, Any], fixed: List[str], failures: List[Tuple[int, BaseException]]
    ) -> Callable[["optuna.Trial"], float]:
        from ms_exp.search.pruned import TrialPruned
        from ms_exp.search.trial import sweep_metric

        assert self.config is not None and self.launcher is not None  # setup() ran
        metric = sweep_metric(self.config) or " or ".join(OBJECTIVE_METRICS)
        launcher = self.launcher

        def objective(trial: "optuna.Trial") -> float:
            # Who runs the trial: a later sweep on this host fails it at once if that
            # process is gone (ms_exp/search/study.py), not only once its heartbeat is old.
            trial.set_user_attr(WORKER_ATTR, worker_identity())
            values = [job_override(key, suggest(trial, key, dist)) for key, dist in space.items()]
            job = [
                *fixed,
                *values,
                # Optuna's Trial has no public id getter; the job reopens the trial by it
                # (docs/design.md#optuna-rdb-storage).
                f"+hydra.job.env_set.{TRIAL_ENV}={trial._trial_id}",
                f"+hydra.job.env_set.{TRIAL_NUMBER_ENV}={trial.number}",
            ]
            (result,) = launcher.launch([job], initial_job_idx=trial.number)
            if isinstance(result._return_value, TrialPruned):
                # Raised as it is: reading return_value would log it as a failed job.
                raise result._return_value
            try:
                value = result.return_value  # raises what the job raised
                if value is None:
                    raise NoObjective(
                        f"job {trial.number} ({' '.join(values)}) returned no "
                        f"{metric}, the value the study optimises"
                    )
            except Exception as error:
                failures.append((trial.number, error))
                raise
            return value

        return objective

    def _write_results(self, study: "optuna.Study", sweep_dir: Path) -> None:
        """The best trial so far, as Hydra's Optuna sweeper writes it (the sweep callback
        logs it to the parent run)."""
        try:
            best = study.best_trial
        except ValueError:  # no trial completed
            return
        found = {"best_trial": best.number, "best_params": best.params, "best_value": best.value}
        OmegaConf.save(
            OmegaConf.create({"name": "optuna", "study": study.study_name, **found}),
            sweep_dir / RESULTS_FILE,
        )
        print(
            f"best trial of study {study.study_name}: {best.number}, value {best.value:.4f}, "
            + " ".join(job_override(k, v) for k, v in best.params.items()),
            flush=True,
        )
