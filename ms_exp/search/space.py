"""A sweep's search space in Hydra's override grammar, as Optuna distributions.

``interval(a,b)`` is a float range (``tag(int,...)`` an int one, ``tag(log,...)`` sampled on
a log scale), ``range(a,b[,step])`` its ints (b excluded, as in Python), ``a,b,c`` and
``choice(a,b,c)`` categories. Anything else is a fixed value every job gets.
"""

from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution


def split_space(overrides: Sequence[Override]) -> Tuple[Dict[str, "BaseDistribution"], List[str]]:
    """(key -> Optuna distribution, the fixed overrides); a key given twice: the last wins,
    so the command line overrides ``hydra.sweeper.params``."""
    space: Dict[str, "BaseDistribution"] = {}
    fixed: Dict[str, str] = {}
    for override in overrides:
        key = override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = distribution(override)
        else:
            assert override.input_line is not None  # parsed from this text
            fixed[key] = override.input_line
    return space, list(fixed.values())


def distribution(override: Override) -> "BaseDistribution":
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    value = override.value()
    if isinstance(value, IntervalSweep):
        assert value.start is not None and value.end is not None  # interval(a,b) has both
        log = "log" in value.tags
        if "int" in value.tags:
            return IntDistribution(int(value.start), int(value.end), log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)
    if isinstance(value, RangeSweep):
        steps = list(override.sweep_iterator(transformer=Transformer.identity))
        ints = [v for v in steps if isinstance(v, int)]
        if len(ints) == len(steps) and len(steps) > 1:
            return IntDistribution(min(ints), max(ints), step=abs(ints[1] - ints[0]))
        return CategoricalDistribution(steps)  # type: ignore[arg-type]  # as below
    if isinstance(value, ChoiceSweep) or override.is_discrete_sweep():
        # Hydra's types admit lists and dicts as choices, Optuna's do not; Optuna takes them,
        # warning that they cannot be stored.
        choices = list(override.sweep_iterator(transformer=Transformer.identity))
        return CategoricalDistribution(choices)  # type: ignore[arg-type]
    raise ValueError(f"{override.input_line}: not a search space")


def suggest(trial: "optuna.Trial", key: str, space: "BaseDistribution") -> Any:
    """A value of ``space`` for ``trial``, through Optuna's public suggest API."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(space, FloatDistribution):
        return trial.suggest_float(key, space.low, space.high, step=space.step, log=space.log)
    if isinstance(space, IntDistribution):
        return trial.suggest_int(key, space.low, space.high, step=space.step, log=space.log)
    assert isinstance(space, CategoricalDistribution)  # split_space makes no other kind
    return trial.suggest_categorical(key, space.choices)


def job_override(key: str, value: Any) -> str:
    """``key=value`` as Hydra reads it back: floats in full, booleans lower case."""
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if isinstance(value, float):
        return f"{key}={value!r}"
    return f"{key}={value}"
