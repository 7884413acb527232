"""Checkpoint callbacks of the ``checkpoint`` group.

One folder per rank, ``<run dir>/checkpoints/rank_<r>``, as the model-saving tutorial lays
them out, saves timed; ``BestCheckpoint`` keeps ``best.ckpt`` beside them.
:class:`TimedModelCheckpoint` removes old files only after the new one is written (a failed
save must not leave none)."""

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from mindspore.train import Callback, CheckpointConfig, ModelCheckpoint
from omegaconf import DictConfig

from ms_exp.checkpoint.files import (
    best_name,
    breakpoint_record,
    breakpoints,
    format_of,
    format_options,
    numbered_checkpoints,
    record_breakpoint,
    record_digest,
    remove_checkpoint,
    replace_checkpoint,
    save_weights,
)
from ms_exp.checkpoint.snapshots import SNAPSHOT_PREFIX, snapshot_files

# What best.ckpt scored, so a resumed run does not replace it with a worse one.
BEST_RECORD = "best.json"


# ModelCheckpoint's own removal happens before the next save; it is kept out of the way.
_NEVER_REMOVE = 2**31 - 1


class TimedModelCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that adds up the seconds spent in its ``step_end`` and ``end``,
    keeps at most ``keep_max`` checkpoints by removing old ones only once a new one is
    written, and can continue a resumed run (``start_step``).

    A subclass, as ``Model`` looks for ``ModelCheckpoint`` instances; the ``on_train_*``
    hooks are timed, as ``Model.fit`` refuses a class that defines ``step_end`` or ``end``."""

    def __init__(
        self,
        prefix: str,
        directory: str,
        config: CheckpointConfig,
        keep_max: int,
        start_step: int = 0,
        before_save: Optional[Callable[[], None]] = None,
    ):
        super().__init__(prefix=prefix, directory=directory, config=config)
        self.save_time_s = 0.0
        self.keep_max = keep_max
        self.before_save = before_save
        # With async_save, the file MindSpore's thread is still writing: its digest is
        # recorded and the older files removed only once it is there whole.
        self._pending: Optional[Path] = None
        if start_step:
            # A resumed run writes on in its own folder: ModelCheckpoint would otherwise
            # switch to "<prefix>_1-..." names because files of that prefix exist, and would
            # save again on the first step because it counts from step 0.
            self._prefix = prefix
            self._last_triggered_step = start_step

    def _check_save_ckpt(self, cb_params: Any, force_to_save: bool) -> bool:
        # The one place before the file exists to wait for the step's metrics to be in
        # MLflow (``before_save``), so no kill leaves a checkpoint whose steps' metrics are
        # lost (docs/design.md#modelcheckpoint-decides).
        save = super()._check_save_ckpt(cb_params, force_to_save)
        if save and self.before_save is not None:
            self.before_save()
        return save

    def save_now(self, run_context: Any) -> None:
        """Save at the current step (an interrupted run's last checkpoint)."""
        self.on_train_end(run_context)

    def on_train_step_end(self, run_context: Any) -> None:
        self._timed(super().on_train_step_end, run_context)

    def on_train_end(self, run_context: Any) -> None:
        self._timed(super().on_train_end, run_context)

    # Model.fit keeps its own callbacks out of its evaluation by class name only: this one
    # would otherwise save a checkpoint after each evaluation.
    def on_eval_step_end(self, run_context: Any) -> None:
        pass

    def on_eval_end(self, run_context: Any) -> None:
        pass

    def _timed(self, call: Callable[[Any], None], run_context: Any) -> None:
        start = time.perf_counter()
        before = self.latest_ckpt_file_name
        try:
            call(run_context)
        finally:
            self.save_time_s += time.perf_counter() - start
        if self.latest_ckpt_file_name != before:
            # MindSpore joined the previous save's thread before starting this one.
            self._written()
            self._pending = Path(self.latest_ckpt_file_name)
        # MindSpore's checkpoint-writing thread (its fixed name) is done.
        if not any(t.name == "asyn_save_ckpt" and t.is_alive() for t in threading.enumerate()):
            self._written()

    def _written(self) -> None:
        """The pending save has ended: if it left its file, record its digest, then remove
        the older files (a file still being written is not among them).

        MindSpore writes ``<name>.tmp`` and renames it (a synchronous save too), so the
        file is whole once its writing thread ("asyn_save_ckpt") has ended; a thread that
        died leaves no file, and the older checkpoints stay (docs/design.md#async-save)."""
        written, self._pending = self._pending, None
        if written is not None and written.is_file():
            record_digest(written)
            self._remove_old()

    def _remove_old(self) -> None:
        """Keep the ``keep_max`` newest checkpoints; the one just written is among them."""
        files = numbered_checkpoints(Path(self._directory), self._prefix)
        for path in files[: max(0, len(files) - self.keep_max)]:
            remove_checkpoint(path)


class StepsDone(Callback):
    """With ``checkpoint.exception_save``: the last step whose end the callbacks reached
    (first among them, so a later one raising at that end still counts it), which is the
    step the weights of MindSpore's breakpoint file are at (docs/design.md#exception-save)."""

    def __init__(self, start_step: int) -> None:
        super().__init__()
        self.step = start_step

    def on_train_step_end(self, run_context: Any) -> None:
        self.step = run_context.original_args().cur_step_num


def record_breakpoints(directory: Path, prefix: str, step: int, since: float) -> None:
    """After training raised: record the SHA-256 and step of the breakpoint file MindSpore
    wrote in ``directory`` since ``since`` (``time.time()``). Waits for its thread first
    (``checkpoint.async_save``); a failure is said in one line, the training error stays the
    one raised."""
    from mindspore.train.serialization import _wait_async_thread_save_ckpt

    try:
        _wait_async_thread_save_ckpt()
        for path in breakpoints(directory, prefix):
            if path.stat().st_mtime >= since and breakpoint_record(path) is None:
                record_breakpoint(path, step)
    except OSError as error:
        print(f"ms_exp: warning: the breakpoint file was not recorded: {error}", flush=True)


class BestCheckpoint(Callback):
    """Save the network's weights whenever an evaluation beats the best ``metric`` so far
    (the model option's ``best_metric``: accuracy, or AUC for Wide&Deep).

    Written to a temporary name and renamed, so ``best.ckpt`` (``best.safetensors`` with
    ``checkpoint.format=safetensors``) is never half-written. The
    file holds the whole network on every rank (``save_checkpoint`` integrates the slices),
    so only rank 0 keeps it (``keep``); where the weights are sharded (``gathers``) the other
    ranks still save, as gathering them is collective, and delete what they wrote."""

    def __init__(
        self,
        network: Any,
        directory: Path,
        metric: str = "accuracy",
        keep: bool = True,
        gathers: bool = False,
        fmt: str = "ckpt",
    ):
        super().__init__()
        self.network = network
        self.metric = metric
        self.keep, self.gathers = keep, gathers
        self.path = Path(directory) / best_name(fmt)
        self.best: Optional[float] = None
        record = self.path.with_name(BEST_RECORD)
        if self.path.is_file() and record.is_file():  # a resumed run's earlier best
            earlier = json.loads(record.read_text())
            if earlier.get("metric") == metric:
                self.best = earlier["value"]

    def on_eval_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        self.consider(params.eval_results, params.cur_epoch_num)

    def consider(self, results: Dict[str, Any], epoch: int) -> None:
        """Keep the network's weights if ``results`` (an evaluation after ``epoch``) beat
        the best so far."""
        value = results.get(self.metric)
        if value is None or value != value or (self.best is not None and value <= self.best):
            return  # value != value: NaN (an AUC over one class) is never a best
        if not (self.keep or self.gathers):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name("best.partial" + self.path.suffix)
        save_weights(self.network, partial)
        if not self.keep:
            remove_checkpoint(partial)
            self.best = float(value)
            return
        replace_checkpoint(partial, self.path)
        self.best = float(value)
        # Every metric of that evaluation: what the run's best model scored.
        scored = {f"eval/{n}": float(v) for n, v in results.items() if not n.startswith("eval_")}
        best = {"metric": self.metric, "value": self.best, "epoch": epoch, "results": scored}
        record = self.path.with_name(BEST_RECORD)
        record.with_suffix(".partial").write_text(json.dumps(best))
        os.replace(record.with_suffix(".partial"), record)
        print(
            f"epoch: {epoch} new best {self.metric}: {value:.4f} saved to {self.path}", flush=True
        )


def save_interval_steps(cfg: DictConfig, steps_per_epoch: int) -> int:
    """Steps between two checkpoints: ``save_checkpoint_steps``, else
    ``save_checkpoint_epochs`` epochs (the model zoo ResNet's
    ``save_checkpoint_epochs * step_size``)."""
    return cfg.save_checkpoint_steps or cfg.save_checkpoint_epochs * steps_per_epoch


def create_checkpoint_callbacks(
    cfg: DictConfig,
    network: Any,
    directory: Path,
    steps_per_epoch: int,
    parallel_mode: str,
    best_metric: str = "accuracy",
    start_step: int = 0,
    rank_id: int = 0,
    sharded: bool = False,
    before_save: Optional[Callable[[], None]] = None,
) -> List[Callback]:
    """``sharded``: the weights are split over the ranks (semi-auto or auto parallel, not
    emulated), so every rank takes part in saving ``best.ckpt``. ``before_save`` runs
    before each numbered checkpoint is written."""
    from mindspore import log

    logger = log._get_logger()  # MindSpore's logger (GLOG_v), made on first use
    if not any(isinstance(f, _SaveFailureRaised) for f in logger.filters):
        logger.addFilter(_SaveFailureRaised())
    callbacks: List[Callback] = []
    if cfg.save:
        if not cfg.integrated_save and parallel_mode == "stand_alone":
            print(
                "checkpoint=sliced in stand-alone mode: one rank holds every parameter, "
                "so its slice is the full set of weights",
                flush=True,
            )
        config = CheckpointConfig(
            save_checkpoint_steps=save_interval_steps(cfg, steps_per_epoch),
            keep_checkpoint_max=_NEVER_REMOVE,
            integrated_save=cfg.integrated_save,
            # epoch_num and step_num: where a resumed run continues (ms_exp/checkpoint/resume.py).
            append_info=["epoch_num", "step_num"],
            # MindSpore refuses a CRC for safetensors: ms_exp records a digest instead.
            **format_options(format_of(cfg)),
            async_save=bool(cfg.get("async_save", False)),
            remove_redundancy=bool(cfg.get("remove_redundancy", False)),
            exception_save=bool(cfg.get("exception_save", False)),
        )
        callbacks.append(
            TimedModelCheckpoint(
                cfg.prefix, str(directory), config, cfg.keep_checkpoint_max, start_step, before_save
            )
        )
    if cfg.keep_best:
        callbacks.append(
            BestCheckpoint(
                network,
                directory,
                best_metric,
                keep=rank_id == 0,
                gathers=sharded,
                fmt=format_of(cfg),
            )
        )
    return callbacks


class _SaveFailureRaised(logging.Filter):
    """MindSpore logs "[CRITICAL] ... Failed to save the checkpoint file ..." and then raises
    the error itself (a full disk: "No space left on device"), which ms_exp states in its
    one line: the CRITICAL line only said it twice, with a guess at the cause."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to save the checkpoint file")


class WeightSnapshots(Callback):
    """Stage one of dimension-reduction training: weight-only snapshots from
    ``start_epoch`` on, ``per_epoch`` times per epoch, by MindSpore's own ModelCheckpoint
    with ``CheckpointConfig(saved_network=network)`` as the tutorial saves them.

    ModelCheckpoint cannot start late, so steps before ``start_epoch`` and between
    snapshots are not passed on to it; on the steps that are, its own counter
    (``save_checkpoint_steps=interval``) agrees and it saves."""

    def __init__(
        self, cfg: DictConfig, network: Any, directory: Path, steps_per_epoch: int
    ) -> None:
        super().__init__()
        self.start_epoch = cfg.start_epoch
        self.interval = max(1, steps_per_epoch // cfg.per_epoch)
        self.directory = Path(directory)
        config = CheckpointConfig(
            save_checkpoint_steps=self.interval,
            keep_checkpoint_max=cfg.keep_max,
            saved_network=network,
            crc_check=True,
        )
        self.saver = ModelCheckpoint(
            prefix=SNAPSHOT_PREFIX, directory=str(directory), config=config
        )

    def on_train_step_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        step_in_epoch = (params.cur_step_num - 1) % params.batch_num + 1
        if params.cur_epoch_num >= self.start_epoch and step_in_epoch % self.interval == 0:
            self.saver.step_end(run_context)

    def on_train_end(self, run_context: Any) -> None:
        count = len(snapshot_files(self.directory))
        print(f"{count} weight snapshots in {self.directory}", flush=True)
