"""``python -m ms_exp.runs``: compare runs in the terminal, without the MLflow UI.

    python -m ms_exp.runs list [--experiment NAME] [--sweep ID|FOLDER] [--filter "..."]
                               [--format table|csv|json|markdown] [--columns KEY,KEY | --all-params]
    python -m ms_exp.runs best [--metric eval/accuracy] [--sweep ID|FOLDER] [--min|--max]
    python -m ms_exp.runs diff RUN_A RUN_B
    python -m ms_exp.runs push --to URI [--experiment NAME] [--sweep ID|FOLDER] [--run ID ...]
                               [--register] [--dry-run]

list: the job runs, newest first: id, name, status, start (local time), duration, the config
keys (params) whose values differ among the listed runs, and the final metrics (every eval/
metric and train/loss, or those --metric names). A path inside a run's own folder compares
relative to it. Sweep parents and evaluations (ms_exp.eval) are not jobs and are left out.
The table and markdown show the keys that differ among the runs that set them and that most
of the runs set, and the table fits the terminal's width (COLUMNS, else 80 when not a
terminal): id and status always, then the metrics and keys that fit; a last line says what
was left out. --columns KEY,KEY or --all-params (every key) choose the keys in any format;
csv and json hold every key that differs.

best: the finished run with the best --metric (default: the sweep's objective, else the
first of eval/accuracy, eval/auc the runs logged), its value, the overrides of its command
line and its checkpoints. Lowest is best with --min, highest with --max; else as an Optuna
sweep states it for its objective, else by the metric's name: lowest for one holding loss,
error, time or bytes (as ms_exp.report ranks). A tie goes to the run that started first.

diff: only the config keys that differ between two runs, their final metrics side by side
with B - A, and their checkpoints.

push: copy runs into another store (the team's server), with their params, tags, every
metric value, artifacts, dataset inputs, logged models and parent/child links; experiments by
name; registered versions only with --register. The target's runs name its own run and
model ids, and remember the source run: a second push copies only what is new.

Every command reads the store ms_exp.run records in from this folder (sqlite:///mlflow.db
here) unless --tracking-uri names another; a store that does not exist is refused, not
created. In a notebook, ``ms_exp.runs.table(experiment=, sweep=, filter=, tracking_uri=,
metrics=)`` returns list's table as a pandas DataFrame.
"""

import argparse
import sys
from typing import List, Optional

from ms_exp.tracking.compare import (
    RUN_COLUMNS,
    CompareError,
    as_text,
    best_lines,
    best_run,
    config,
    job_runs,
    open_store,
    render,
    run_diff,
    runs_table,
    select_runs,
    table,
)
from ms_exp.tracking.list_columns import chosen_keys, fit, note, terminal_width, typed_keys
from ms_exp.tracking.push import push
from ms_exp.tracking.store import exit_if_damaged

PROG = "ms_exp.runs"
FORMATS = ("table", "csv", "json", "markdown")
__all__ = ["main", "table"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--tracking-uri", help="MLflow store of the runs (default: sqlite:///mlflow.db here)"
    )
    which = argparse.ArgumentParser(add_help=False)
    which.add_argument(
        "--experiment",
        metavar="NAME",
        help="only this experiment's runs (default: every experiment's)",
    )
    which.add_argument(
        "--sweep",
        metavar="ID|FOLDER",
        help="only the jobs of this sweep: its parent run id, its folder "
        "(multirun/<date>/<time>) or one of its job folders",
    )
    which.add_argument(
        "--filter",
        metavar="SEARCH",
        help="MLflow's search syntax, e.g. \"params.optimizer.lr = '0.1'\"",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser(
        "list",
        parents=[which, store],
        help="a table of runs",
        description="A table of runs, newest first.",
    )
    listing.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (the default), csv, json or markdown",
    )
    keys = listing.add_mutually_exclusive_group()
    keys.add_argument(
        "--columns",
        metavar="KEY,KEY",
        type=lambda text: [key.strip() for key in text.split(",") if key.strip()],
        help="the config keys to show (default: in a table, those that differ among the runs "
        "and most runs set, as many as fit; in csv and json, every key that differs)",
    )
    keys.add_argument(
        "--all-params", action="store_true", help="every config key of the listed runs"
    )
    best = commands.add_parser(
        "best",
        parents=[which, store],
        help="the best run by a metric",
        description="The finished run with the best metric.",
    )
    best.add_argument(
        "--metric",
        metavar="NAME",
        help="default: the sweep's objective, else eval/accuracy or eval/auc",
    )
    direction = best.add_mutually_exclusive_group()
    direction.add_argument(
        "--min", dest="lowest", action="store_const", const=True, help="lowest is best"
    )
    direction.add_argument(
        "--max", dest="lowest", action="store_const", const=False, help="highest is best"
    )
    diff = commands.add_parser(
        "diff",
        parents=[store],
        help="what differs between two runs",
        description="The config keys that differ between two runs, "
        "their final metrics and checkpoints.",
    )
    diff.add_argument("run_a", metavar="RUN_A", help="a job's run id")
    diff.add_argument("run_b", metavar="RUN_B", help="another job's run id")
    push = commands.add_parser(
        "push",
        parents=[store],
        help="copy runs into another store",
        description="Copy runs, with their metrics, artifacts and models, into another store "
        "(credentials from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD).",
    )
    push.add_argument("--to", required=True, metavar="URI", help="the store to copy into")
    push.add_argument("--experiment", metavar="NAME", help="only this experiment's runs")
    push.add_argument("--sweep", metavar="ID|FOLDER", help="only this sweep's runs")
    push.add_argument(
        "--run", nargs="+", action="extend", default=[], metavar="ID", help="only these runs"
    )
    push.add_argument(
        "--register", action="store_true", help="also the registered versions of their models"
    )
    push.add_argument("--dry-run", action="store_true", help="say what would be copied")
    for command, verb in ((listing, "show"), (diff, "compare")):
        command.add_argument(
            "--metric",
            action="append",
            metavar="NAME",
            help=f"a metric to {verb} (repeat for more; default: every eval/ metric and "
            "train/loss)",
        )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        client = open_store(args.tracking_uri)
        if args.command == "push":
            lines = push(
                client, args.to, args.experiment, args.sweep, args.run, args.register, args.dry_run
            )
            print("\n".join(lines))
            return 0
        if args.command == "diff":
            a, b = job_runs(client, [("RUN_A", args.run_a), ("RUN_B", args.run_b)])
            print(run_diff(client, a, b, args.metric))
            return 0
        selection = select_runs(client, args.experiment, args.sweep, args.filter)
        if args.command == "best":
            print("\n".join(best_lines(best_run(client, selection, args.metric, args.lowest))))
            return 0
        people = args.format in ("table", "markdown")
        configs = [config(run) for run in selection.runs]
        chosen = chosen_keys(configs, args.columns, args.all_params, fewest=people)
        frame = runs_table(selection.runs, args.metric, chosen.keys)
    except CompareError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # damage MLflow met after open_store's check
        return exit_if_damaged(PROG, "--tracking-uri", args.tracking_uri, error)
    if frame.empty and people:
        print(f"no runs in {selection.where}")
        return 0
    width = terminal_width()
    if args.format == "table":
        metrics = [c for c in frame.columns if c not in RUN_COLUMNS and c not in chosen.keys]
        typed = typed_keys(selection.runs)
        frame = frame[fit(as_text(frame), chosen, metrics, bool(args.metric), typed, width)]
    print(render(frame, args.format).rstrip("\n"))
    left_out = note(chosen, width)
    if left_out and args.format == "markdown":
        print()  # a line right below a markdown table would be read as one of its rows
    if left_out:
        print(left_out)
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
