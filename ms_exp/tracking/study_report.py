"""The Optuna study's part of a sweep's report (:func:`study_part`): every trial in order with
the best value so far, the optimisation history plot and the parameter importances, for a
sweep whose parent run names a study (the tags the Optuna sweeper sets).
"""

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

import pandas

from ms_exp.tracking.store import masked, sqlite_path
from ms_exp.tracking.sweep_runs import ReportError, counted, markdown

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

TRIALS_CSV = "optuna_trials.csv"
TRIALS_MD = "optuna_trials.md"
HISTORY_PNG = "optuna_history.png"
IMPORTANCES_PNG = "optuna_importances.png"


@dataclass
class StudyPart:
    markdown: str
    files: List[str]


def study_part(
    storage_url: str, study_name: str, folder: Path, recorded: bool = False
) -> StudyPart:
    """Write the study's tables and plots into ``folder``; return their Markdown and names.
    ``recorded``: the storage URL was read from the sweep's tag. Raises ReportError when the
    study cannot be loaded."""
    study = _load(storage_url, study_name, recorded)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    maximize = study.direction.name == "MAXIMIZE"
    lines = [
        f"Optuna study {study_name} in {masked(storage_url)}: "
        f"{'maximize' if maximize else 'minimize'}, {len(trials)} trials "
        f"({counted(t.state.name for t in trials)})"
    ]
    if complete:
        best = study.best_trial
        lines.append(
            f"Best trial: #{best.number}, value {best.value:.6g}, "
            + ", ".join(f"{k}={_param(v)}" for k, v in sorted(best.params.items()))
        )
    else:
        lines.append("Best trial: none, no trial completed")
    params, table = _history(trials, maximize)
    table.to_csv(folder / TRIALS_CSV, index=False)
    files = [TRIALS_CSV, TRIALS_MD, HISTORY_PNG]
    _plot(folder / HISTORY_PNG, "plot_optimization_history", study)
    reason = _no_importances(complete)
    if reason:
        lines.append(f"No parameter importances: {reason}")
    else:
        lines.append(_importances(study, folder))
        files.append(IMPORTANCES_PNG)
    cells = table.map(_cell)
    cells[params] = table[params].map(lambda value: _cell(_param(value)))
    lines.append("Trials in order:\n\n" + markdown(cells))
    text = "\n\n".join(lines) + "\n"
    (folder / TRIALS_MD).write_text(text)
    return StudyPart(text, sorted(files))


def _load(storage_url: str, study_name: str, recorded: bool = False) -> "optuna.Study":
    import optuna

    where = f"study {study_name!r} in {masked(storage_url) or 'no storage'}"
    if not storage_url:
        raise ReportError(
            f"{where}: the sweep's parent run names none; pass the study's "
            "storage URL with --optuna-storage"
        )
    if ":***@" in storage_url:  # as masked() wrote it into the parent's tag
        raise ReportError(
            f"{where}: the sweep's tag hides the storage's password; "
            "pass the storage URL with --optuna-storage"
        )
    # Optuna would create an empty SQLite file where none is; a report must not.
    database = sqlite_path(storage_url)
    if database is not None and not database.is_file():
        raise ReportError(
            f"{where}: no such file; pass the study's storage URL with --optuna-storage"
        )
    # A storage named by a record is opened only if it is an Optuna file already: Optuna
    # adds its tables to any database it opens, and a server would be sent this user's
    # credentials (PGPASSWORD) because whoever wrote the tag named it.
    if recorded and (database is None or not _holds_studies(database)):
        raise ReportError(
            f"{where}: named by the sweep's tag, and not a SQLite file of "
            "Optuna's; a report opens such a storage only where you name it: "
            "pass the study's storage URL with --optuna-storage"
        )
    try:
        study = optuna.load_study(study_name=study_name, storage=storage_url)
    except KeyError:
        names = ", ".join(optuna.get_all_study_names(storage_url)) or "none"
        raise ReportError(
            f"no {where} (studies there: {names}); pass the study's storage "
            "URL with --optuna-storage"
        ) from None
    except Exception as error:  # driver missing, host unreachable, bad URL: all one line
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ReportError(
            f"cannot open {where}: {first}; pass a reachable storage URL with --optuna-storage"
        ) from None
    if len(study.directions) > 1:
        raise ReportError(f"{where} has several objectives; the report reads one")
    return study


def _history(trials: Sequence["FrozenTrial"], maximize: bool) -> Tuple[List[str], pandas.DataFrame]:
    """``(params, table)``: one row per trial by number; ``best_so_far`` over the COMPLETE
    trials up to it (a pruned trial's value is its last intermediate one, never the best)."""
    params = sorted({name for t in trials for name in t.params})
    columns = ["number", "state", "value", "best_so_far", *params, "pruned_epoch", "duration_s"]
    rows, best = [], None
    for t in sorted(trials, key=lambda t: t.number):
        if t.state.name == "COMPLETE" and t.value is not None and math.isfinite(t.value):
            best = t.value if best is None else (max if maximize else min)(best, t.value)
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value,
                "best_so_far": best,
                **{name: t.params.get(name) for name in params},
                "pruned_epoch": t.last_step if t.state.name == "PRUNED" else None,
                "duration_s": t.duration.total_seconds() if t.duration else None,
            }
        )
    return params, pandas.DataFrame(rows, columns=columns, dtype=object)  # 2 stays 2, not 2.0


def _param(value: object) -> object:
    # _cell rounds floats to 4 places: a learning rate of 3e-5 would read 0.0000.
    return f"{value:.6g}" if isinstance(value, float) else value


def _cell(value: object) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value).replace("|", "\\|")


def _no_importances(complete: Sequence["FrozenTrial"]) -> Optional[str]:
    if len(complete) < 2:
        return f"they need at least 2 completed trials; the study has {len(complete)}"
    names = {name for t in complete for name in t.params}
    if not any(len({repr(t.params.get(n)) for t in complete}) > 1 for n in names):
        return "no parameter varies between the completed trials"
    return None


def _importances(study: "optuna.Study", folder: Path) -> str:
    import optuna

    # Optuna 5's default evaluator, named so that the table and the plot use the same one;
    # PED-ANOVA is deterministic, so there is no seed to fix.
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    _plot(folder / IMPORTANCES_PNG, "plot_param_importances", study, evaluator=evaluator)
    ordered = sorted(importances.items(), key=lambda item: (-item[1], item[0]))
    table = pandas.DataFrame(ordered, columns=["param", "importance"], dtype=object)
    return (
        "Parameter importances (PED-ANOVA, over the completed trials; they sum to 1):\n\n"
        + markdown(table.map(_cell))
    )


def _plot(path: Path, name: str, study: "optuna.Study", **kwargs: Any) -> None:
    """Save one of Optuna's matplotlib plots and close it."""
    import matplotlib
    import optuna
    from matplotlib import pyplot

    # Optuna draws with pyplot: Agg needs no display (the sweep callback runs on training
    # nodes), and rc_context undoes the ggplot style Optuna sets for the whole process.
    matplotlib.use("Agg")
    with matplotlib.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        figure = getattr(optuna.visualization.matplotlib, name)(study, **kwargs).figure
        try:
            figure.savefig(path, dpi=110, bbox_inches="tight")
        finally:
            pyplot.close(figure)


def _holds_studies(database: Path) -> bool:
    """Whether a SQLite file holds Optuna's ``studies`` table (read only)."""
    import sqlite3
    from contextlib import closing

    try:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'"
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as db:
            return db.execute(query).fetchone() is not None
    except sqlite3.Error:
        return False
