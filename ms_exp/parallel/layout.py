"""Semi-auto parallel layouts of a network's parameters, computed the way MindSpore does.

On CPU, where MindSpore 2.10 refuses SEMI_AUTO_PARALLEL, ms_exp trains data-parallel and
writes each rank's slices and a strategy file in MindSpore's format; MindSpore's offline
tools reading both back is the proof the layout is right.

The device-matrix conventions are MindSpore's (docs/design.md#device-matrix): the
repeated-calculation factor goes on the RIGHT, tensor-map entry ``i`` names
``dev_matrix[-i - 1]``, ``-1`` a dimension not split. Operators without a strategy get the
default data-parallel one. The slicing itself is MindSpore's (:func:`slice_for_rank`).
"""

import difflib
import os
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ms_exp.config.errors import InvalidConfig

SUPPORTED_OPS = ("MatMul", "Add")
Strategy = Tuple[Tuple[int, ...], ...]


class StrategyError(InvalidConfig):
    """A shard strategy that MindSpore would refuse; the message is one line naming the operator."""


@dataclass(frozen=True)
class Layout:
    """Where one parameter lives: MindSpore's (dev_matrix, tensor_map) plus its full shape."""

    dev_matrix: tuple
    tensor_map: tuple
    tensor_shape: tuple

    def __post_init__(self) -> None:
        for name in ("dev_matrix", "tensor_map", "tensor_shape"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if len(self.tensor_map) != len(self.tensor_shape):
            raise ValueError(
                f"tensor_map {list(self.tensor_map)} does not match tensor shape "
                f"{list(self.tensor_shape)}"
            )

    @property
    def device_num(self) -> int:
        return prod(self.dev_matrix)

    def tensor_strategy(self) -> Tuple[int, ...]:
        """How many ways each tensor dimension is split."""
        from mindspore.parallel._tensor import _get_tensor_strategy

        return tuple(
            int(s) for s in _get_tensor_strategy(list(self.dev_matrix), list(self.tensor_map))
        )

    def slice_shape(self) -> Tuple[int, ...]:
        return tuple(size // ways for size, ways in zip(self.tensor_shape, self.tensor_strategy()))

    def split_factor(self) -> int:
        """How many distinct slices exist (the other ranks hold repeats of them)."""
        return prod(self.tensor_strategy())


@dataclass(frozen=True)
class _Operator:
    path: str  # "layer1.matmul": cell path + attribute name
    kind: str  # primitive name: "MatMul", "Add", "ReLU", ...
    primitive: Any
    param_name: Optional[str]  # the parameter it takes as input 1, when ms_exp can tell
    param_shape: Optional[Tuple[int, ...]]


def _operators(network: Any) -> Dict[str, _Operator]:
    """Every primitive held as a cell attribute, by path, with the parameter it consumes.

    A MatMul is bound to the one 2-D parameter of its cell and an Add to the one 1-D parameter
    (the tutorial's Dense: ``matmul(x, self.weight)``, ``add(x, self.bias)``); a cell with
    several candidates is left unbound rather than guessed."""
    param_rank = {"MatMul": 2, "Add": 1}
    operators: Dict[str, _Operator] = {}
    for cell_name, cell in network.cells_and_names():
        primitives = {k: v for k, v in getattr(cell, "_primitives", {}).items() if v is not None}
        own = list(cell.get_parameters(expand=False))
        for attr, primitive in primitives.items():
            kind = getattr(primitive, "name", type(primitive).__name__)
            param = None
            if kind in param_rank:
                candidates = [p for p in own if len(p.shape) == param_rank[kind]]
                same_kind = [q for q in primitives.values() if getattr(q, "name", None) == kind]
                if len(candidates) == 1 and len(same_kind) == 1:
                    param = candidates[0]
            path = f"{cell_name}.{attr}" if cell_name else attr
            bound = (param.name, tuple(param.shape)) if param is not None else (None, None)
            operators[path] = _Operator(path, kind, primitive, *bound)
    return operators


def _shardable(operators: Mapping[str, _Operator]) -> List[_Operator]:
    return [op for op in operators.values() if op.kind in SUPPORTED_OPS and op.param_name]


def _fmt(strategy: Iterable[Iterable[int]]) -> str:
    return str(tuple(tuple(t) for t in strategy))


def _is_sequence(value: Any) -> bool:
    return not isinstance(value, (str, bytes)) and isinstance(value, Iterable)


def _check_strategy(
    op: _Operator, raw: Any, device_num: int, batch_size: Optional[int]
) -> Strategy:
    where = f"strategy for '{op.path}'"
    if op.kind not in SUPPORTED_OPS:
        raise StrategyError(
            f"{where}: {op.kind} is not supported by the CPU layout emulation "
            f"(supported: {', '.join(SUPPORTED_OPS)})"
        )
    if op.param_name is None:
        raise StrategyError(
            f"{where}: cannot tell which parameter this {op.kind} takes "
            f"(its cell needs exactly one {op.kind} and one candidate parameter)"
        )
    if op.kind == "MatMul" and (
        op.primitive.attrs.get("transpose_a") or op.primitive.attrs.get("transpose_b")
    ):
        raise StrategyError(
            f"{where}: MatMul with transpose_a/transpose_b is not supported by "
            f"the CPU layout emulation"
        )
    if not _is_sequence(raw) or not all(_is_sequence(t) for t in raw):
        raise StrategyError(
            f"{where}: expected one tuple of factors per input, such as "
            f"((2, 1), (1, 2)), got {raw!r}"
        )
    strategy: Strategy = tuple(tuple(t) for t in raw)
    # (description, shape) of each input, the batch dim None unless batch_size is known. Add:
    # x is [batch, *bias shape], the bias broadcast over the batch dim.
    param_shape: Tuple[int, ...] = op.param_shape  # type: ignore[assignment]  # bound: checked above
    x = (batch_size, param_shape[0]) if op.kind == "MatMul" else (batch_size, *param_shape)
    inputs = [("x", x), (op.param_name, param_shape)]
    if len(strategy) != len(inputs):
        raise StrategyError(
            f"{where}: {op.kind} takes {len(inputs)} inputs, got "
            f"{len(strategy)} tuple(s) {_fmt(strategy)}"
        )
    for i, (factors, (name, shape)) in enumerate(zip(strategy, inputs)):
        if not all(_positive_integer(f) for f in factors):
            raise StrategyError(
                f"{where}: input {i} factors must be positive integers, got {tuple(factors)}"
            )
        if len(factors) != len(shape):
            shown = ", ".join("batch" if s is None else str(s) for s in shape)
            raise StrategyError(
                f"{where}: input {i} ({name}, shape [{shown}]) has {len(shape)} "
                f"dims, got {len(factors)} factors {tuple(factors)}"
            )
    strategy = tuple(tuple(int(f) for f in factors) for factors in strategy)
    for i, (factors, (name, shape)) in enumerate(zip(strategy, inputs)):
        for dim, (factor, size) in enumerate(zip(factors, shape)):
            if size is not None and size % factor:
                raise StrategyError(
                    f"{where}: input {i} ({name}) dim {dim} has size {size}, "
                    f"not divisible by {factor}"
                )
    if op.kind == "MatMul":
        (a, b), (b2, c) = strategy
        if b != b2:
            raise StrategyError(
                f"{where}: inner dims sharded inconsistently: input 0 dim 1 "
                f"split {b} but input 1 dim 0 split {b2}"
            )
        used, product = a * b * c, f"{a}*{b}*{c}"
    else:
        x, bias = strategy
        for dim, (fx, fb) in enumerate(zip(x[1:], bias)):
            if fx != fb:
                raise StrategyError(
                    f"{where}: broadcast dims sharded inconsistently: input 0 "
                    f"dim {dim + 1} split {fx} but input 1 dim {dim} split {fb}"
                )
        used, product = prod(x), "*".join(map(str, x))
    if device_num % used:
        raise StrategyError(
            f"{where}: {_fmt(strategy)} uses {product} = {used} devices, "
            f"which does not divide device_num={device_num}"
        )
    return strategy


def _default_strategy(op: _Operator, device_num: int) -> Strategy:
    """MindSpore's default data-parallel strategy: batch dim split, parameter whole."""
    ones = (1,) * len(op.param_shape)  # type: ignore[arg-type]  # bound: _shardable
    if op.kind == "MatMul":
        return ((device_num, 1), ones)
    return ((device_num, *ones), ones)


def _positive_integer(value: Any) -> bool:
    return bool(isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1)


def _check_device_num(device_num: Any) -> int:
    if not _positive_integer(device_num):
        raise StrategyError(f"device_num must be a positive integer, got {device_num!r}")
    return int(device_num)


def flatten_strategies(strategies: Optional[Mapping[str, Any]], prefix: str = "") -> Dict[str, Any]:
    """``{"layer1": {"matmul": [[2, 1], [1, 2]]}}`` (the config's nesting) ->
    ``{"layer1.matmul": [[2, 1], [1, 2]]}``; dotted keys pass through."""
    flat: Dict[str, Any] = {}
    for key, value in (strategies or {}).items():
        path = f"{prefix}{key}"
        if hasattr(value, "items"):
            flat.update(flatten_strategies(value, path + "."))
        else:
            flat[path] = value
    return flat


def operator_strategies(
    network: Any,
    strategies: Optional[Mapping[str, Any]],
    device_num: int,
    batch_size: Optional[int] = None,
) -> Dict[str, Strategy]:
    """The strategy every parameter-holding MatMul/Add runs with: the configured one, checked,
    or MindSpore's default data-parallel one. ``strategies`` is keyed by operator path, flat
    ("layer1.matmul") or nested as in ``conf/parallel``. Raises :class:`StrategyError`."""
    device_num = _check_device_num(device_num)
    operators = _operators(network)
    configured: Dict[str, Strategy] = {}
    for path, raw in flatten_strategies(strategies).items():
        op = operators.get(str(path))
        if op is None:
            known = [o.path for o in _shardable(operators)] or sorted(operators)
            hint = difflib.get_close_matches(str(path), list(operators), n=1)
            shown = ", ".join(known[:6]) + (f", ... ({len(known) - 6} more)" if known[6:] else "")
            raise StrategyError(
                f"strategy for '{path}': no such operator in {type(network).__name__}"
                + (f" (did you mean '{hint[0]}'?)" if hint else "")
                + f"; operators that take a strategy: {shown or 'none'}"
            )
        configured[op.path] = _check_strategy(op, raw, device_num, batch_size)
    return {
        op.path: configured.get(op.path) or _default_strategy(op, device_num)
        for op in _shardable(operators)
    }


def _layout_of(op: _Operator, strategy: Strategy, device_num: int) -> Layout:
    if op.kind == "MatMul":
        (a, b), (_, c) = strategy
        dev_matrix, tensor_map = [a, b, c], [1, 0]
    else:
        x, bias = strategy
        dev_matrix = list(x)
        tensor_map = [len(bias) - 1 - dim if factor > 1 else -1 for dim, factor in enumerate(bias)]
    repeat = device_num // prod(dev_matrix)
    if repeat > 1:  # repeated calculation: on the right, tensor map shifted up by one
        dev_matrix.append(repeat)
        tensor_map = [m + 1 if m != -1 else -1 for m in tensor_map]
    return Layout(tuple(dev_matrix), tuple(tensor_map), op.param_shape)  # type: ignore[arg-type]  # bound: _shardable


def operator_layouts(
    network: Any,
    strategies: Optional[Mapping[str, Any]],
    device_num: int,
    batch_size: Optional[int] = None,
) -> Dict[str, Layout]:
    """The semi-auto parallel layout of every trainable parameter of ``network``; those no
    supported operator consumes are replicated. Raises :class:`StrategyError`."""
    device_num = _check_device_num(device_num)
    effective = operator_strategies(network, strategies, device_num, batch_size)
    by_param = {op.param_name: op for op in _shardable(_operators(network))}
    layouts: Dict[str, Layout] = {}
    for param in network.trainable_params():
        op = by_param.get(param.name)
        if op is not None:
            layouts[param.name] = _layout_of(op, effective[op.path], device_num)
        else:
            layouts[param.name] = Layout((device_num,), (-1,) * len(param.shape), param.shape)
    return layouts


def slice_for_rank(array: np.ndarray, layout: Layout, rank: int) -> np.ndarray:
    """The slice of ``array`` that ``rank`` holds under ``layout``, as MindSpore cuts it
    (the body of ``mindspore.parallel._tensor._load_tensor``, without the Tensor round trip)."""
    from mindspore.parallel._tensor import _chunk_tensor_by_strategy, _get_tensor_slice_index

    array = np.asarray(array)
    if tuple(array.shape) != layout.tensor_shape:
        raise ValueError(
            f"array of shape {list(array.shape)} does not match the layout's "
            f"tensor shape {list(layout.tensor_shape)}"
        )
    if not 0 <= rank < layout.device_num:
        raise ValueError(
            f"rank {rank} is outside the {layout.device_num} devices of "
            f"dev_matrix {list(layout.dev_matrix)}"
        )
    if array.ndim == 0:
        return array.copy()
    strategy = list(layout.tensor_strategy())
    index = _get_tensor_slice_index(
        list(layout.dev_matrix), strategy, list(layout.tensor_map), rank
    )
    return np.ascontiguousarray(_chunk_tensor_by_strategy(array, strategy)[int(index)])


def checkpoint_layouts(
    shapes: Mapping[str, Sequence[int]], layouts: Mapping[str, Layout]
) -> Dict[str, Layout]:
    """Layouts of every sliced entry of a training checkpoint (name -> shape), as MindSpore
    lays them out in semi-auto parallel: parameters their own; optimizer states cloned from
    one (``<prefix>.<parameter>``: ``moments.*``, ``adam_m.*``, ...) their parameter's, as
    step_parallel gives them; everything else (``learning_rate``, ``global_step``, ...) is
    replicated and left out of the strategy file, where ``transform_checkpoints`` copies
    it unchanged."""
    result: Dict[str, Layout] = {}
    for name, shape in shapes.items():
        shape = tuple(int(s) for s in shape)
        if name in layouts:
            if shape != layouts[name].tensor_shape:
                raise ValueError(
                    f"{name}: shape {list(shape)} does not match its layout's "
                    f"{list(layouts[name].tensor_shape)}"
                )
            result[name] = layouts[name]
            continue
        # The parameter it was cloned from: moments.layer1.weight -> layer1.weight.
        owner = max((p for p in layouts if name.endswith("." + p)), key=len, default=None)
        if owner is None:
            continue
        if shape != layouts[owner].tensor_shape:
            if layouts[owner].split_factor() == 1:
                continue  # its parameter is whole on every rank: so is this state
            raise ValueError(
                f"{name}: shape {list(shape)} differs from its parameter {owner} "
                f"{list(layouts[owner].tensor_shape)}; cannot tell how MindSpore "
                f"would lay it out"
            )
        result[name] = layouts[owner]
    return result


def write_rank_slice(
    arrays: Mapping[str, np.ndarray], layouts: Mapping[str, Layout], rank: int, path: Path
) -> None:
    """``path``, replaced whole: ``rank``'s slice of each entry with a layout, the rest as is;
    a ``.safetensors`` name writes that format, its digest recorded."""
    import mindspore as ms

    from ms_exp.checkpoint.files import replace_checkpoint, save_weights

    entries = [
        {
            "name": key,
            "data": ms.Tensor(slice_for_rank(a, layouts[key], rank) if key in layouts else a),
        }
        for key, a in arrays.items()
    ]
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")
    save_weights(entries, partial)
    replace_checkpoint(partial, path)


def write_sliced_checkpoints(
    param_dict: Mapping[str, Any],
    layouts: Mapping[str, Layout],
    device_num: int,
    out_dir: Union[str, Path],
    prefix: str = "checkpoint",
    name: Optional[str] = None,
) -> Dict[str, Layout]:
    """Write each rank's slices of ``param_dict`` to ``out_dir/rank_<r>/<name>`` (a
    ``.safetensors`` name writes that format). Returns the layouts of every sliced entry:
    write the strategy file from these so that optimizer states merge too."""
    from ms_exp.checkpoint.files import is_checkpoint_file

    device_num = _check_device_num(device_num)
    name = name or f"{prefix}.ckpt"
    if (
        "/" in name
        or os.sep in name
        or not is_checkpoint_file(Path(name))
        or not name.startswith(prefix)
    ):
        raise ValueError(
            f"checkpoint file name {name!r} must be a plain '<prefix>....ckpt' "
            f"name starting with prefix {prefix!r}"
        )
    for param, layout in layouts.items():
        if layout.device_num != device_num:
            raise ValueError(
                f"{param}: dev_matrix {list(layout.dev_matrix)} spans "
                f"{layout.device_num} devices, not device_num={device_num}"
            )
        if param not in param_dict:
            raise ValueError(f"{param} has a layout but no value in the checkpoint dict")
    arrays = {
        key: value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
        for key, value in param_dict.items()
    }
    sliced = checkpoint_layouts({key: a.shape for key, a in arrays.items()}, layouts)
    for rank in range(device_num):
        rank_dir = Path(out_dir) / f"rank_{rank}"
        rank_dir.mkdir(parents=True, exist_ok=True)
        write_rank_slice(arrays, sliced, rank, rank_dir / name)
    return sliced


def write_strategy_file(
    path: Union[str, Path],
    layouts: Mapping[str, Layout],
    stage: int = 0,
    op_strategies: Optional[Mapping[str, Strategy]] = None,
) -> Path:
    """Write a strategy checkpoint as MindSpore's ``strategy_ckpt_config={"save_file": ...}``
    does, atomically. Without ``op_strategies`` (by operator path), one item per parameter:
    MindSpore's readers need at least one (the pipeline stage is the first's) but read no names."""
    from mindspore.train import node_strategy_pb2

    if not layouts:
        raise ValueError("no parameter layouts to write")
    device_nums = {layout.device_num for layout in layouts.values()}
    if len(device_nums) != 1:
        raise ValueError(
            f"layouts span different device counts {sorted(device_nums)}; "
            f"MindSpore takes the device count from the first one"
        )
    strategy_map = node_strategy_pb2.ParallelStrategyMap()
    strategy_map.current_stage = stage
    items = op_strategies or {name: (layout.tensor_strategy(),) for name, layout in layouts.items()}
    for node_name, strategy in items.items():
        item = strategy_map.parallel_strategy_item.add()
        item.node_name = node_name
        item.parallel_strategys.stage = stage
        for factors in strategy:
            item.parallel_strategys.parallel_strategy.add().dim.extend(int(f) for f in factors)
    for name, layout in layouts.items():
        entry = strategy_map.parallel_layout_item.add()
        entry.param_name = name
        parallel = entry.parallel_layouts
        parallel.dev_matrix.add().dim.extend(layout.dev_matrix)
        parallel.tensor_map.add().dim.extend(layout.tensor_map)
        parallel.param_split_shape.add()  # present but empty: MindSpore reads element [0]
        parallel.indices_offset.add()
        parallel.field = 0
        parallel.opt_weight_shard_step = 0
        parallel.opt_weight_shard_size = 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(strategy_map.SerializeToString())
    os.replace(partial, path)
    return path
