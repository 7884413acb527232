"""Run every benchmark, then put each one's results table into README.md.

Each benchmark writes ``benchmarks/results/<name>.md`` (and a plot); the README holds that
table between ``<!-- results: <name> -->`` and ``<!-- /results: <name> -->``, and this script
replaces what is between them, so the README always shows what the scripts last measured.

    python benchmarks/run_all.py                      # all of them, about 50 minutes on 2 cores
    python benchmarks/run_all.py --only overhead checkpoint_cost
    python benchmarks/run_all.py --readme-only        # only copy the existing results in
"""
import argparse
import re
import subprocess
import sys
import time

from benchlib import RESULTS, ROOT

# Name -> script, in the order they run (each with its own defaults).
BENCHMARKS = {
    "overhead": "overhead.py",
    "checkpoint_cost": "checkpoint_cost.py",
    "sweep_throughput": "sweep_throughput.py",
    "dp_scaling": "dp_scaling.py",
    "wide_deep_tables": "wide_deep_tables.py",
    "dim_reduce": "dim_reduce.py",
    "loops": "loops.py",
}
README = ROOT / "README.md"


def marked_block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results: {name} -->\n).*?(<!-- /results: {name} -->)", re.S)


def splice(readme: str, name: str) -> str:
    """``readme`` with the block of ``name`` replaced by its results table."""
    pattern = marked_block(name)
    if not pattern.search(readme):
        sys.exit(f"README.md has no '<!-- results: {name} -->' ... "
                 f"'<!-- /results: {name} -->' block")
    table = (RESULTS / f"{name}.md").read_text().rstrip("\n") + "\n"
    return pattern.sub(lambda match: match.group(1) + "\n" + table + "\n" + match.group(2),
                       readme, count=1)


def run(name: str) -> None:
    started = time.monotonic()
    print(f"== {name}: python benchmarks/{BENCHMARKS[name]}", flush=True)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / BENCHMARKS[name])],
                          cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"{name} failed (exit status {done.returncode}); README.md left as it was")
    print(f"== {name}: {time.monotonic() - started:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME",
                        help=f"run these only ({', '.join(BENCHMARKS)})")
    parser.add_argument("--readme-only", action="store_true",
                        help="run nothing; copy benchmarks/results/*.md into README.md")
    args = parser.parse_args()
    names = args.only or list(BENCHMARKS)
    if not args.readme_only:
        for name in names:
            run(name)
    readme = README.read_text()
    for name in names:
        readme = splice(readme, name)
    # Written whole at the end: a failed benchmark leaves README.md untouched.
    README.write_text(readme)
    print(f"README.md: {', '.join(names)} tables updated")


if __name__ == "__main__":
    main()
