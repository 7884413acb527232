"""``ms_exp.autolog()``: MLflow runs for plain MindSpore scripts, as ``mlflow.<flavor>.autolog()``
gives other frameworks (MLflow has no MindSpore flavor).

``Model.train`` and ``Model.fit`` are patched with MLflow's ``safe_patch`` (integration
``mindspore``), so ``autolog(disable=True)`` undoes it and a logging error is only a warning.
Each call records one run (or into the user's active run): params, ms_exp's metrics, the
user's ``ModelCheckpoint`` files, system metrics, and how it ended, as ms_exp runs end.
"""

import inspect
import logging
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Type

import mlflow
from mlflow.utils.autologging_utils import (
    ExceptionSafeClass,
    autologging_integration,
    get_autologging_config,
    safe_patch,
)

from ms_exp.tracking.callback import MlflowMetrics
from ms_exp.tracking.lifecycle import Terminated, ending_tags, signal_words
from ms_exp.tracking.tracker import Tracker

FLAVOR = "mindspore"
# Overrides ``system_metrics_interval`` (seconds, or "off") without editing the script.
INTERVAL_ENV = "MS_EXP_AUTOLOG_SYSTEM_METRICS_INTERVAL"
CHECKPOINT_SUFFIXES = (".ckpt", ".safetensors", ".meta")
_logger = logging.getLogger(__name__)
# A train call made from inside another (a callback that trains) is part of the outer run.
_active = threading.local()


@autologging_integration(FLAVOR)
def autolog(
    tracking_uri: Optional[str] = None,
    experiment_name: Optional[str] = None,
    log_every_n_steps: int = 1,
    log_checkpoints: bool = True,
    system_metrics_interval: Optional[float] = 10.0,
    disable: bool = False,
    silent: bool = False,
) -> None:
    """Record every ``Model.train`` / ``Model.fit`` call of this process as an MLflow run.

    Args:
        tracking_uri: the MLflow store; None: MLflow's own (``MLFLOW_TRACKING_URI``, else
            ``sqlite:///mlflow.db`` in the working directory).
        experiment_name: the experiment, created if new; None: MLflow's current one
            (``mlflow.set_experiment``, ``MLFLOW_EXPERIMENT_NAME``, else ``Default``).
        log_every_n_steps: log ``train/loss`` (with step time and throughput) every n steps.
        log_checkpoints: upload the files the script's ``ModelCheckpoint`` callbacks wrote
            under the run's ``checkpoints/`` artifacts when training ends.
        system_metrics_interval: seconds between samples of ``system/*`` metrics (CPU,
            memory, GPU/NPU); None: none. ``MS_EXP_AUTOLOG_SYSTEM_METRICS_INTERVAL``
            (seconds, or ``off``) overrides it.
        disable: take the patches off; later train/fit calls record nothing.
        silent: hide MLflow's event logs and warnings about autologging itself.
    """
    from mindspore.train import Model

    for method in ("train", "fit"):
        safe_patch(FLAVOR, Model, method, _patched(method), manage_run=False)


def _config(key: str) -> Any:
    return get_autologging_config(FLAVOR, key, None)


def _patched(method: str) -> Callable[..., Any]:
    def patch(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_active, "depth", 0):
            return original(self, *args, **kwargs)
        _active.depth = 1
        try:
            return _record(original, method, self, args, kwargs)
        finally:
            _active.depth = 0

    return patch


def _record(
    original: Callable[..., Any],
    method: str,
    model: Any,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
) -> Any:
    bound = inspect.signature(original).bind(model, *args, **kwargs)
    bound.apply_defaults()
    arguments = bound.arguments
    started = time.time()
    session = _Session.open(model, method, arguments)
    given = arguments.get("callbacks")
    user_callbacks = (
        list(given) if isinstance(given, (list, tuple)) else [given] if given is not None else []
    )
    arguments["callbacks"] = user_callbacks + [session.callback]
    status = "FAILED"
    error: Optional[BaseException] = None
    try:
        with _signals_as_interrupt():
            result = original(*bound.args, **bound.kwargs)
        status = "FINISHED"
        return result
    except KeyboardInterrupt as interrupt:
        status, error = "KILLED", interrupt
        raise
    except BaseException as failure:
        error = failure
        raise
    finally:
        session.close(status, error, user_callbacks, started)


class _Session:
    """One train/fit call's run: its tracker, callback, system-metrics monitor."""

    def __init__(
        self, tracker: Tracker, owned: bool, callback: "_AutologMetrics", monitor: Optional[Any]
    ) -> None:
        self.tracker, self.owned, self.callback, self.monitor = tracker, owned, callback, monitor

    @classmethod
    def open(cls, model: Any, method: str, arguments: Dict[str, Any]) -> "_Session":
        active = mlflow.active_run()
        if active is not None:
            client = mlflow.MlflowClient(mlflow.get_tracking_uri())
            tracker = Tracker(client, active.info.run_id, active.info.experiment_id)
        else:
            tracker = _new_run(method)
        try:
            size = _safe(arguments["train_dataset"].get_batch_size)
            batch_size = int(size) if size is not None else None
            tracker.log_params(_params(model, method, arguments, batch_size))
            every = max(1, int(_config("log_every_n_steps") or 1))
            callback = _AutologMetrics(
                tracker, samples_per_step=batch_size or 1, log_every_n_steps=every
            )
        except Exception:
            # Training goes on without a run (safe_patch warns): none is left RUNNING.
            if active is None:
                tracker.finish("FAILED")
            raise
        monitor = _start_monitor(tracker, resume=active is not None)
        return cls(tracker, active is None, callback, monitor)

    def close(
        self, status: str, error: Optional[BaseException], callbacks: List[Any], started: float
    ) -> None:
        """Everything here is best effort: the training's own exception must come out
        unchanged, and a logging failure must not replace a training that succeeded."""
        steps = [
            lambda: (
                _log_checkpoints(self.tracker, callbacks, started)
                if _config("log_checkpoints")
                else None
            ),
            lambda: self.tracker.set_tags(ending_tags(status, error)),
            lambda: self.monitor.finish() if self.monitor is not None else None,
            lambda: self.tracker.finish(status) if self.owned else self.tracker.flush(),
        ]
        for step in steps:
            try:
                step()
            except Exception as failure:  # noqa: BLE001 - logged, training's outcome stands
                _logger.warning("ms_exp.autolog: could not complete the MLflow run: %s", failure)
        if self.owned:  # where the run went (MLflow's autolog says so only for a server)
            from ms_exp.tracking.ui_links import ui_lines

            tracker, uri = self.tracker, self.tracker.client.tracking_uri
            print(
                f"ms_exp.autolog: MLflow run {tracker.run_id} (experiment "
                f"{tracker.experiment_id}, {status}) in {uri}",
                *ui_lines(uri, tracker.experiment_id, tracker.run_id),
                sep="\n",
                flush=True,
            )


def _new_run(method: str) -> Tracker:
    from mlflow.tracking.fluent import _get_experiment_id

    from ms_exp.tracking.store import ensure_experiment

    uri = _config("tracking_uri")
    client = mlflow.MlflowClient(uri or mlflow.get_tracking_uri())
    name = _config("experiment_name")
    if name:
        experiment_id = ensure_experiment(client, name)
    elif uri:
        experiment_id = ensure_experiment(client, "Default")
    else:
        experiment_id = _get_experiment_id()
    tags = {"mlflow.autologging": FLAVOR, "ms_exp.autolog.method": method}
    try:  # the source script, user and git commit, as mlflow.start_run records them
        from mlflow.tracking.context.registry import resolve_tags

        tags = resolve_tags(tags)
    except Exception:  # noqa: BLE001 - context tags are a nicety
        pass
    run = client.create_run(experiment_id, tags=tags)
    return Tracker(client, run.info.run_id, experiment_id)


class _AutologMetrics(MlflowMetrics, metaclass=ExceptionSafeClass):
    """ms_exp's metrics callback, each hook a warning rather than an error when logging
    fails (ExceptionSafeClass wraps the methods defined here), and quiet: a user's script
    prints what it prints, not ms_exp's per-epoch throughput line."""

    def on_train_begin(self, run_context: Any) -> None:
        super().on_train_begin(run_context)
        optimizer = run_context.original_args().optimizer
        if self._learning_rates is None and optimizer is not None:
            # train/lr as ms_exp runs have it: any MindSpore optimizer's rate per step.
            from ms_exp.tracking.learning_rate import LearningRates

            self._learning_rates = LearningRates(optimizer)

    def on_train_epoch_begin(self, run_context: Any) -> None:
        super().on_train_epoch_begin(run_context)

    def on_train_step_end(self, run_context: Any) -> None:
        super().on_train_step_end(run_context)

    def on_eval_end(self, run_context: Any) -> None:
        super().on_eval_end(run_context)

    def on_train_epoch_end(self, run_context: Any) -> None:
        epoch_time = time.perf_counter() - self._epoch_start
        self.record_epoch(run_context.original_args().cur_epoch_num, epoch_time)


def _start_monitor(tracker: Tracker, resume: bool) -> Optional[Any]:
    from ms_exp.tracking.system_metrics import start_system_metrics

    interval = _config("system_metrics_interval")
    override = os.environ.get(INTERVAL_ENV, "").strip()
    if override:
        interval = None if override.lower() in ("off", "none", "0") else float(override)
    try:
        return start_system_metrics(tracker.run_id, tracker.tracking_uri, interval, resume=resume)
    except Exception as failure:  # noqa: BLE001 - a run without system metrics still trains
        _logger.warning("ms_exp.autolog: no system metrics: %s", failure)
        return None


@contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """SIGTERM (and SIGINT, which MindSpore's runtime turns into SIGTERM) end training
    with an exception, so the run ends KILLED instead of staying RUNNING. A handler the
    script installed itself is left alone; outside the main thread nothing changes."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}
        for signum, default in defaults.items():
            if signal.getsignal(signum) is default:
                previous[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _raise_terminated(signum: int, frame: Optional[FrameType]) -> None:
    raise Terminated(f"stopped by {signal_words(signum)}")


def _params(
    model: Any, method: str, arguments: Dict[str, Any], batch_size: Optional[int]
) -> Dict[str, object]:
    dataset = arguments["train_dataset"]
    params: Dict[str, object] = {
        "trainer.method": method,
        "trainer.epochs": arguments.get("epoch"),
        "trainer.initial_epoch": arguments.get("initial_epoch"),
        "trainer.dataset_sink_mode": arguments.get("dataset_sink_mode"),
        "dataset.batch_size": batch_size,
        "dataset.steps_per_epoch": _safe(dataset.get_dataset_size),
    }
    if method == "fit" and arguments.get("valid_dataset") is not None:
        params["trainer.valid_frequency"] = arguments.get("valid_frequency")
        params["dataset.eval_steps"] = _safe(arguments["valid_dataset"].get_dataset_size)
    network: Any = getattr(model, "_network", None)  # None: its count is unknown (_safe)
    scale = getattr(model, "_loss_scale_manager", None)
    if scale is not None:
        value = _safe(scale.get_loss_scale)
        scale = type(scale).__name__ + (f"(loss_scale={value})" if value is not None else "")
    metrics = getattr(model, "_metric_fns", None) or {}
    params["model.network"] = type(network).__name__
    params["model.trainable_params"] = _safe(
        lambda: sum(int(p.size) for p in network.trainable_params())
    )
    params["model.loss_fn"] = _class_name(getattr(model, "_loss_fn", None))
    params["model.amp_level"] = getattr(model, "_amp_level", None)
    params["model.loss_scale_manager"] = scale
    params["model.metrics"] = ",".join(sorted(metrics)) or None
    params.update(optimizer_params(getattr(model, "_optimizer", None)))
    return params


def optimizer_params(optimizer: Any) -> Dict[str, object]:
    """``optimizer.class``, ``optimizer.lr`` (the value, or the schedule) and the
    hyper-parameters the optimizer was built with, as it holds them."""
    if optimizer is None:
        return {"optimizer.class": None}
    params: Dict[str, object] = {
        "optimizer.class": type(optimizer).__name__,
        "optimizer.lr": describe_lr(optimizer),
    }
    # MindSpore's optimizers keep their arguments in ``init_args``; those that do not
    # (AdamWeightDecay) hold them as attributes named as the arguments.
    held = dict(getattr(optimizer, "init_args", None) or {})
    for name in _init_argument_names(type(optimizer)):
        if name not in held and hasattr(optimizer, name):
            held[name] = getattr(optimizer, name)
    for name, value in held.items():
        if name not in ("params", "learning_rate"):
            params[f"optimizer.{name}"] = _plain(value)
    return params


def describe_lr(optimizer: Any) -> object:
    """The constant learning rate, or what the schedule is: a LearningRateSchedule as
    ``CosineDecayLR(min_lr=0.0, max_lr=0.1, decay_steps=100)``, a per-step list by its
    length and ends, per-group rates as a list."""
    lr: Any = getattr(optimizer, "learning_rate", None)
    if getattr(optimizer, "is_group_lr", False):  # a list
        return f"per group: {[describe_lr_value(v) for v in lr]}"
    return describe_lr_value(lr, getattr(optimizer, "init_learning_rate", None))


def describe_lr_value(lr: Any, initial: Any = None) -> object:
    from mindspore import Tensor
    from mindspore.nn.learning_rate_schedule import LearningRateSchedule

    if isinstance(initial, (int, float)) and not isinstance(initial, bool):
        return initial
    if isinstance(initial, (list, tuple)) and initial:
        return f"per step: {len(initial)} values, {initial[0]} to {initial[-1]}"
    if isinstance(lr, LearningRateSchedule):
        names = [n for n in _init_argument_names(type(lr)) if hasattr(lr, n)]
        return f"{type(lr).__name__}({', '.join(f'{n}={getattr(lr, n)}' for n in names)})"
    if isinstance(lr, Tensor):
        values = lr.asnumpy().reshape(-1)
        if values.size == 1:
            return _float32(values[0])
        return f"per step: {values.size} values, {values[0]:g} to {values[-1]:g}"
    return _class_name(lr)


def _init_argument_names(cls: Type[Any]) -> List[str]:
    """The names ``cls.__init__`` takes, through MindSpore's argument-recording decorator."""
    init = cls.__init__
    for cell in init.__closure__ or ():
        if inspect.isfunction(cell.cell_contents) and cell.cell_contents.__name__ == "__init__":
            init = cell.cell_contents
    try:
        parameters = inspect.signature(init).parameters
    except (TypeError, ValueError):
        return []
    return [
        name
        for name, p in parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _plain(value: Any) -> object:
    """A number for a one-value tensor, a class name for an object."""
    from mindspore import Tensor

    if isinstance(value, Tensor):
        array = value.asnumpy().reshape(-1)
        if array.size != 1:
            return f"{array.size} values"
        return _float32(array[0]) if array.dtype.kind == "f" else array[0].item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return str(value)
    return _class_name(value)


def _float32(value: Any) -> float:
    """A float32 hyper-parameter as it was written: 0.9, not 0.8999999761581421."""
    return float(f"{float(value):.7g}")


def _class_name(value: object) -> Optional[str]:
    return None if value is None else type(value).__name__


def _safe(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:  # noqa: BLE001 - a param unknown, not a training stopped
        return None


def _log_checkpoints(tracker: Tracker, callbacks: List[Any], since: float) -> None:
    """Log the files the ``ModelCheckpoint`` callbacks among ``callbacks`` wrote since
    ``since`` (a timestamp): their directory's files named by their prefix."""
    from mindspore.train import ModelCheckpoint

    found = []
    for callback in callbacks:
        if not isinstance(callback, ModelCheckpoint):
            continue
        directory, prefix = getattr(callback, "_directory", None), getattr(callback, "_prefix", "")
        if not directory or not Path(directory).is_dir():
            continue
        for path in sorted(Path(directory).iterdir()):
            name = path.name
            if (
                path.is_file()
                and name.endswith(CHECKPOINT_SUFFIXES)
                and (name.startswith(prefix + "-") or name.startswith(prefix + "."))
                and path.stat().st_mtime >= since - 1.0
                and path not in found
            ):
                found.append(path)
    for path in found:
        tracker.log_artifact(path, "checkpoints")
