"""Which config keys ``python -m ms_exp.runs list`` shows, and, in a terminal's table, which
columns fit its width: by default the keys whose values differ among the runs that set them
and that most of the listed runs set (a store holding unlike runs, a dimension-reduction
sweep beside a semi-auto run, differs in dozens of keys that only a few runs have), then
what fits, by priority; a note says what was left out.
"""

import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence

import pandas

from ms_exp.tracking.compare import refuse_unknown
from ms_exp.tracking.sweep_runs import differing_keys, read_overrides

if TYPE_CHECKING:
    from mlflow.entities import Run

# Columns a row is not recognised without: always shown.
KEPT = ("run_id", "status")
# Shown after the config keys and the metrics, when they fit.
LAST_TO_FIT = ("name", "duration_s", "start")
# tabulate's "simple" table: two spaces between columns, a header padded by two.
GAP = 2


@dataclass
class Columns:
    """The config keys to show and what the table leaves out."""

    keys: List[str]
    hidden_keys: int = 0  # keys that differ but are not shown
    named: bool = False  # the keys were asked for (--columns, --all-params): all shown
    too_wide: List[str] = field(default_factory=list)


def default_keys(configs: Sequence[Mapping[str, str]]) -> List[str]:
    """The keys set in more than half of the runs whose values differ among those that
    set them."""
    keys = []
    for key in differing_keys(configs):
        values = [c[key] for c in configs if key in c]
        if 2 * len(values) > len(configs) and len(set(values)) > 1:
            keys.append(key)
    return keys


def chosen_keys(
    configs: Sequence[Mapping[str, str]],
    columns: Optional[Sequence[str]],
    all_params: bool,
    fewest: bool,
) -> Columns:
    """The keys ``--columns`` names, every key with ``--all-params``, the default keys when
    ``fewest`` (a table for people), else every key that differs (csv, json)."""
    every = sorted({key for c in configs for key in c})
    if all_params:
        return Columns(every, named=True)
    if columns:
        for key in columns:
            why = "no listed run has this config key"
            expected = "keys of their config (--all-params shows them all)"
            refuse_unknown("--columns", key, every, why, expected)
        return Columns(list(dict.fromkeys(columns)), named=True)
    differ = differing_keys(configs) if len(configs) > 1 else []
    if not fewest:
        return Columns(differ)
    keys = default_keys(configs)
    return Columns(keys, hidden_keys=len(differ) - len(keys))


def typed_keys(runs: Sequence["Run"]) -> List[str]:
    """The config keys the runs' command lines set (their overrides): fitted first."""
    keys: Dict[str, None] = {}
    for run in runs:
        for override in read_overrides(run.data.tags.get("ms_exp.overrides", "")):
            keys[override.split("=", 1)[0].lstrip("+~")] = None
    return list(keys)


def terminal_width() -> int:
    """The terminal's columns; 80 when stdout is not one, unless COLUMNS says (shutil's)."""
    return shutil.get_terminal_size((80, 24)).columns


def fit(
    cells: pandas.DataFrame,
    chosen: Columns,
    metrics: Sequence[str],
    metrics_named: bool,
    typed: Sequence[str],
    width: int,
) -> List[str]:
    """The columns of ``cells`` (the table as text) to show in ``width`` characters, in the
    table's order: run_id and status, the keys and metrics asked for, then by priority the
    first metric, the config keys (those typed on the command line first), the other
    metrics, name, duration and start, each where it still fits. ``chosen.too_wide`` gets
    what did not."""

    def size(column: str) -> int:
        longest = max((len(str(v)) for v in cells[column]), default=0)
        return max(len(column) + GAP, longest)

    keys = [k for k in chosen.keys if k in typed] + [k for k in chosen.keys if k not in typed]
    required = [*KEPT, *(metrics if metrics_named else []), *(keys if chosen.named else [])]
    wanted = [] if metrics_named else list(metrics[:1])
    wanted += [] if chosen.named else keys
    wanted += [*([] if metrics_named else metrics[1:]), *LAST_TO_FIT]
    shown = set(required)
    used = sum(size(c) for c in shown) + GAP * (len(shown) - 1)
    for column in wanted:
        if column in shown:
            continue
        if used + GAP + size(column) <= width:
            shown.add(column)
            used += GAP + size(column)
        else:
            chosen.too_wide.append(column)
    return [c for c in cells.columns if c in shown]


def note(chosen: Columns, width: int) -> str:
    """One line saying what the table leaves out and how to show it (the columns that did
    not fit by name where the line still fits the width, else their count); empty if
    nothing was left out."""
    keys = set(chosen.keys)
    params = chosen.hidden_keys + sum(1 for c in chosen.too_wide if c in keys)
    others = [c for c in chosen.too_wide if c not in keys]
    first = (
        f"{params} more param{'s' if params != 1 else ''}: --all-params or --columns to show them"
        if params
        else ""
    )
    named = f"{', '.join(others)} left out to fit {width} columns"
    counted = f"{len(others)} more column{'s' if len(others) != 1 else ''} in a wider terminal"
    for second in (named, counted):
        line = f"({'; '.join(part for part in (first, second if others else '') if part)})"
        if len(line) <= width:
            break
    return line if params or others else ""
