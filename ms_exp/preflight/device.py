"""Is the device the config names on this machine? Asked of MindSpore
(``mindspore.device_context.<target>.is_available()``, the answer it stored when it loaded
its plugins: no backend starts) before anything is created, so a GPU job on a CPU-only
laptop is one line, not a failed run."""

import os
from typing import Tuple

from omegaconf import DictConfig

from ms_exp.config.errors import require

TARGETS = ("CPU", "GPU", "Ascend")


def available_targets() -> Tuple[str, ...]:
    """The device targets MindSpore loaded a backend for here."""
    import mindspore.device_context as devices

    # An absent backend is reported as MindSpore warnings with its plugin loader's errors,
    # written to the process's own file descriptors; the refusal says it in one line instead.
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(os.devnull, "w") as null:
        for fd in saved:
            os.dup2(null.fileno(), fd)
        try:
            return tuple(t for t in TARGETS if getattr(devices, t.lower()).is_available())
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def validate_device_present(trainer_cfg: DictConfig) -> None:
    """An explicit GPU or Ascend must be here; None and CPU always are (checked last among
    the trainer's checks: what the machine has must not hide a mistake in the config)."""
    target = trainer_cfg.device_target or "None"
    if target in ("None", "CPU"):
        return
    available = available_targets()
    require(
        target in available,
        "trainer.device_target",
        target,
        f"a device MindSpore finds on this machine: {', '.join(available)} "
        f"(mindspore.device_context.{target.lower()}.is_available() is False), "
        f"or None to let it pick",
    )
