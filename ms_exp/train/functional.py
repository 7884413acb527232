"""``trainer.loop=functional``: the training-flow tutorial's Trainer.

``ms.value_and_grad(has_aux=True)`` differentiates the (scaled) total loss; one jit step
unscales, reduces across ranks and skips the update of a step that overflowed. It drives the
callbacks ``Model.fit`` drives, same hooks in the same order (``_train_process``,
``_eval_in_fit``), so checkpoints, resume and logging are shared with ``trainer.loop=model``.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import mindspore as ms
from mindspore import nn, ops
from mindspore.amp import DynamicLossScaler, all_finite
from mindspore.train import Callback, Metric, RunContext, TimeMonitor
from mindspore.train.callback import __all__ as MINDSPORE_CALLBACKS

# Model's own callback parameters and dispatcher (exported, underscored, by
# mindspore.train.callback), so callbacks see exactly what Model.fit gives them.
from mindspore.train.callback import _CallbackManager, _InternalCallbackParam


class TrainState(nn.Cell):
    """What callbacks see as ``train_network``: the network and the optimizer, under the
    parameter names Model's TrainOneStepCell gives them, so checkpoints of both loops are
    alike (and a run can be resumed by either)."""

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer


class FunctionalTrainer:
    def __init__(
        self,
        network: nn.Cell,
        loss_parts: nn.Cell,
        optimizer: nn.Optimizer,
        scaler: Any,
        skip_overflow: bool,
        metrics: Dict[str, Metric],
        report_scale: bool = False,
    ):
        self.network = network
        self.loss_parts = loss_parts
        self.opt = optimizer
        self.weights = optimizer.parameters
        self.scaler = scaler
        self.skip_overflow = skip_overflow
        self.dynamic = isinstance(scaler, DynamicLossScaler)
        self.metrics = metrics
        self.value_and_grad = ms.value_and_grad(
            self.forward_fn, None, weights=self.weights, has_aux=True
        )
        # The tutorial's get_grad_reducer: all-reduce (mean) the gradients when distributed.
        alone = ms.get_auto_parallel_context("parallel_mode") == ms.ParallelMode.STAND_ALONE
        self.grad_reducer = ops.identity if alone else nn.DistributedGradReducer(self.weights)
        self.train_network = TrainState(network, optimizer)
        self.overflow_steps = 0
        # Give the callbacks each step's overflow and scale (``loss_scale_state``), as
        # Model's loss-scale cell does in its outputs.
        self.report_scale = report_scale

    def forward_fn(self, inputs: Any, labels: Any) -> Tuple[Any, ...]:
        """The first output is the one differentiated: the scaled total loss."""
        logits = self.network(inputs).astype(ms.float32)
        losses = self.loss_parts(logits, labels)
        return (self.scaler.scale(losses[0]),) + losses[1:]

    @ms.jit
    def train_single(self, inputs: Any, labels: Any) -> Tuple[Any, Any, Any]:
        # The scale this step uses, computed into a tensor of its own: the Parameter itself,
        # returned, would be read after adjust() has set the next step's.
        scale = ops.abs(self.scaler.scale_value)
        outputs, grads = self.value_and_grad(inputs, labels)
        loss = self.scaler.unscale(outputs[0])
        grads = self.scaler.unscale(grads)
        grads = self.grad_reducer(grads)
        finite = all_finite(grads)
        if self.skip_overflow:
            if finite:
                self.opt(grads)
        else:
            self.opt(grads)
        if self.dynamic:
            self.scaler.adjust(finite)
        return (loss,) + outputs[1:], finite, scale

    def fit(
        self,
        epochs: int,
        train_set: Any,
        eval_set: Optional[Any] = None,
        valid_frequency: int = 1,
        callbacks: Sequence[Callback] = (),
        dataset_sink_mode: bool = False,
        initial_epoch: int = 0,
    ) -> None:
        """``Model.fit`` for this loop: evaluates after every epoch, without sink mode
        (refused before the run starts, ms_exp/preflight/validate.py)."""
        if valid_frequency != 1 or dataset_sink_mode:
            raise ValueError("the functional loop evaluates every epoch and has no sink mode")
        params = _InternalCallbackParam(
            cur_step_num=0,
            cur_epoch_num=initial_epoch,
            epoch_num=epochs - initial_epoch,
            batch_num=train_set.get_dataset_size(),
            mode="train",
            dataset_sink_mode=False,
            train_network=self.train_network,
            network=self.network,
            optimizer=self.opt,
            loss_fn=self.loss_parts,
            train_dataset=train_set,
            net_outputs=None,
            parallel_mode=ms.get_auto_parallel_context("parallel_mode"),
            device_number=ms.get_auto_parallel_context("device_num"),
            last_save_ckpt_step=None,
            latest_ckpt_file=None,
        )
        run_context = RunContext(params)
        # Those Model.fit also calls during its evaluation: not MindSpore's own callbacks
        # (whose step_end/end would count eval steps as training), except TimeMonitor.
        eval_callbacks = [
            cb
            for cb in callbacks
            if type(cb).__name__ not in MINDSPORE_CALLBACKS or isinstance(cb, TimeMonitor)
        ]
        # All epochs, as Model's iterator: a resumed run's set_init_step counts from 0.
        batches = train_set.create_tuple_iterator(num_epochs=epochs)
        with _CallbackManager(list(callbacks)) as manager:
            manager.on_train_begin(run_context)
            for epoch in range(initial_epoch, epochs):
                params.cur_epoch_num = epoch + 1
                manager.on_train_epoch_begin(run_context)
                self.network.set_train(True)
                for inputs, labels in batches:
                    params.cur_step_num += 1
                    params.train_dataset_element = (inputs, labels)
                    manager.on_train_step_begin(run_context)
                    losses, finite, scale = self.train_single(inputs, labels)
                    overflowed = not finite
                    if overflowed:
                        self.overflow_steps += 1
                    params.net_outputs = losses
                    if self.report_scale:
                        params.loss_scale_state = (overflowed, scale)
                    manager.on_train_step_end(run_context)
                    if run_context.get_stop_requested():
                        break
                if eval_set is not None:
                    self._evaluate(eval_set, params, eval_callbacks)
                manager.on_train_epoch_end(run_context)
                params.pop("eval_results", None)
                params.pop("metrics", None)
                if run_context.get_stop_requested():
                    break
            manager.on_train_end(run_context)
        if self.overflow_steps:
            done = "skipped" if self.skip_overflow else "applied all the same"
            print(f"{self.overflow_steps} steps had gradients that overflowed: {done}", flush=True)

    def eval(self, eval_set: Any, dataset_sink_mode: bool = False) -> Dict[str, Any]:
        """``Model.eval`` for this loop: the metrics over ``eval_set``."""
        params = _InternalCallbackParam(cur_step_num=0, batch_num=0, net_outputs=None)
        self._evaluate(eval_set, params, [])
        return params.metrics

    def _evaluate(self, eval_set: Any, params: Any, callbacks: List[Callback]) -> None:
        """The tutorial's evaluation after each epoch, reported to the callbacks as
        Model.fit reports its own (``eval_results``: the metrics and ``eval_loss``)."""
        saved = {key: params[key] for key in ("cur_step_num", "batch_num", "net_outputs")}
        params.update(
            mode="eval",
            cur_step_num=0,
            batch_num=eval_set.get_dataset_size(),
            valid_dataset=eval_set,
            eval_network=self.network,
        )
        run_context = RunContext(params)
        for metric in self.metrics.values():
            metric.clear()
        eval_loss = nn.Loss()
        self.network.set_train(False)
        with _CallbackManager(callbacks) as manager:
            manager.on_eval_begin(run_context)
            manager.on_eval_epoch_begin(run_context)
            for inputs, labels in eval_set.create_tuple_iterator(num_epochs=1):
                params.cur_step_num += 1
                manager.on_eval_step_begin(run_context)
                logits = self.network(inputs).astype(ms.float32)
                loss = self.loss_parts(logits, labels)[0]
                params.net_outputs = (loss, logits, labels)
                manager.on_eval_step_end(run_context)
                for metric in self.metrics.values():
                    if isinstance(metric, nn.Loss):
                        metric.update(loss)
                    else:
                        metric.update(logits, labels)
                eval_loss.update(loss)
            manager.on_eval_epoch_end(run_context)
            results = {name: metric.eval() for name, metric in self.metrics.items()}
            params.metrics = dict(results)
            params.eval_results = {**results, "eval_loss": eval_loss.eval()}
            manager.on_eval_end(run_context)
        self.network.set_train(True)
        params.update(mode="train", **saved)
