"""Make the pictures in docs/images/ again, from real runs.

    .venv/bin/python tools/docs_images.py                 # all three, about 4 minutes on 2 cores
    .venv/bin/python tools/docs_images.py --only sweep    # the two sweep-report plots
    .venv/bin/python tools/docs_images.py --only ui       # the MLflow UI screenshot

sweep: in a scratch folder (``--workdir``, default a new temporary one, removed afterwards
unless ``--keep``), so that its MLflow store and outputs stay out of the checkout, it runs

    python -m ms_exp.run +experiment=dim_reduce_stage_one
    python -m ms_exp.run -m +experiment=dim_reduce_stage_two boost.rho=0.4,0.55,0.7

and copies two plots of that sweep's report (artifacts ``report/`` of its parent run) into
docs/images/: ``eval_accuracy_vs_boost.rho.png`` as ``sweep_eval_accuracy_vs_rho.png`` and
``train_loss.png`` as ``sweep_train_loss.png``. ``--reuse`` takes the newest sweep already
in ``--workdir`` instead of running the two commands.

ui: copies the browser test's screenshot, test-artifacts/mlflow_ui_sweep.png (the runs
table of a two-job sweep in the real MLflow UI, the parent expanded, ``optimizer.lr`` and
``eval/accuracy`` as columns), to docs/images/mlflow_ui_sweep.png; when it is missing, or
with ``--rerun-ui``, it runs ``pytest tests/test_ui.py`` first (a few minutes; it needs
Debian's chromium at /usr/bin/chromium).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
SCREENSHOT = ROOT / "test-artifacts" / "mlflow_ui_sweep.png"
CHROMIUM = Path("/usr/bin/chromium")

STAGE_ONE = ["+experiment=dim_reduce_stage_one"]
STAGE_TWO = ["-m", "+experiment=dim_reduce_stage_two", "boost.rho=0.4,0.55,0.7"]
# Report file -> picture in docs/images.
SWEEP_PLOTS = {
    "eval_accuracy_vs_boost.rho.png": "sweep_eval_accuracy_vs_rho.png",
    "train_loss.png": "sweep_train_loss.png",
}

_started = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - _started:5.0f} s] {message}", flush=True)


def run_logged(command: List[str], cwd: Path, log: Path) -> None:
    """Run ``command`` with its output in ``log``; on failure, show the log's end and stop."""
    say(
        f"running {' '.join(command[1:] if command[0] == sys.executable else command)}"
        f"  (in {cwd}; output in {log})"
    )
    with open(log, "wb") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)
        sys.exit(f"failed (exit status {done.returncode}): {' '.join(command)}; see {log}")
    say("  done")


def newest_sweep(workdir: Path) -> str:
    """The run id of the newest sweep parent run in ``workdir``'s MLflow store."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = client.search_runs(
        experiments,
        filter_string="tags.`ms_exp.sweep` = 'true'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not parents:
        sys.exit(f"no sweep in {workdir / 'mlflow.db'}")
    return parents[0].info.run_id


def sweep_plots(workdir: Path, reuse: bool) -> None:
    if not reuse:
        run_logged(
            [sys.executable, "-m", "ms_exp.run", *STAGE_ONE], workdir, workdir / "stage_one.log"
        )
        run_logged(
            [sys.executable, "-m", "ms_exp.run", *STAGE_TWO], workdir, workdir / "stage_two.log"
        )
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    parent = newest_sweep(workdir)
    say(f"sweep parent run {parent}: fetching its report/")
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    report = Path(client.download_artifacts(parent, "report", str(workdir / "report_copy")))
    for source, target in SWEEP_PLOTS.items():
        if not (report / source).is_file():
            found = ", ".join(sorted(p.name for p in report.iterdir()))
            sys.exit(f"the sweep's report has no {source} (it has: {found})")
        shutil.copyfile(report / source, IMAGES / target)
        say(f"wrote docs/images/{target} (from report/{source})")


def ui_screenshot(rerun: bool) -> None:
    if rerun or not SCREENSHOT.is_file():
        if not CHROMIUM.is_file():
            sys.exit(
                f"{CHROMIUM} is missing: apt-get install -y --no-install-recommends "
                "chromium, then run this again"
            )
        SCREENSHOT.unlink(missing_ok=True)
        log = Path(tempfile.gettempdir()) / "docs_images_test_ui.log"
        run_logged(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_ui.py"],
            ROOT,
            log,
        )
        if not SCREENSHOT.is_file():
            sys.exit(f"tests/test_ui.py passed but left no {SCREENSHOT.relative_to(ROOT)}")
    else:
        say(f"using the existing {SCREENSHOT.relative_to(ROOT)} (--rerun-ui to take it again)")
    shutil.copyfile(SCREENSHOT, IMAGES / "mlflow_ui_sweep.png")
    say("wrote docs/images/mlflow_ui_sweep.png")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("sweep", "ui"), help="make only these pictures")
    parser.add_argument(
        "--workdir", type=Path, help="scratch folder of the sweep (default: a new temporary one)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary scratch folder (a --workdir is always kept)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="use the newest sweep already in --workdir instead of running one",
    )
    parser.add_argument(
        "--rerun-ui",
        action="store_true",
        help="run tests/test_ui.py even when its screenshot exists",
    )
    args = parser.parse_args()
    if args.reuse and not args.workdir:
        parser.error("--reuse needs --workdir")
    IMAGES.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "sweep"):
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="docs_images_"))
        workdir.mkdir(parents=True, exist_ok=True)
        sweep_plots(workdir.resolve(), args.reuse)  # a failure keeps the folder and its logs
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.only in (None, "ui"):
        ui_screenshot(args.rerun_ui)


if __name__ == "__main__":
    main()
