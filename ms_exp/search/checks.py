"""What a sweep command is refused for before it starts (the Optuna sweeper's settings), and
how ``sweep.fail_fast`` makes Hydra's basic sweeper stop."""

import os
from typing import List, Sequence

from omegaconf import DictConfig, OmegaConf

from ms_exp.config.errors import ConfigError, require
from ms_exp.config.hydra_internals import BASIC_LAUNCHER, BASIC_SWEEPER
from ms_exp.pool import POOL_LAUNCHER
from ms_exp.search.options import NO_PRUNER, SWEEPER_TARGET
from ms_exp.search.study import default_storage
from ms_exp.tracking.store import holds_password, masked, sqlite_path


def check_optuna_sweep(cfg: DictConfig, overrides: Sequence) -> None:
    """``cfg``: one job's config with its Hydra part; ``overrides``: the command line's,
    parsed (Hydra's Override)."""
    sweeper = cfg.hydra.sweeper
    if sweeper.get("_target_") != SWEEPER_TARGET:
        return
    for key in ("n_trials", "n_jobs", "heartbeat_interval"):
        require(sweeper[key] >= 1, f"hydra.sweeper.{key}", sweeper[key], "an integer >= 1")
    if not sweeper.params and not any(o.is_sweep_override() for o in overrides):
        raise ConfigError(
            "hydra.sweeper.params",
            None,
            "a search space: hydra.sweeper.params or key=interval(a,b) / choice(a,b) / "
            "range(a,b) on the command line",
            "nothing to search",
        )
    if sweeper.n_jobs > 1 and cfg.hydra.launcher._target_ == BASIC_LAUNCHER:
        raise ConfigError(
            "hydra.sweeper.n_jobs",
            sweeper.n_jobs,
            "1 with Hydra's basic launcher, which runs jobs one at a time in "
            "this process; or hydra/launcher=pool (or concurrent, or slurm)",
        )
    pruner = sweeper.pruner._target_
    if pruner != NO_PRUNER and cfg.parallel.device_num > 1:
        raise ConfigError(
            "hydra/sweeper/pruner",
            pruner.rsplit(".", 1)[-1],
            f"none for a distributed job (parallel.device_num={cfg.parallel.device_num}): its "
            "ranks could not agree on the epoch to stop at",
        )
    if sweeper.storage is not None:
        _check_storage(sweeper.storage)
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    for key in ("sampler", "pruner"):
        node = sweeper[key]
        try:
            instantiate(node)
        except InstantiationException as error:
            cause = error.__cause__ or error
            raise ConfigError(
                f"hydra.sweeper.{key}",
                node._target_,
                f"arguments {node._target_} takes",
                str(cause).splitlines()[0],
            ) from None
    if sweeper.study_name is not None:
        _check_existing_study(sweeper, sweeper.storage or default_storage(cfg.tracking.uri))


def _check_storage(url: str) -> None:
    if holds_password(url):
        # Refused rather than masked: Hydra writes the URL into every job's
        # .hydra/hydra.yaml and multirun.yaml, which the runs log as artifacts.
        raise ConfigError(
            "hydra.sweeper.storage",
            masked(url),
            "a database URL without a password, the password in PGPASSWORD or "
            "~/.pgpass (libpq reads them)",
            "a password in the URL would be "
            "written into the sweep's Hydra records and MLflow artifacts",
        )
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url)
    except ArgumentError:
        raise ConfigError(
            "hydra.sweeper.storage",
            masked(url),
            "a database URL such as sqlite:////abs/path/optuna.db or postgresql://user@host/db",
        ) from None


def _check_existing_study(sweeper: DictConfig, url: str) -> None:
    """A study named on the command line that exists must optimise in the same direction;
    its storage must answer. (A default name holds the direction, so it cannot clash.)"""
    database = sqlite_path(url)
    if database is not None and not database.is_file():
        return  # the sweep creates it
    import optuna

    from ms_exp.search.study import open_storage

    try:
        # An existing SQLite file is read as it is (no lock file beside it); a server
        # database may be new, and other workers may be creating its tables right now.
        storage = url if database is not None else open_storage(url)
        study = optuna.load_study(study_name=sweeper.study_name, storage=storage)
    except KeyError:
        return  # a new study in an existing storage
    except Exception as error:  # a server that does not answer, a missing driver, ...
        raise ConfigError(
            "hydra.sweeper.storage",
            masked(url),
            "a database Optuna can open",
            str(error).splitlines()[0][:300],
        ) from None
    direction = sweeper.direction.name
    if study.direction.name.lower() != direction:
        raise ConfigError(
            "hydra.sweeper.direction",
            direction,
            f"{study.direction.name.lower()}, the direction study {sweeper.study_name} in "
            f"{masked(url)} was created with (or another hydra.sweeper.study_name)",
        )


def fail_fast_overrides(cfg: DictConfig, overrides: Sequence[str]) -> List[str]:
    """With ``sweep.fail_fast``, Hydra's basic sweeper launches its jobs in batches of what
    the launcher runs at once (``hydra.sweeper.max_batch_size``): it stops after a batch
    with a failed job, so no job starts after one failed. Hydra's default is one batch.
    The pool launcher needs no batches: it starts no job after one failed."""
    if (
        not OmegaConf.select(cfg, "sweep.fail_fast", default=False)
        or cfg.hydra.sweeper.get("_target_") != BASIC_SWEEPER
        or cfg.hydra.launcher.get("_target_") == POOL_LAUNCHER
        or any(o.startswith("hydra.sweeper.max_batch_size=") for o in overrides)
    ):
        return []
    # Jobs the launcher runs at the same time: joblib's n_jobs (-1: a job per CPU),
    # submitit's array_parallelism, 1 for Hydra's basic launcher.
    n_jobs = cfg.hydra.launcher.get("n_jobs")
    if n_jobs is None:
        at_once = cfg.hydra.launcher.get("array_parallelism") or 1
    else:
        at_once = n_jobs if n_jobs > 0 else max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return [f"hydra.sweeper.max_batch_size={at_once}"]
