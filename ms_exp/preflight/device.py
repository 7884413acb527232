"""Is the device the config names on this machine? Asked of MindSpore (``mindspore.hal``)
before anything is created, so a GPU job on a CPU-only laptop is one line, not a failed run
and MindSpore's plugin-loading errors."""
import os
from contextlib import contextmanager
from typing import Iterator, Tuple

from ms_exp.config.errors import require

TARGETS = ("CPU", "GPU", "Ascend")


@contextmanager
def _quiet() -> Iterator[None]:
    """MindSpore's plugin loader reports a missing backend on the process's own file
    descriptors (C++ and Python alike); the refusal says it in one line instead."""
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def available_targets() -> Tuple[str, ...]:
    """The device targets MindSpore can load a backend for here."""
    from mindspore import hal

    with _quiet():
        return tuple(target for target in TARGETS if hal.is_available(target))


def validate_device_present(trainer_cfg) -> None:
    """An explicit GPU or Ascend must be here; None and CPU always are (checked last among
    the trainer's checks: what the machine has must not hide a mistake in the config)."""
    target = trainer_cfg.device_target or "None"
    if target in ("None", "CPU"):
        return
    available = available_targets()
    require(target in available, "trainer.device_target", target,
            f"a device MindSpore finds on this machine: {', '.join(available)} "
            f"(mindspore.hal.is_available('{target}') is False), or None to let it pick")
