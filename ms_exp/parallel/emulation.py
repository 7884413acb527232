"""Semi-auto parallel checkpoints on CPU, where MindSpore refuses the mode itself.

Every rank trains the full network data parallel (the same math as semi-auto parallel on the
global batch); with ``integrated_save=False`` :class:`SemiAutoLayouts` replaces each file
``ModelCheckpoint`` writes with the slice this rank would hold under the shard strategies,
and rank 0 writes the strategy file, so MindSpore's ``transform_checkpoints`` merges the run
as on 8 cards (docs/design.md#semi-auto-refused-on-cpu)."""

from functools import reduce
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Set

from mindspore.train import Callback

from ms_exp.checkpoint.files import is_checkpoint_file, load_verified
from ms_exp.parallel.layout import (
    Layout,
    checkpoint_layouts,
    flatten_strategies,
    operator_layouts,
    operator_strategies,
    write_rank_slice,
    write_strategy_file,
)


def apply_strategies(network: Any, strategies: Optional[Mapping[str, Any]]) -> None:
    """``Primitive.shard`` for every configured operator: MindSpore's real semi-auto path."""
    for path, strategy in flatten_strategies(strategies).items():
        *cells, op_name = str(path).split(".")
        getattr(reduce(getattr, cells, network), op_name).shard(
            tuple(tuple(int(f) for f in dim) for dim in strategy)
        )


class SemiAutoLayouts(Callback):
    """Lay the checkpoints out as semi-auto parallel would: rank 0 writes the strategy file;
    with ``slice_files`` each checkpoint ``ModelCheckpoint`` writes is replaced by this rank's
    slice (``best.ckpt`` stays whole, as ``save_checkpoint`` integrates by default)."""

    def __init__(
        self,
        network: Any,
        strategies: Optional[Mapping[str, Any]],
        device_num: int,
        rank_id: int,
        directory: Path,
        prefix: str,
        strategy_file: str,
        slice_files: bool,
        save_steps: int,
    ) -> None:
        super().__init__()
        self.network = network
        self.strategies = strategies
        self.device_num = device_num
        self.rank_id = rank_id
        self.directory = Path(directory)
        self.prefix = prefix
        self.strategy_file = strategy_file
        self.slice_files = slice_files
        self.save_steps = save_steps
        self.layouts: Dict[str, Layout] = {}
        self._sliced: Set[Path] = set()

    def on_train_begin(self, run_context: Any) -> None:
        train_network = run_context.original_args().train_network
        shapes = {p.name: p.shape for p in train_network.get_parameters()}
        layouts = operator_layouts(self.network, self.strategies, self.device_num)
        self.layouts = checkpoint_layouts(shapes, layouts)
        if self.rank_id == 0 and self.strategy_file:
            write_strategy_file(
                self.strategy_file,
                self.layouts,
                op_strategies=operator_strategies(self.network, self.strategies, self.device_num),
            )

    def on_train_step_end(self, run_context: Any) -> None:
        # Only where ModelCheckpoint (called just before) has saved.
        if run_context.original_args().cur_step_num % self.save_steps == 0:
            self._slice_new_files()

    def on_train_end(self, run_context: Any) -> None:
        self._slice_new_files()

    def _slice_new_files(self) -> None:
        if not self.slice_files:
            return
        from mindspore.train.serialization import _wait_async_thread_save_ckpt

        _wait_async_thread_save_ckpt()  # checkpoint.async_save: the file is whole first
        for path in self.directory.glob(f"{self.prefix}*"):
            if path in self._sliced or ".partial" in path.name or not is_checkpoint_file(path):
                continue
            self._slice(path)
            self._sliced.add(path)

    def _slice(self, path: Path) -> None:
        # In the run's format, as ModelCheckpoint wrote it.
        arrays = {name: value.asnumpy() for name, value in load_verified(path).items()}
        write_rank_slice(arrays, self.layouts, self.rank_id, path)
