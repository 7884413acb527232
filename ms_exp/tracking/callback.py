"""A MindSpore callback that feeds a run's step and epoch metrics into MLflow.

Metric names are stable and always stepped by the global training step, so the MLflow UI
can overlay runs. A resumed job leaves out the steps its run has already
(``already_logged``, ms_exp/tracking/logged_steps.py).
"""

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from mindspore.train import Callback

from ms_exp.tracking.interface import RunTracker


def loss_parts(net_outputs: Sequence[Any], names: Sequence[str]) -> Dict[str, float]:
    """``{name: value}`` for the train step's outputs, one per name."""
    return {name: _scalar(out) for name, out in zip(names, net_outputs)}


def loss_scale_state(params: Any) -> Optional[Tuple[Any, Any]]:
    """``(overflowed, scale)`` of the step just ended where it checked its gradients for
    overflow, else None: the functional loop's ``loss_scale_state``, or the outputs
    ``(loss, overflow, scale)`` of Model's loss-scale cell (which has ``scale_sense``)."""
    state = params.get("loss_scale_state")
    if state is not None:
        return state
    outputs = params.net_outputs
    if (
        getattr(params.get("train_network"), "scale_sense", None) is not None
        and isinstance(outputs, (tuple, list))
        and len(outputs) == 3
    ):
        return outputs[1], outputs[2]
    return None


def _scalar(value: Any) -> float:
    """A Python number, or a one-element Tensor, as a float."""
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    return float(np.asarray(value).reshape(-1)[0])


class MlflowMetrics(Callback):
    def __init__(
        self,
        tracker: RunTracker,
        samples_per_step: int,
        log_every_n_steps: int,
        loss_names: Sequence[str] = (),
        already_logged: Optional[Mapping[str, int]] = None,
    ) -> None:
        super().__init__()
        self.already_logged = dict(already_logged or {})
        self.loss_names = tuple(loss_names)
        self.tracker = tracker
        self.samples_per_step = samples_per_step
        self.every = log_every_n_steps
        self.global_step = 0
        self.eval_history: List[Dict[str, float]] = []
        self._epoch_start = self._step_start = time.perf_counter()
        self._epoch_step_times: List[float] = []
        # What ms_exp's optimizer carries (on_train_begin), None for another's.
        self._learning_rates: Any = None
        self._grad_norm: Any = None
        # Each step's overflow flag, kept as it came until the next logged step, so that
        # counting them costs no device sync per step.
        self._overflows: List[Any] = []
        self.overflow_steps = 0

    def on_train_begin(self, run_context: Any) -> None:
        params = run_context.original_args()
        self.global_step = params.cur_step_num  # a resumed run's
        # Set on ms_exp's optimizer by ms_exp/train/model_build.py.
        self._learning_rates = getattr(params.optimizer, "ms_exp_learning_rates", None)
        self._grad_norm = getattr(params.optimizer, "ms_exp_grad_norm", None)

    def on_train_epoch_begin(self, run_context: Any) -> None:
        self._epoch_start = self._step_start = time.perf_counter()
        self._epoch_step_times = []

    def on_train_step_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        now = time.perf_counter()
        # In sink mode one call here ends sink_size steps: the time is shared among them.
        steps = max(1, params.cur_step_num - self.global_step)
        # Measured end to end, so the data pipeline's share of a step is included.
        step_time = (now - self._step_start) / steps
        self._step_start = now
        self._epoch_step_times.append(step_time)
        self.global_step = params.cur_step_num
        state = loss_scale_state(params)
        if state is not None:
            self._overflows.append(state[0])
        if self.global_step % self.every == 0 and self._new("step"):
            metrics = {
                f"train/{name}": value
                for name, value in loss_parts(params.net_outputs, self.loss_names).items()
            }
            # The first of several losses is the loss (converted once, above); a loss-scaled
            # cell's outputs are (loss, overflow, scale).
            if self.loss_names:
                metrics["train/loss"] = metrics[f"train/{self.loss_names[0]}"]
            else:
                outputs = params.net_outputs
                loss = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
                metrics["train/loss"] = _scalar(loss)
            metrics["train/step_time_ms"] = step_time * 1000.0
            metrics["train/samples_per_s"] = self.samples_per_step / step_time
            metrics.update(self._step_curves(state))
            self.tracker.log_metrics(metrics, step=self.global_step)

    def _step_curves(self, state: Optional[Tuple[Any, Any]]) -> Dict[str, float]:
        """train/lr, train/grad_norm and the loss-scale curves of the step just ended."""
        metrics: Dict[str, float] = {}
        overflowed = False
        if state is not None:
            flags = [_scalar(flag) for flag in self._overflows]
            self._overflows = []
            self.overflow_steps += int(sum(flag != 0 for flag in flags))
            overflowed = bool(flags[-1])
            metrics["train/loss_scale"] = _scalar(state[1])
            metrics["train/overflow"] = int(overflowed)
            metrics["train/overflow_steps"] = self.overflow_steps
        if self._learning_rates is not None:
            metrics["train/lr"] = self._learning_rates.at(self.global_step)
        if self._grad_norm is not None and not overflowed:
            metrics["train/grad_norm"] = self._grad_norm.read()
        return metrics

    def on_eval_end(self, run_context: Any) -> None:
        self.record_eval(run_context.original_args().eval_results)

    def record_eval(self, results: Mapping[str, float]) -> None:
        """One evaluation's results, at the current step."""
        # Model.fit adds the eval network's last output as "eval_loss"; the averaged
        # "loss" metric is the one worth plotting.
        metrics = {
            f"eval/{name}": float(value)
            for name, value in results.items()
            if not name.startswith("eval_")
        }
        self.eval_history.append(metrics)
        if self._new("eval"):
            self.tracker.log_metrics(metrics, step=self.global_step)

    def record_epoch(self, epoch: int, epoch_time: Optional[float] = None) -> None:
        """The end of ``epoch``, at the current step (its time, when it was measured)."""
        if self._new("epoch"):
            metrics: Dict[str, float] = {"train/epoch": epoch}
            if epoch_time is not None:
                metrics["train/epoch_time_s"] = epoch_time
            self.tracker.log_metrics(metrics, step=self.global_step)

    def _new(self, group: str) -> bool:
        """Whether the run lacks this step's metrics of ``group`` (a resumed run's own)."""
        return self.global_step > self.already_logged.get(group, -1)

    def on_train_epoch_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        epoch_time = time.perf_counter() - self._epoch_start
        times = sorted(self._epoch_step_times) or [float("nan")]
        median = times[len(times) // 2]
        throughput = self.samples_per_step / median
        self.record_epoch(params.cur_epoch_num, epoch_time)
        print(
            f"epoch: {params.cur_epoch_num} throughput: {throughput:.1f} samples/s, "
            f"median step time: {median * 1000:.3f} ms",
            flush=True,
        )
