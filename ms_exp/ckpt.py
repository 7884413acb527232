"""``python -m ms_exp.ckpt``: merge or re-slice sliced checkpoints.

    python -m ms_exp.ckpt merge SOURCE [--strategy STRATEGY] [--prefix checkpoint]
        [--output DIR] [--tracking-uri URI]
    python -m ms_exp.ckpt transform CHECKPOINT_DIR --strategy SRC --dst-strategy DST --output DIR

SOURCE is a run directory, an MLflow run id or a folder of ``rank_<r>/`` folders; the work
is ms_exp/checkpoint/transform.py.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import List, NoReturn, Optional

from ms_exp.checkpoint.transform import (
    PROG,
    CkptError,
    merge_checkpoints,
    merge_shares,
    run_sources,
    transform,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, like every other ms_exp.ckpt error
        sys.stderr.write(f"{PROG}: error: {message} (see --help)\n")
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Merge or re-slice sliced MindSpore checkpoints "
        "with mindspore.parallel.transform_checkpoints.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    merge = commands.add_parser("merge", help="merge every rank's slices into one checkpoint")
    merge.add_argument(
        "checkpoint_dir",
        metavar="SOURCE",
        help="a run directory, an MLflow run id, or a folder holding rank_0/ ... rank_<N-1>/",
    )
    merge.add_argument(
        "--strategy", help="strategy file the slices were saved with (default: the run's)"
    )
    merge.add_argument(
        "--tracking-uri", help="MLflow store of a run id (default: sqlite:///mlflow.db here)"
    )
    merge.add_argument(
        "--prefix",
        help="checkpoint prefix: selects <prefix>*.ckpt in each rank folder and names the output "
        "<prefix><rank>.ckpt (default: the run's, else checkpoint)",
    )
    merge.add_argument("--output", help="output folder (default: <checkpoint folder>/merged)")
    move = commands.add_parser(
        "transform", help="re-slice N ranks into the M ranks of another strategy"
    )
    move.add_argument("checkpoint_dir", help="folder holding rank_0/ ... rank_<N-1>/")
    move.add_argument("--strategy", required=True, help="strategy file the slices were saved with")
    move.add_argument("--dst-strategy", required=True, help="strategy file to re-slice for")
    move.add_argument(
        "--output", required=True, help="output folder (gets rank_0/ ... rank_<M-1>/)"
    )
    move.add_argument(
        "--prefix", default="checkpoint", help="checkpoint prefix (default: checkpoint)"
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m ms_exp.ckpt``; SIGTERM ends it as Ctrl-C does: the merge's scratch
    folders (beside ``--output`` and in the temporary folder) removed, exit status 130."""
    from ms_exp.tracking.lifecycle import interruptible

    # MindSpore's INFO/WARNING logs would bury the result: GLOG_v for a MindSpore imported
    # later, its logger's level for one imported already (the command called in process).
    os.environ.setdefault("GLOG_v", "3")
    if "mindspore" not in sys.modules:
        return interruptible(lambda: _ckpt_command(argv))
    from ms_exp.preflight.trainer import mindspore_warnings_off

    with mindspore_warnings_off():
        return interruptible(lambda: _ckpt_command(argv))


def _ckpt_command(argv: Optional[List[str]]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "merge":
            from ms_exp.checkpoint.scratch import scratch_folder
            from ms_exp.tracking.store import password_refusal

            refused = password_refusal("--tracking-uri", args.tracking_uri)
            if refused:
                raise CkptError(refused)
            with scratch_folder("ms_exp_ckpt_") as workdir:
                folder, strategy, prefix, shares = run_sources(
                    args.checkpoint_dir, Path(workdir), args.tracking_uri
                )
                output = args.output or (
                    folder / "merged"
                    if Path(args.checkpoint_dir).is_dir()
                    else Path("merged") / args.checkpoint_dir
                )
                if shares and not args.strategy:  # checkpoint.remove_redundancy
                    print(merge_shares(folder, output, args.prefix or prefix, report=print))
                    return 0
                strategy = args.strategy or strategy
                if strategy is None:
                    raise CkptError(
                        f"{args.checkpoint_dir}: no strategy file known; pass --strategy"
                    )
                print(
                    merge_checkpoints(folder, strategy, output, args.prefix or prefix, report=print)
                )
        else:
            print(
                transform(
                    args.checkpoint_dir, args.strategy, args.dst_strategy, args.output, args.prefix
                )
            )
    except CkptError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return error.exit_code
    except Exception as error:  # a run's store that MLflow found damaged
        from ms_exp.tracking.store import exit_if_damaged

        return exit_if_damaged(PROG, "--tracking-uri", getattr(args, "tracking_uri", None), error)
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
