"""The Optuna study a sweep draws its trials from: where it is stored, what it is called,
and how far it has got.

The storage is one of Optuna's RDB storages: several sweep commands (on one machine, or on
several with a shared database) open the same study and each draws its own trials, Optuna
numbering them in the database.
"""

import hashlib
import json
import os
import socket
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from ms_exp.tracking.run_folder import process_exists
from ms_exp.tracking.store import resolve_tracking_uri, sqlite_lock, sqlite_path

if TYPE_CHECKING:
    import optuna
    from optuna.storages import RDBStorage

DEFAULT_STORAGE_FILE = "optuna.db"
# What n_trials counts: trials that ran to a result (pruned ones too), all workers together.
DONE_STATES = ("COMPLETE", "PRUNED")
# Seconds a connection waits for another worker's write to the SQLite file.
SQLITE_BUSY_TIMEOUT_S = 60
CREATION_ATTEMPTS = 5


def default_storage(tracking_uri: Optional[str]) -> str:
    """optuna.db beside the MLflow SQLite store; in the working directory for any other."""
    database = sqlite_path(resolve_tracking_uri(tracking_uri))
    folder = database.parent if database is not None else Path.cwd()
    return f"sqlite:///{(folder / DEFAULT_STORAGE_FILE).resolve()}"


def default_study_name(
    job_name: str, arguments: Sequence[str], space: Dict[str, str], direction: str
) -> str:
    """``<job>-<digest>``: the same command line and search space give the same study."""
    text = json.dumps(
        {"arguments": sorted(arguments), "space": space, "direction": direction}, sort_keys=True
    )
    return f"{job_name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def open_storage(url: str, heartbeat_interval: Optional[int] = None) -> "RDBStorage":
    """Optuna's RDB storage at ``url``; with a heartbeat, the trials this process runs
    show they are alive, and those of a worker that died are marked FAIL.

    Workers starting together on a fresh database both create its tables: on a SQLite file
    they take turns (a lock file beside it); on a server the one that loses the race
    (a duplicate table or type) finds the tables there when it tries again
    (docs/design.md#optuna-table-race)."""
    import optuna
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    engine = (
        {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}} if url.startswith("sqlite") else None
    )
    for attempt in range(1, CREATION_ATTEMPTS + 1):
        try:
            with sqlite_lock(url), warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine, heartbeat_interval=heartbeat_interval
                )
        except (IntegrityError, ProgrammingError):
            if attempt == CREATION_ATTEMPTS:
                raise
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


def trials_by_state(study: "optuna.Study") -> Dict[str, List[int]]:
    """Trial numbers by state name (COMPLETE, PRUNED, FAIL, RUNNING, WAITING)."""
    found: Dict[str, List[int]] = {}
    for trial in study.get_trials(deepcopy=False):
        found.setdefault(trial.state.name, []).append(trial.number)
    return found


# The trial's user attribute naming the process that runs it: "<host>:<pid>".
WORKER_ATTR = "ms_exp.worker"


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_dead_trials(study: "optuna.Study", storage: "RDBStorage") -> List[int]:
    """Mark FAIL the RUNNING trials whose worker is gone: a process of this host that no
    longer exists (a sweep killed with its process group and run again at once), or one
    that stopped sending heartbeats (Optuna's own check, which Study.optimize also runs
    before every trial, for workers of other hosts). Their numbers."""
    import optuna

    running = set(trials_by_state(study).get("RUNNING", []))
    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker_host, _, pid = str(trial.user_attrs.get(WORKER_ATTR, "")).rpartition(":")
        if worker_host == host and pid.isdigit() and not process_exists(int(pid)):
            trial_id = storage.get_trial_id_from_study_id_trial_number(
                storage.get_study_id_from_name(study.study_name), trial.number
            )
            storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    return sorted(running - set(trials_by_state(study).get("RUNNING", [])))
