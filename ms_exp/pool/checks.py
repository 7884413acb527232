"""What ``hydra/launcher=pool`` is refused for before a sweep starts: settings out of range,
a pool that cannot be found, and a job that needs more of it than there is."""

import os
from typing import Sequence

from omegaconf import DictConfig, ListConfig

from ms_exp.config.errors import ConfigError, InvalidConfig, require
from ms_exp.pool import POOL_LAUNCHER
from ms_exp.pool.devices import ACCELERATORS, NoDevices, accelerator_of, pool_units, units_per_job


def check_pool(configs: Sequence[DictConfig]) -> None:
    """``configs``: every job of the sweep, each with its Hydra part."""
    if not configs or configs[0].hydra.launcher.get("_target_") != POOL_LAUNCHER:
        return
    launcher = configs[0].hydra.launcher
    cores, timeout = launcher.cores_per_job, launcher.stop_timeout
    for key, ok, expected in (
        ("accelerator", launcher.accelerator in ACCELERATORS, f"one of {', '.join(ACCELERATORS)}"),
        ("cores_per_job", isinstance(cores, int) and cores >= 1, "an integer >= 1"),
        ("stop_timeout", timeout > 0, "seconds > 0 that a stopped job gets before it is killed"),
    ):
        require(ok, f"hydra.launcher.{key}", launcher[key], expected)
    devices = launcher.devices
    if devices is not None:
        require(
            isinstance(devices, ListConfig)
            and len(devices) > 0
            and all(isinstance(d, int) and d >= 0 for d in devices)
            and len(set(devices)) == len(devices),
            "hydra.launcher.devices",
            devices,
            "null or a list of distinct ids >= 0, e.g. [0,1,2,3]",
        )
    kind = accelerator_of(launcher.accelerator, configs[0].trainer.device_target)
    if kind == "CPU" and devices is not None:
        allowed = sorted(os.sched_getaffinity(0))
        require(
            set(devices) <= set(allowed),
            "hydra.launcher.devices",
            devices,
            f"CPU cores this process may run on ({', '.join(map(str, allowed))})",
        )
    try:
        units = pool_units(kind, None if devices is None else list(devices))
    except NoDevices as error:
        raise InvalidConfig(f"hydra/launcher=pool: {error}") from None
    for number, cfg in enumerate(configs):
        need = units_per_job(kind, cfg.parallel.device_num, launcher.cores_per_job)
        if need > len(units):
            what = "cores" if kind == "CPU" else f"{kind} devices"
            raise ConfigError(
                "parallel.device_num",
                cfg.parallel.device_num,
                f"at most the pool's {len(units)} {what} ({', '.join(map(str, units))})",
                f"job #{number} needs {need} {what}",
            )
