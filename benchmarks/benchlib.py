"""What every benchmark here shares: the header of a results table (machine, versions,
command), median-and-spread cells, target verdicts, and timing a command from outside by
stamping the lines it prints."""

import argparse
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# MindSpore's LossMonitor line, printed by the plain scripts and by ms_exp alike.
LOSS_LINE = re.compile(rb"^epoch: (\d+) step: (\d+), loss is ")


def machine_line() -> str:
    import mindspore
    import mlflow

    return (
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, mindspore {mindspore.__version__}, mlflow "
        f"{mlflow.__version__}, CPU only."
    )


def command_line(script: str) -> str:
    """The command that produced a table, as the reader would type it."""
    return "Command: `" + " ".join([f"python benchmarks/{script}", *sys.argv[1:]]) + "`"


def spread(values: Sequence[float], fmt: str) -> str:
    """``median (min-max)`` of ``values``."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def verdict(values: Sequence[float], target: float) -> str:
    """Met or missed by the median, and whether the rounds agree: when a quarter or more of
    them fall on the other side of the target, the median alone does not settle it."""
    met = statistics.median(values) <= target
    text = "met" if met else "**missed**"
    other_side = sum((v > target) if met else (v <= target) for v in values)
    if other_side >= max(2, len(values) / 4):
        text += (
            f" ({other_side} of {len(values)} rounds on the other side: not resolved "
            "by this measurement)"
        )
    return text


def stamped_lines(
    line: List[str],
    cwd: Path,
    pattern: re.Pattern = LOSS_LINE,
    env: Optional[Dict[str, str]] = None,
) -> Dict[str, object]:
    """Run ``line`` and stamp every stdout line matching ``pattern`` when it arrives.

    Returns ``{"start": t0, "stamps": [(match, t), ...], "end": t}`` (perf_counter
    seconds); exits the benchmark with the command when it fails."""
    env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(
        line, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    stamps = []
    for raw in process.stdout:
        match = pattern.match(raw)
        if match:
            stamps.append((match, time.perf_counter()))
    if process.wait() != 0:
        sys.exit(f"failed ({process.returncode}): {' '.join(line)}")
    return {"start": start, "stamps": stamps, "end": time.perf_counter()}


def step_gaps(stamps, from_epoch: int = 2) -> List[float]:
    """Seconds between consecutive loss lines of one epoch, epochs ``from_epoch`` on (gaps
    across an epoch's end hold checkpointing and evaluation: not steps)."""
    return [
        later - earlier
        for (m1, earlier), (m2, later) in zip(stamps, stamps[1:])
        if int(m1.group(1)) == int(m2.group(1)) >= from_epoch
    ]


def boxplot(axis, groups: Dict[str, Sequence[float]], ylabel: str) -> None:
    axis.boxplot([list(v) for v in groups.values()], tick_labels=list(groups))
    axis.set_ylabel(ylabel)
    axis.grid(True, axis="y", alpha=0.3)


def mean_sd(values: Iterable[float]) -> str:
    """``mean ± sd`` of ``values`` (sd 0 for a single value)."""
    values = list(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {sd:.4f}"


def seed_table(rows, arms: Sequence[str], headers: Sequence[str]) -> List[str]:
    """A markdown table of each arm's value per seed, then their mean ± sd."""
    lines = ["| seed | " + " | ".join(headers) + " |", "|---" * (len(arms) + 1) + "|"]
    lines += [
        f"| {row['seed']} | " + " | ".join(f"{row[arm]:.4f}" for arm in arms) + " |" for row in rows
    ]
    lines.append(
        "| mean ± sd | " + " | ".join(mean_sd(row[arm] for row in rows) for arm in arms) + " |"
    )
    return lines


def arms_per_seed(axis, rows, arms: Sequence[str], labels: Sequence[str]) -> None:
    """Each arm's value per seed as dots, linked across arms per seed, and its mean ± sd."""
    for index, arm in enumerate(arms):
        values = [row[arm] for row in rows]
        axis.scatter([index] * len(values), values, alpha=0.6)
        axis.errorbar(
            index + 0.15,
            statistics.mean(values),
            yerr=statistics.stdev(values) if len(values) > 1 else 0,
            fmt="o",
            color="black",
            capsize=4,
        )
    for row in rows:
        axis.plot(range(len(arms)), [row[arm] for arm in arms], color="grey", alpha=0.3)
    axis.set_xticks(range(len(arms)), labels, fontsize=8)
    axis.set_ylabel("held-out accuracy")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def row(*cells: str) -> str:
    """One line of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def store_uri(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'mlflow.db'}"


def make_store_template(scratch: Path) -> Path:
    """An empty, migrated MLflow store to copy into every working directory."""
    from mlflow import MlflowClient

    template = scratch / "template"
    template.mkdir()
    MlflowClient(store_uri(template)).search_experiments()  # creates and migrates it
    return template / "mlflow.db"


def workdir_with_store(template: Path, workdir: Path) -> Path:
    workdir.mkdir(parents=True)
    shutil.copy(template, workdir / "mlflow.db")
    return workdir


def rounds_parser(doc: str, epochs: int) -> argparse.ArgumentParser:
    """``--rounds`` and ``--epochs``, the options every timing benchmark takes."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=epochs)
    return parser


def seeds_parser(doc: str, seeds: Sequence[int]) -> argparse.ArgumentParser:
    """``--seeds`` and ``--workdir``, the options of the benchmarks that compare accuracy."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where runs and mlflow.db go (default: a temporary folder)",
    )
    return parser


def runs_folder(args, prefix: str) -> Path:
    """``--workdir``, or a new temporary folder; said on the console, as runs go there."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"runs and MLflow store in {workdir}", flush=True)
    return workdir


def measure_and_write(name: str, args, measure: Callable, table: Callable, plot: Callable) -> None:
    """``measure(args, scratch)`` in a scratch folder, then write results/<name>.md from
    ``table(results, args)`` and results/<name>.png with ``plot(results, args, path)``, and
    print the table."""
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"ms_exp_bench_{name}_") as scratch:
        results = measure(args, Path(scratch))
    text = table(results, args)
    (RESULTS / f"{name}.md").write_text(text)
    plot(results, args, RESULTS / f"{name}.png")
    print(text)


def ms_exp_job(workdir: Path, *overrides: str) -> str:
    """Run ``python -m ms_exp.run`` in ``workdir``; returns the MLflow run id it printed
    (with ``-m`` first, the sweep's parent run). A failed job stops the benchmark with its
    output."""
    command = [sys.executable, "-m", "ms_exp.run", *overrides, "trainer.progress_bar=never"]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    for start in ("MLflow parent run ", "MLflow run "):  # a sweep prints its jobs' runs too
        for line in lines:
            if line.startswith(start):
                return line[len(start) :].split()[0]
    sys.exit(f"no 'MLflow run <id>' line in the output of {' '.join(command)}")


def accuracy_at(client, run_id: str, step: Optional[int] = None) -> float:
    """A run's ``eval/accuracy`` at ``step`` (the last one when None), from MLflow."""
    history = client.get_metric_history(run_id, "eval/accuracy")
    if step is None:
        return max(history, key=lambda metric: metric.step).value
    return next(m.value for m in history if m.step == step)
