"""Run every benchmark, then put each one's results table into its page of the docs.

Each benchmark writes ``benchmarks/results/<name>.md`` (and a plot, ``<name>.png``); its page,
``docs/benchmarks/<name>.md``, holds that table between ``<!-- results: <name> -->`` and
``<!-- /results: <name> -->``, and this script replaces what is between them, so the docs
always show what the scripts last measured. A guide that quotes a benchmark's table holds
the same block (``docs/guides/*.md``) and is filled alike. The pages embed the plots through
``docs/benchmarks/results``, a link to ``benchmarks/results``.

    python benchmarks/run_all.py                      # all of them, about 75 minutes on 2 cores
    python benchmarks/run_all.py --only overhead checkpoint_cost
    python benchmarks/run_all.py --docs-only          # run nothing; copy the existing results in

Every page is checked for its marked block before anything runs; a page without one stops
the script with a one-line message. Pages are written only after every benchmark asked for
has succeeded.
"""

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import RESULTS, ROOT

# Name -> script, in the order they run (each with its own defaults).
BENCHMARKS = {
    "overhead": "overhead.py",
    "checkpoint_cost": "checkpoint_cost.py",
    "sweep_throughput": "sweep_throughput.py",
    "dp_scaling": "dp_scaling.py",
    "wide_deep_tables": "wide_deep_tables.py",
    "dim_reduce": "dim_reduce.py",
    "dim_reduce_tutorial": "dim_reduce_tutorial.py",
    "optuna_pruning": "optuna_pruning.py",
    "loops": "loops.py",
    "system_metrics": "system_metrics_overhead.py",
    "grad_norm": "grad_norm_cost.py",
    "image_check": "image_check.py",
}
DOCS = ROOT / "docs" / "benchmarks"
GUIDES = ROOT / "docs" / "guides"


def page(name: str, docs: Path = DOCS) -> Path:
    return docs / f"{name}.md"


def marked_block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results: {name} -->\n).*?(<!-- /results: {name} -->)", re.S)


def check_page(name: str, docs: Path = DOCS) -> str:
    """The text of ``name``'s page; exits with one line when it is missing or has no block."""
    path = page(name, docs)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.is_file():
        sys.exit(
            f"{shown} does not exist; it must hold a '<!-- results: {name} -->' ... "
            f"'<!-- /results: {name} -->' block"
        )
    text = path.read_text()
    if not marked_block(name).search(text):
        sys.exit(f"{shown} has no '<!-- results: {name} -->' ... '<!-- /results: {name} -->' block")
    return text


def splice(text: str, name: str, results: Path = RESULTS) -> str:
    """``text`` with the marked block of ``name`` replaced by its results table."""
    pattern = marked_block(name)
    if not pattern.search(text):
        sys.exit(f"no '<!-- results: {name} -->' ... '<!-- /results: {name} -->' block")
    table_file = results / f"{name}.md"
    if not table_file.is_file():
        sys.exit(f"{table_file} does not exist; run python benchmarks/{BENCHMARKS[name]}")
    table = table_file.read_text().rstrip("\n") + "\n"
    return pattern.sub(
        lambda match: match.group(1) + "\n" + table + "\n" + match.group(2), text, count=1
    )


def run(name: str) -> None:
    started = time.monotonic()
    print(f"== {name}: python benchmarks/{BENCHMARKS[name]}", flush=True)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / BENCHMARKS[name])], cwd=ROOT)
    if done.returncode != 0:
        sys.exit(
            f"{name} failed (exit status {done.returncode}); docs/benchmarks left as they were"
        )
    print(f"== {name}: {time.monotonic() - started:.0f} s", flush=True)


def quoting_guides(name: str, guides: Path = GUIDES) -> List[Path]:
    """The guides that hold ``name``'s marked block."""
    return sorted(
        path for path in guides.glob("*.md") if marked_block(name).search(path.read_text())
    )


def update_pages(
    names, docs: Path = DOCS, results: Path = RESULTS, guides: Path = GUIDES
) -> Dict[str, bool]:
    """Splice each benchmark's results into its page and the guides that quote it;
    ``{name: whether a page changed}``. Every page is read and spliced before any is
    written."""
    texts = {}
    for name in names:
        check_page(name, docs)
        for path in [page(name, docs), *quoting_guides(name, guides)]:
            text = texts.get(path, path.read_text())
            texts[path] = text
    new = dict(texts)
    for name in names:
        for path in [page(name, docs), *quoting_guides(name, guides)]:
            new[path] = splice(new[path], name, results)
    for path, text in new.items():
        if text != texts[path]:
            path.write_text(text)
    return {
        name: any(
            new[path] != texts[path] for path in [page(name, docs), *quoting_guides(name, guides)]
        )
        for name in names
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run these only ({', '.join(BENCHMARKS)})",
    )
    parser.add_argument(
        "--docs-only",
        action="store_true",
        help="run nothing; copy benchmarks/results/<name>.md into docs/benchmarks/<name>.md",
    )
    args = parser.parse_args()
    names = args.only or list(BENCHMARKS)
    for name in names:  # before an hour of benchmarks, not after
        check_page(name)
    if not args.docs_only:
        for name in names:
            run(name)
    changed = update_pages(names)
    for name in names:
        where = ", ".join(
            str(path.relative_to(ROOT)) for path in [page(name), *quoting_guides(name)]
        )
        print(f"{name} ({where}): {'updated' if changed[name] else 'already up to date'}")


if __name__ == "__main__":
    main()
