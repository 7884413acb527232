"""Checkpoint callbacks of the ``checkpoint`` group.

``ModelCheckpoint`` with ``CheckpointConfig(save_checkpoint_steps, keep_checkpoint_max,
integrated_save)`` writes into one folder per rank, ``<run dir>/checkpoints/rank_<r>``, as
the model-saving tutorial lays them out; ``BestCheckpoint`` keeps ``best.ckpt`` by eval
accuracy next to them. What saving costs (seconds in ``ModelCheckpoint``, bytes it left per
rank) is measured here, so a sweep over ``integrated_save`` can compare the two.
"""
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

import mindspore as ms
from mindspore.train import Callback, CheckpointConfig, ModelCheckpoint

from ms_exp.boost.snapshots import SNAPSHOT_PREFIX, snapshot_files

BEST_NAME = "best.ckpt"


def rank_dir(run_dir: Path, rank_id: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"rank_{rank_id}"


class TimedModelCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that adds up the seconds spent in its ``step_end`` and ``end``.

    A subclass rather than a wrapper: ``Model`` looks for ``ModelCheckpoint`` instances
    among the callbacks (exception save, resume), and must still find this one. The
    ``on_train_*`` hooks that call them are timed: ``Model.fit`` refuses a callback class
    that defines ``step_end`` or ``end`` itself."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.save_time_s = 0.0

    def on_train_step_end(self, run_context):
        self._timed(super().on_train_step_end, run_context)

    def on_train_end(self, run_context):
        self._timed(super().on_train_end, run_context)

    # Model.fit keeps its own callbacks out of the evaluation it runs each epoch, but knows
    # them by class name: this one would get eval steps too and save a checkpoint after each
    # evaluation (checkpoint-<epoch>_<eval steps>.ckpt).
    def on_eval_step_end(self, run_context):
        pass

    def on_eval_end(self, run_context):
        pass

    def _timed(self, call, run_context) -> None:
        start = time.perf_counter()
        try:
            call(run_context)
        finally:
            self.save_time_s += time.perf_counter() - start


def checkpoint_bytes(run_dir: Path, prefix: str) -> Dict[int, int]:
    """Bytes of the checkpoints ``ModelCheckpoint`` left in each ``rank_<r>`` folder.

    ``best.ckpt`` and the ``-graph.meta`` file are not counted: they are the same whatever
    ``integrated_save`` says, and would hide the difference it makes."""
    sizes = {}
    for folder in (Path(run_dir) / "checkpoints").glob("rank_*"):
        rank = folder.name[len("rank_"):]
        if folder.is_dir() and rank.isdigit():
            sizes[int(rank)] = sum(p.stat().st_size for p in folder.glob(f"{prefix}*.ckpt"))
    return sizes


class BestCheckpoint(Callback):
    """Save the network's weights whenever an evaluation beats the best ``metric`` so far
    (accuracy, or AUC for Wide&Deep: ms_exp.metrics.best_metric).

    Written to a temporary name and renamed, so ``best.ckpt`` is never half-written."""

    def __init__(self, network, directory: Path, metric: str = "accuracy"):
        super().__init__()
        self.network = network
        self.metric = metric
        self.path = Path(directory) / BEST_NAME
        self.best: Optional[float] = None
        self.best_epoch: Optional[int] = None

    def on_eval_end(self, run_context):
        params = run_context.original_args()
        value = params.eval_results.get(self.metric)
        if value is None or value != value or (self.best is not None and value <= self.best):
            return  # value != value: NaN (an AUC over one class) is never a best
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name("best.partial.ckpt")
        ms.save_checkpoint(self.network, str(partial))
        os.replace(partial, self.path)
        self.best, self.best_epoch = float(value), params.cur_epoch_num
        print(f"epoch: {params.cur_epoch_num} new best {self.metric}: {value:.4f} "
              f"saved to {self.path}", flush=True)


def create_checkpoint_callbacks(cfg, network, directory: Path, steps_per_epoch: int,
                                parallel_mode: str, best_metric: str = "accuracy"
                                ) -> List[Callback]:
    callbacks: List[Callback] = []
    if cfg.save:
        if not cfg.integrated_save and parallel_mode == "stand_alone":
            print("checkpoint=sliced in stand-alone mode: one rank holds every parameter, "
                  "so its slice is the full set of weights", flush=True)
        config = CheckpointConfig(
            save_checkpoint_steps=cfg.save_checkpoint_steps or steps_per_epoch,
            keep_checkpoint_max=cfg.keep_checkpoint_max,
            integrated_save=cfg.integrated_save)
        callbacks.append(TimedModelCheckpoint(prefix=cfg.prefix, directory=str(directory),
                                              config=config))
    if cfg.keep_best:
        callbacks.append(BestCheckpoint(network, directory, best_metric))
    return callbacks


class WeightSnapshots(Callback):
    """Stage one of dimension-reduction training: weight-only snapshots from
    ``start_epoch`` on, ``per_epoch`` times per epoch, by MindSpore's own ModelCheckpoint
    with ``CheckpointConfig(saved_network=network)`` as the tutorial saves them.

    ModelCheckpoint cannot start late, so steps before ``start_epoch`` and between
    snapshots are not passed on to it; on the steps that are, its own counter
    (``save_checkpoint_steps=interval``) agrees and it saves."""

    def __init__(self, cfg, network, directory: Path, steps_per_epoch: int):
        super().__init__()
        self.start_epoch = cfg.start_epoch
        self.interval = max(1, steps_per_epoch // cfg.per_epoch)
        self.directory = Path(directory)
        config = CheckpointConfig(save_checkpoint_steps=self.interval,
                                  keep_checkpoint_max=cfg.keep_max, saved_network=network)
        self.saver = ModelCheckpoint(prefix=SNAPSHOT_PREFIX, directory=str(directory),
                                     config=config)

    def on_train_step_end(self, run_context):
        params = run_context.original_args()
        step_in_epoch = (params.cur_step_num - 1) % params.batch_num + 1
        if params.cur_epoch_num >= self.start_epoch and step_in_epoch % self.interval == 0:
            self.saver.step_end(run_context)

    def on_train_end(self, run_context):
        count = len(snapshot_files(self.directory))
        print(f"{count} weight snapshots in {self.directory}", flush=True)


def last_checkpoint(directory: Path, prefix: str) -> Optional[Path]:
    """The newest ``<prefix>-<epoch>_<step>.ckpt`` ModelCheckpoint left in ``directory``."""
    candidates = []
    for path in Path(directory).glob(f"{prefix}-*_*.ckpt"):
        epoch, _, step = path.stem[len(prefix) + 1:].partition("_")
        if epoch.isdigit() and step.isdigit():
            candidates.append(((int(epoch), int(step)), path))
    return max(candidates)[1] if candidates else None
