"""Device memory as MindSpore's own allocator counts it, logged once per epoch.

``system/device_memory_allocated_mb`` (``mindspore.runtime.memory_allocated``: what the
training holds at the epoch's end), ``system/device_memory_peak_mb``
(``max_memory_allocated``: the most it held so far) and ``system/device_memory_reserved_mb``
(``memory_reserved``: what the memory pool took from the device), in MiB like
``system/peak_host_memory_mb``, stepped by the global step. They count this process's
tensors only; ``system/gpu_*``/``system/npu_*`` from the sidecar's monitor count the whole
device. On CPU MindSpore 2.10 always answers 0 (docs/design.md#device-memory-on-cpu): nothing
is logged there.
"""

from typing import Any, Dict

from mindspore.train import Callback

from ms_exp.tracking.interface import RunTracker

MIB = 2**20


def device_memory_mb() -> Dict[str, float]:
    """MindSpore's figures for the current device, in MiB."""
    from mindspore import runtime

    return {
        "system/device_memory_allocated_mb": runtime.memory_allocated() / MIB,
        "system/device_memory_peak_mb": runtime.max_memory_allocated() / MIB,
        "system/device_memory_reserved_mb": runtime.memory_reserved() / MIB,
    }


class DeviceMemory(Callback):
    """Logs :func:`device_memory_mb` at the end of every epoch, except on CPU."""

    def __init__(self, tracker: RunTracker, device_target: str) -> None:
        super().__init__()
        self.tracker = tracker
        self.enabled = device_target != "CPU"

    def on_train_epoch_end(self, run_context: Any) -> None:
        if not self.enabled:
            return
        try:
            metrics = device_memory_mb()
        except Exception as error:  # noqa: BLE001 - a figure is not worth a failed run
            self.enabled = False
            print(
                f"ms_exp: warning: no device memory metrics ({type(error).__name__}: {error})",
                flush=True,
            )
            return
        self.tracker.log_metrics(metrics, step=run_context.original_args().cur_step_num)
