"""``hydra/launcher=pool`` as Hydra sees it: the launcher's settings, the pool opened at the
first job, and each job's share worked out from its own config."""

import functools
import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from ms_exp.config.hydra_internals import BASIC_SWEEPER
from ms_exp.pool import POOL_LAUNCHER
from ms_exp.pool.devices import accelerator_of, pool_units, units_per_job
from ms_exp.pool.dispatch import DevicePool, keep_until_closed, launch_jobs, open_pool
from ms_exp.pool.worker import JobOrder
from ms_exp.tracking.store import resolve_tracking_uri


# kw_only: _target_ stays the first key of Hydra's records, and no other key has a default
# here: the values are pool.yaml's, beside what each means.
@dataclass(kw_only=True)
class PoolLauncherConf:
    """The launcher's keys, typed: conf/hydra/launcher/pool.yaml extends it with their values
    and says what each means; the preflight checks the values (ms_exp/pool/checks.py)."""

    _target_: str = POOL_LAUNCHER
    devices: Optional[List[int]]
    accelerator: str
    cores_per_job: int
    stop_timeout: float


def register_launcher_config() -> None:
    """Under ``schema/``, beside ms_exp's group schemas, so that ``hydra/launcher`` lists the
    preset alone (``pool``), not its schema too."""
    ConfigStore.instance().store(
        group="schema/hydra/launcher", name="pool", node=PoolLauncherConf, provider="ms_exp"
    )


class PoolLaunch(Launcher):
    """The launcher; Hydra instantiates it as hydra_plugins' PoolLauncher."""

    # Hydra passes every key of PoolLauncherConf, with conf/hydra/launcher/pool.yaml's values;
    # setup reads the pool's from the sweep's config (hydra.launcher), as ms_exp.run does.
    def __init__(self, cores_per_job: int, **pool_keys: Any) -> None:
        self.cores_per_job = int(cores_per_job)
        self.pool: Optional[DevicePool] = None
        self._lock = threading.Lock()  # the Optuna sweeper launches from several threads
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.task_function = task_function
        self.pool = open_pool(started_pool(config))
        self.pool.lost_jobs_end_sweep = (
            OmegaConf.select(config, "hydra.sweeper._target_") == BASIC_SWEEPER
        )
        print(f"hydra/launcher=pool: {describe(self.pool, self.cores_per_job)}", flush=True)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> List[JobReturn]:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import setup_globals

        pool, config, context = self.pool, self.config, self.hydra_context
        assert pool is not None and config is not None and context is not None  # setup() ran
        setup_globals()
        state = Singleton.get_state()
        orders = [
            JobOrder(
                initial_job_idx + offset,
                list(overrides),
                context,
                None,  # the job's config: composed by share_of, before the job is sent
                self.task_function,
                state,
                dict(os.environ),
            )
            for offset, overrides in enumerate(job_overrides)
        ]
        fail_fast = bool(OmegaConf.select(config, "sweep.fail_fast", default=False))

        # Asked twice for the first job (to size the threads, then to start it): composed once,
        # here, and the worker runs the job on this config instead of composing it again.
        @functools.lru_cache(maxsize=None)
        def share_of(index: int) -> int:
            """Units job ``index`` holds: one per rank (``parallel.device_num``), each rank
            ``cores_per_job`` cores on the CPU."""
            order = orders[index]
            overrides = list(order.overrides)
            with self._lock:  # Hydra's config loader is not made for threads
                order.config = context.config_loader.load_sweep_config(config, overrides)
            devices = int(order.config.parallel.device_num)
            return units_per_job(pool.accelerator, devices, self.cores_per_job)

        return launch_jobs(pool, orders, share_of, fail_fast)


# Pools ms_exp.run started before Hydra set the launcher up, by what they share.
_early: Dict[Tuple[str, Tuple[int, ...], int, float], DevicePool] = {}


def started_pool(config: DictConfig, early: bool = False) -> DevicePool:
    """The pool of ``config``'s sweep (its ``hydra.launcher``), a worker started for each
    share of the sweep's usual size, idle until a job takes it: the one started ``early``
    for the same shares, else a new one. ``early``: started before the sweep's parent run,
    kept for the launcher (ms_exp.run)."""
    launcher = config.hydra.launcher
    kind = accelerator_of(launcher.accelerator, OmegaConf.select(config, "trainer.device_target"))
    units = pool_units(kind, launcher.devices)
    per_job = units_per_job(kind, int(config.parallel.device_num), int(launcher.cores_per_job))
    key = (kind, tuple(units), per_job, float(launcher.stop_timeout))
    pool = None if early else _early.pop(key, None)
    while not early and _early:  # started for other shares than the launcher's: not needed
        _early.popitem()[1].close()
    if pool is None:
        uri = resolve_tracking_uri(config.tracking.uri) if config.tracking.enabled else None
        pool = DevicePool(kind, units, float(launcher.stop_timeout), uri)
        pool.warm(per_job)
    if early:
        _early[key] = keep_until_closed(pool)
    return pool


def describe(pool: DevicePool, cores_per_job: int) -> str:
    units = ", ".join(map(str, pool.units))
    if pool.accelerator == "CPU":
        return (
            f"CPU cores {units}, {cores_per_job} per job (per rank): up to "
            f"{pool.capacity(cores_per_job)} jobs at once"
        )
    return (
        f"{pool.accelerator} devices {units}, one per rank: up to {pool.capacity(1)} "
        f"single-device jobs at once"
    )
