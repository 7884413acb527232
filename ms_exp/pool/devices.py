"""What a device pool holds, and how a job is told which of it is its own.

On Ascend and GPU the pool is device ids (``hydra.launcher.devices``, else the visible
ones), and a job sees only its own through the runtime's visibility variable, numbered
from 0 inside it. On the CPU the pool is this process's cores, in sets of
``hydra.launcher.cores_per_job`` a job is pinned to. The job's share, as the machine names
it, is in ``MS_EXP_DEVICES`` and its run's tag ``ms_exp.devices``.
"""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

# The sweep's report reads the tag: it is declared beside the other tags of a sweep's runs.
from ms_exp.tracking.sweep_runs import DEVICES_TAG as DEVICES_TAG

DEVICES_ENV = "MS_EXP_DEVICES"  # the job's share: device ids, or CPU cores, comma-separated
ACCELERATORS = ("auto", "Ascend", "GPU", "CPU")
# The runtime's variable that hides every device but the job's own.
VISIBLE_ENV = {"Ascend": "ASCEND_RT_VISIBLE_DEVICES", "GPU": "CUDA_VISIBLE_DEVICES"}
# The command that lists the devices, and how each line names one.
_LISTING = {
    "Ascend": (["npu-smi", "info", "-l"], r"NPU ID\s*:\s*(\d+)"),
    "GPU": (["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], r"^\s*(\d+)\s*$"),
}


class NoDevices(RuntimeError):
    """The pool would be empty; the message says what was looked for."""


@dataclass(frozen=True)
class Share:
    """What one job holds: device ids (Ascend, GPU) or CPU cores."""

    accelerator: str
    units: Tuple[int, ...]

    @property
    def env(self) -> Dict[str, str]:
        """The variables its job's process starts with (share_environment)."""
        return share_environment(self.accelerator, self.units)

    @property
    def label(self) -> str:
        return ",".join(map(str, self.units))


def accelerator_of(launcher_accelerator: str, device_target: Optional[str]) -> str:
    """The kind of devices the pool holds: the launcher's, else the jobs', else what the vendor
    tools on the PATH say (MindSpore's one package holds every backend, so its files do not)."""
    if launcher_accelerator != "auto":
        return launcher_accelerator
    if device_target and device_target != "None":
        return device_target
    for accelerator, (command, _) in _LISTING.items():
        if shutil.which(command[0]):
            return accelerator
    return "CPU"


def listed_devices(accelerator: str) -> List[int]:
    """The device ids the vendor's tool lists; refused when it is missing or lists none."""
    command, pattern = _LISTING[accelerator]
    if shutil.which(command[0]) is None:
        raise NoDevices(
            f"{command[0]} is not on the PATH to list the {accelerator} devices; "
            f"expected hydra.launcher.devices=[0,1,...]"
        )
    listing = subprocess.run(command, capture_output=True, text=True, timeout=60)
    found = sorted({int(m) for m in re.findall(pattern, listing.stdout, re.MULTILINE)})
    if listing.returncode != 0 or not found:
        raise NoDevices(
            f"{' '.join(command)} listed no {accelerator} device "
            f"(exit {listing.returncode}); expected hydra.launcher.devices=[0,1,...]"
        )
    return found


def pool_units(
    accelerator: str, devices: Optional[Sequence[int]], environ: Mapping[str, str] = os.environ
) -> List[int]:
    """Everything the pool shares out: ``devices``, else what this process may use: on the
    CPU the cores it may run on; on Ascend and GPU the devices its visibility variable
    already names (SLURM sets ``CUDA_VISIBLE_DEVICES`` to an allocation's GPUs), else all
    that the vendor's tool lists."""
    if devices is not None:
        return [int(unit) for unit in devices]
    if accelerator == "CPU":
        return sorted(os.sched_getaffinity(0))
    visible = environ.get(VISIBLE_ENV[accelerator], "").strip()
    if visible:
        ids = [part.strip() for part in visible.split(",")]
        if not all(part.isdigit() for part in ids):
            raise NoDevices(
                f"{VISIBLE_ENV[accelerator]}={visible} names devices by something other than "
                "their ids; expected hydra.launcher.devices=[0,1,...]"
            )
        return [int(part) for part in ids]
    return listed_devices(accelerator)


def units_per_job(accelerator: str, device_num: int, cores_per_job: int) -> int:
    """A job of ``device_num`` ranks holds that many devices; on the CPU each rank holds
    ``cores_per_job`` cores."""
    return device_num * (cores_per_job if accelerator == "CPU" else 1)


def share_environment(accelerator: str, units: Sequence[int]) -> Dict[str, str]:
    """The variables a job's process starts with, so that it sees only its share."""
    label = ",".join(map(str, units))
    env = {DEVICES_ENV: label}
    if accelerator in VISIBLE_ENV:
        env[VISIBLE_ENV[accelerator]] = label
    else:
        # OpenMP and MKL size their thread pools by this; MindSpore's own is set in the
        # worker (ms_exp/pool/worker.py).
        env["OMP_NUM_THREADS"] = str(len(units))
    return env


def job_devices(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The share a pool gave this job (None outside a pool): recorded as ``ms_exp.devices``."""
    return environ.get(DEVICES_ENV) or None
