"""``python -m ms_exp.tracking.upload RUN_DIR [--tracking-uri URI]``: deliver the MLflow calls
a job kept in ``RUN_DIR/mlflow-offline`` because its tracking server could not be reached.

A journal is removed only once all of it is in the store, and an upload cut short goes on
where it stopped, so running the command twice never records anything twice.
"""

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from ms_exp.tracking.journal import OFFLINE_DIR, journals_in
from ms_exp.tracking.store import password_refusal


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ms_exp.tracking.upload", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument(
        "--tracking-uri", help="the store to deliver to (default: the job's tracking.uri)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    refused = password_refusal("--tracking-uri", args.tracking_uri)
    if refused:
        print(f"ms_exp: error: {refused}", file=sys.stderr)
        return 2
    journals = journals_in(args.run_dir)
    if not journals:
        print(
            f"ms_exp: error: RUN_DIR={args.run_dir}: nothing to upload (no "
            f"{OFFLINE_DIR}/*.jsonl journal there)",
            file=sys.stderr,
        )
        return 2
    from ms_exp.tracking.recorder import StoreUnreachable, replay

    for journal in journals:
        try:
            delivered = replay(journal, args.tracking_uri)
        except StoreUnreachable as error:
            print(
                f"ms_exp: error: {journal}: the tracking server is still unreachable "
                f"({error}); nothing lost, run this command again later",
                file=sys.stderr,
            )
            return 1
        except ValueError as error:
            print(f"ms_exp: error: {error}", file=sys.stderr)
            return 2
        print(f"delivered to {delivered}", flush=True)
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
