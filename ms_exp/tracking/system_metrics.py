"""Host and accelerator metrics of a run, sampled by MLflow's own system-metrics monitor.

A job runs the monitor in its MLflow sidecar, away from the training step. Ascend NPUs have
no monitor in MLflow: where ``npu-smi`` is on PATH, :class:`NPUMonitor` adds
``system/npu_<id>_*`` from ``npu-smi info``, warning once of output it cannot parse.
"""

import functools
import logging
import re
import shutil
import subprocess
import sys
import threading
import weakref
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple, Type

NPU_SMI = "npu-smi"
# npu-smi asks the driver of every chip; a hung driver must not hold the monitor's thread.
NPU_SMI_TIMEOUT_S = 10.0
MONITOR_LOGGER = "mlflow.system_metrics.system_metrics_monitor"
# The threads of monitors stopped by stop_without_logging: their last try at the store
# fails, and the warning MLflow logs for it says nothing the outage's own warning did not.
_abandoned: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()

try:  # MLflow is a dependency of the package, but only the processes that record import it
    from mlflow.system_metrics.metrics.base_metrics_monitor import BaseMetricsMonitor
except ImportError:  # pragma: no cover - an install without MLflow records nothing
    BaseMetricsMonitor = object


def start_system_metrics(
    run_id: str, tracking_uri: str, interval: Optional[float], resume: bool = False
) -> Optional[Any]:
    """Start sampling system metrics into run ``run_id`` every ``interval`` seconds (None:
    nothing started); ``resume``: continue after the steps the run has. Call the monitor's
    ``finish()`` before the run ends: it logs what is still pending."""
    if interval is None:
        return None
    import psutil

    # MLflow logs "Started monitoring..."/"Skip logging GPU metrics" at INFO on every run;
    # its warnings (a sample it could not log) still show.
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    monitor_logger = logging.getLogger(MONITOR_LOGGER)
    if _quiet_when_abandoned not in monitor_logger.filters:
        monitor_logger.addFilter(_quiet_when_abandoned)
    monitor = _monitor_class()(
        run_id,
        sampling_interval=interval,
        samples_before_logging=1,
        resume_logging=resume,
        tracking_uri=tracking_uri,
    )
    # The job's setting wins over MLflow's MLFLOW_SYSTEM_METRICS_* variables: it is the one
    # recorded with the run.
    monitor.sampling_interval = float(interval)
    monitor.samples_before_logging = 1
    npu = NPUMonitor.if_available()
    if npu is not None:
        monitor.monitors.append(npu)
    # psutil's CPU percentage is measured since its previous call: without this one the
    # first sample would read 0.0.
    psutil.cpu_percent()
    monitor.start()
    return monitor


@functools.lru_cache(maxsize=None)
def _monitor_class() -> Type[Any]:
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    class SampledToTheEnd(SystemMetricsMonitor):
        """MLflow's monitor, which on ``finish()`` drops the sample of the interval under
        way (docs/design.md#mlflow-system-metrics): here it takes one more, covering the
        time since the last, so a run shorter than the interval has one too."""

        def finish(self) -> None:
            if self._process is None:
                return
            self._shutdown_event.set()
            self._process.join()
            try:
                for each in self.monitors:
                    each.clear_metrics()
                self.collect_metrics()
                self.publish_metrics(self.aggregate_metrics())
            except Exception as error:  # noqa: BLE001 - as MLflow's loop treats a failed sample
                logging.getLogger(MONITOR_LOGGER).warning(
                    f"Failed to log the last system metrics: {error}"
                )
            super().finish()

    return SampledToTheEnd


def stop_without_logging(monitor: Optional[Any]) -> None:
    """Stop ``monitor`` without logging its pending samples: its run's store stopped
    answering, and neither another warning per sample nor a wait on a dead server helps."""
    if monitor is None:
        return
    if monitor._process is not None:
        _abandoned.add(monitor._process)
    monitor._shutdown_event.set()
    monitor.mlflow_logger.data = []


def _quiet_when_abandoned(record: logging.LogRecord) -> bool:
    return threading.current_thread() not in _abandoned


_NUMBER = r"\d+(?:\.\d+)?"
# One value of a row cell: "used / total", a number, or what npu-smi prints for none.
_VALUE = re.compile(rf"({_NUMBER})\s*/\s*({_NUMBER})|({_NUMBER})|(NA|N/A|-)\b")


# A chip's utilisation %, used MB and total MB (None: not read).
Reading = Tuple[Optional[float], Optional[float], Optional[float]]


class NpuSmiError(RuntimeError):
    """``npu-smi info`` failed, or printed no table of chips this parser knows."""


def _values(cell: str) -> List[object]:
    """The values of a cell in order: a float, a (used, total) pair, or None for NA."""
    values: List[object] = []
    for pair_used, pair_total, number, _missing in _VALUE.findall(cell):
        if pair_used:
            values.append((float(pair_used), float(pair_total)))
        elif number:
            values.append(float(number))
        else:
            values.append(None)
    return values


def parse_npu_smi_info(text: str) -> Dict[str, Reading]:
    """``npu-smi info``'s table as ``{name: (utilisation %, used MB, total MB)}`` per chip.

    The table has two lines per chip: ``| NPU Name | Health | Power(W) Temp(C) ... |`` and
    ``| Chip | Bus-Id | AICore(%) Memory-Usage(MB) [HBM-Usage(MB)] |``, the second header
    line saying which values the chip line holds. ``name`` is ``npu_<NPU id>``, or
    ``npu_<NPU id>_chip_<chip id>`` on cards with more than one chip."""
    columns: Optional[List[str]] = None
    chips: List[Tuple[str, str, List[object]]] = []
    npu: Optional[str] = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        if "AICore(%)" in cells[2]:
            columns = re.findall(r"[A-Za-z][\w-]*\([^)]*\)", cells[2])
            continue
        if columns is None:
            continue
        if "Process" in line or "No running processes" in line:
            break  # the table of processes below the chips
        first = cells[0].split()
        if not first or not first[0].isdigit():
            continue
        if re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]", cells[1]):
            if npu is not None:
                chips.append((npu, first[0], _values(cells[2])))
        elif len(first) >= 2:
            npu = first[0]  # "| 0     910B1 | OK | ..." opens an NPU
    if columns is None or not chips:
        raise NpuSmiError("no table of NPU chips in its output")
    per_npu = Counter(npu_id for npu_id, _, _ in chips)
    readings = {}
    for npu_id, chip, values in chips:
        named = dict(zip(columns, values))
        utilisation = named.get("AICore(%)")
        memory = named.get("HBM-Usage(MB)")
        if not isinstance(memory, tuple) or memory[1] <= 0:
            memory = named.get("Memory-Usage(MB)")
        used, total = memory if isinstance(memory, tuple) else (None, None)
        name = f"npu_{npu_id}" if per_npu[npu_id] == 1 else f"npu_{npu_id}_chip_{chip}"
        readings[name] = (utilisation if isinstance(utilisation, float) else None, used, total)
    return readings


def read_npu_smi() -> Dict[str, Reading]:
    try:
        command = [NPU_SMI, "info"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=NPU_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        raise NpuSmiError(f"{type(error).__name__}: {error}") from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise NpuSmiError(f"exit status {done.returncode}" + (f": {said[-1]}" if said else ""))
    return parse_npu_smi_info(done.stdout)


class NPUMonitor(BaseMetricsMonitor):
    """Ascend NPU utilisation and memory per chip, from ``npu-smi info``."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    @classmethod
    def if_available(cls) -> Optional["NPUMonitor"]:
        """A monitor when ``npu-smi`` is on PATH and its table can be read, else None (with
        one warning if it is there but does not work)."""
        if shutil.which(NPU_SMI) is None:
            return None
        try:
            read_npu_smi()
        except NpuSmiError as error:
            _warn_broken(error)
            return None
        return cls()

    def collect_metrics(self) -> None:
        if self.broken:
            return
        try:
            readings = read_npu_smi()
        except NpuSmiError as error:
            self.broken = True
            _warn_broken(error)
            return
        for name, (utilisation, used, total) in readings.items():
            if utilisation is not None:
                self._metrics[f"{name}_utilization_percentage"].append(utilisation)
            if used is not None:
                self._metrics[f"{name}_memory_usage_megabytes"].append(used)
                if total:
                    self._metrics[f"{name}_memory_usage_percentage"].append(used / total * 100)

    def aggregate_metrics(self) -> Dict[str, float]:
        return {k: round(sum(v) / len(v), 1) for k, v in self._metrics.items() if v}


def _warn_broken(error: Exception) -> None:
    message = f"`{NPU_SMI} info` cannot be read ({error}); no NPU metrics are recorded"
    print(f"ms_exp: warning: {message}", file=sys.stderr, flush=True)
