"""Device memory as MindSpore's own allocator counts it, logged once per epoch.

``system/device_memory_{allocated,peak,reserved}_mb`` in MiB, stepped by the global step:
this process's tensors only (the sidecar's ``system/gpu_*``/``npu_*`` count the whole
device). On CPU MindSpore 2.10 always answers 0 (docs/design.md#device-memory-on-cpu):
nothing is logged there.
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
