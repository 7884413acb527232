"""Numbers a schema's type admits but MindSpore, numpy and MLflow do not: floats that are
not finite or beyond float32, integers beyond int32, seeds beyond uint32. Checked for every
``float`` and ``int`` field of every schema (ms_exp/preflight/validate.py walks them), so a
new key is covered without a check of its own."""

import math
import typing
from typing import Any, Optional, Tuple

from ms_exp.config.errors import require

FINITE = "a finite number (a literal beyond 1.8e308, such as 1e400, reads as inf)"

FLOAT32_MAX = 3.4028234663852886e38

# What MindSpore takes for an integer argument (epochs, steps, sizes, intervals): int32.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Keys that seed a generator: mindspore.set_seed, numpy.random.seed and
# mindspore.dataset.config.set_seed take 0 to 2**32 - 1.
SEED_KEYS = ("seed", "split_seed", "data_seed")
SEED_MAX = 2**32 - 1


def check_number(key: str, declared: Any, value: Any) -> None:
    """Refuse a value of a schema's ``float`` or ``int`` field (also Optional, or a list of
    them) that MindSpore and numpy do not take."""
    kind, is_list = _number_kind(declared)
    if kind is None or value is None:
        return
    items: typing.List[Tuple[Optional[int], Any]] = (
        list(enumerate(value)) if is_list else [(None, value)]
    )
    for index, item in items:
        shown_key = key if index is None else f"{key}[{index}]"
        if kind is float and isinstance(item, float):
            require(
                math.isfinite(item),
                shown_key,
                item,
                FINITE if math.isinf(item) else "a finite number",
            )
            # Finite in float64 but inf in float32, the dtype MindSpore trains in: the run
            # would start and fail at its first steps.
            require(
                abs(item) <= FLOAT32_MAX,
                shown_key,
                item,
                f"a number of at most {FLOAT32_MAX:.4g} in size (float32, as MindSpore "
                "computes with it)",
            )
        elif kind is int and isinstance(item, int) and not isinstance(item, bool):
            if key.rpartition(".")[2] in SEED_KEYS:
                require(
                    0 <= item <= SEED_MAX,
                    shown_key,
                    item,
                    f"an integer from 0 to {SEED_MAX} (what mindspore.set_seed and "
                    "numpy.random.seed take)",
                )
            else:
                bound = f"at most {INT32_MAX}" if item > INT32_MAX else f"at least {INT32_MIN}"
                allowed = f"an integer of {bound} (int32, as MindSpore takes it)"
                require(INT32_MIN <= item <= INT32_MAX, shown_key, item, allowed)


def _number_kind(declared: Any) -> Tuple[Optional[type], bool]:
    """(float or int or None, whether a list of them) of a schema field's type."""
    if typing.get_origin(declared) is typing.Union:  # Optional[float]
        args = [a for a in typing.get_args(declared) if a is not type(None)]
        declared = args[0] if len(args) == 1 else None
    is_list = typing.get_origin(declared) in (list, typing.List)
    if is_list:
        (declared,) = typing.get_args(declared) or (None,)
    return (declared if declared in (float, int) else None), is_list
