"""``python -m ms_exp.report``: one table and a few plots that compare the jobs of a sweep.

    python -m ms_exp.report multirun/2025-01-31/12-00-00 [--metric eval/accuracy]
    python -m ms_exp.report <parent run id> [--tracking-uri URI]

The sweep is found in MLflow, by its parent run's id or by its folder (the parent's
``ms_exp.sweep.dir`` tag; a job folder ``<sweep dir>/<n>`` names its sweep too). Logged as
artifacts of the parent run under ``report/``:

- ``summary.csv`` and ``summary.md``: one row per job with its swept values, status, final
  ``eval/accuracy`` (``eval/auc`` for Wide&Deep), ``eval/loss`` and ``train/loss``, duration,
  the error of a failed job, and what saving checkpoints cost (``ckpt_save_s``,
  ``ckpt_bytes_rank_<r>``, from the ``checkpoint/*`` metrics of every run); sorted by the
  metric, best first as an Optuna sweep states it for what it optimises (its direction);
  where the sweep states none (a basic sweep, another ``--metric``), by the metric's name:
  lowest first for one holding loss, error, time or bytes, else highest first;
- ``<metric>_vs_<key>.png`` for every swept key (a tick at each swept value, labelled as
  the sweep gave it; a numeric axis past 12 numbers) and ``train_loss.png``, every job's
  loss curve overlaid;
- for an Optuna sweep, its study (read from its storage, the parent's
  ``ms_exp.optuna.storage`` tag unless ``--optuna-storage`` names it): ``optuna_trials.csv``
  and ``optuna_trials.md``, every trial in order with its state, value, the best value so far,
  its params, the epoch a pruned trial stopped at and its duration; ``optuna_history.png``;
  and ``optuna_importances.png`` with the parameter importances (from 2 completed trials on).

The sweep callback writes it when a sweep ends (``write_report``); this command writes it
again, e.g. for another ``--metric`` or a sweep recorded before reports existed.
"""

import argparse
import sys
from typing import List, Optional

from ms_exp.tracking.store import (
    damaged_refusal,
    exit_if_damaged,
    missing_store,
    not_a_database,
    open_client,
    password_refusal,
    resolve_tracking_uri,
    sqlite_path,
)
from ms_exp.tracking.sweep_report import ReportError, write_report
from ms_exp.tracking.sweep_runs import OBJECTIVE_METRICS, find_sweep
from ms_exp.tracking.ui_links import sweep_lines

PROG = "ms_exp.report"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "sweep",
        help="the sweep's folder (multirun/<date>/<time>), one of its job folders, or its "
        "parent run id",
    )
    parser.add_argument(
        "--tracking-uri", help="MLflow store of the sweep (default: sqlite:///mlflow.db here)"
    )
    parser.add_argument(
        "--metric",
        help="what the jobs are ranked and plotted by (default: the sweep's sweep.metric, else "
        f"the first of {', '.join(OBJECTIVE_METRICS)} the jobs logged)",
    )
    parser.add_argument(
        "--optuna-storage",
        metavar="URL",
        help="storage of an Optuna sweep's study, e.g. where it moved "
        "(default: the parent run's ms_exp.optuna.storage tag)",
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        for key, value in (
            ("--tracking-uri", args.tracking_uri),
            ("--optuna-storage", args.optuna_storage),
        ):
            refused = password_refusal(key, value)
            if refused:
                raise ReportError(refused)
        # The sweep's store; one that does not exist is refused, not created.
        uri = resolve_tracking_uri(args.tracking_uri)
        database = missing_store(uri)
        if database is not None:
            raise ReportError(
                f"no MLflow store at {database} (searched {uri}; nothing was "
                "created): run this where the sweep ran, or pass --tracking-uri"
            )
        file = sqlite_path(uri)
        problem = not_a_database(file) if file else None
        if problem is not None:
            raise ReportError(damaged_refusal("--tracking-uri", uri, problem))
        client = open_client(uri)
        report = write_report(
            client, find_sweep(client, args.sweep), args.metric, args.optuna_storage
        )
    except ReportError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # damage MLflow met after the check above
        return exit_if_damaged(PROG, "--tracking-uri", args.tracking_uri, error)
    print(report.markdown)
    print(f"report: {', '.join(report.files)}\n  logged to {report.artifact_uri}")
    sweep = (report.experiment_id, report.parent_run_id, report.ranked, report.metric)
    print("\n".join(sweep_lines(client.tracking_uri, *sweep, report.share_key)))
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
