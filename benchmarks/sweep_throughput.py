"""Sweep throughput: the wall time of a sweep (8 jobs by default) run by Hydra's basic
launcher (one job after another, all in one process), by the concurrent launcher
(conf/hydra/launcher/concurrent.yaml: joblib with 2 loky worker processes), by the pool
launcher (conf/hydra/launcher/pool.yaml: a worker process per core, each job pinned to its
core), and by hand (a command per job).

The sweep is the default digits job over ``--jobs`` learning rates (8: 0.01 to 0.08),
``--epochs`` epochs per job:

  sequential    python -m ms_exp.run -m trainer.epochs=2 trainer.progress_bar=never
                    optimizer.lr=0.01,0.02,0.03,0.04,0.05,0.06,0.07,0.08
  concurrent    python -m ms_exp.run -m hydra/launcher=concurrent <the same overrides>
  concurrent_4  python -m ms_exp.run -m hydra/launcher=concurrent hydra.launcher.n_jobs=4 ...
  pool          python -m ms_exp.run -m hydra/launcher=pool <the same overrides>
  loop          for lr in 0.01 ... 0.08: python -m ms_exp.run trainer.epochs=2 ... optimizer.lr=$lr

All but concurrent_4 run by default; choose with --arms.

Rounds are interleaved (every arm once per round, the arms' order rotated each round).
Every command runs in a fresh working directory holding a copy of one MLflow store made
before the first round, so no arm pays the store's creation (a few seconds of schema
migrations). Wall time: from starting the command (loop: the first) to its exit (loop: the
last). After each command the store must hold a FINISHED run for each job (and for a sweep
their FINISHED parent), or the benchmark stops: a broken sweep is never timed.

Where the time goes: the CPU seconds of all the arm's processes (getrusage of the waited-for
children, this process adopting their orphans) against its wall time, and from the jobs'
MLflow runs' start and end times the median job (its run open to closed), the seconds no
job's run was open (interpreters and imports, composing, each job until its run exists, the
sweep's parent run and report), and how many jobs ran at once on average. The md turns
these into the reasons a concurrent arm's speedup falls short of the core count.

    python benchmarks/sweep_throughput.py       # 5 rounds, about 13 minutes on 2 cores
    python benchmarks/sweep_throughput.py --rounds 7 --arms sequential concurrent concurrent_4

Writes benchmarks/results/sweep_throughput.md and sweep_throughput.png.
"""

import argparse
import ctypes
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import (
    boxplot,
    command_line,
    machine_line,
    make_store_template,
    measure_and_write,
    pyplot,
    rounds_parser,
    row,
    spread,
    stamped_lines,
    store_uri,
    workdir_with_store,
)

JOBS = 8
EXPERIMENT = "ms_exp"
# Overrides before the sweep's own: Hydra's launcher choice, as the README writes it.
SWEEPS = {
    "sequential": [],
    "concurrent": ["hydra/launcher=concurrent"],
    "concurrent_4": ["hydra/launcher=concurrent", "hydra.launcher.n_jobs=4"],
    "pool": ["hydra/launcher=pool"],
}
ARMS = (*SWEEPS, "loop")
# n_jobs=4 on 2 cores only oversubscribes them further (0.76x sequential in a trial round).
DEFAULT_ARMS = ("sequential", "concurrent", "pool", "loop")


def job_overrides(epochs: int) -> List[str]:
    return [f"trainer.epochs={epochs}", "trainer.progress_bar=never"]


def rates(jobs: int) -> List[str]:
    return [f"{0.01 * (i + 1):.2f}" for i in range(jobs)]


def commands(arm: str, args: argparse.Namespace) -> List[List[str]]:
    """The command lines of one arm: one sweep, or one command per job for ``loop``."""
    run, lrs, job = (
        [sys.executable, "-m", "ms_exp.run"],
        rates(args.jobs),
        job_overrides(args.epochs),
    )
    if arm == "loop":
        return [[*run, *job, f"optimizer.lr={lr}"] for lr in lrs]
    return [[*run, "-m", *SWEEPS[arm], *job, "optimizer.lr=" + ",".join(lrs)]]


def finished_runs(workdir: Path, arm: str, count: int):
    """The jobs' runs in the store; stops the benchmark unless the arm's ``count`` jobs
    (and a sweep's parent) all FINISHED."""
    from mlflow import MlflowClient

    client = MlflowClient(store_uri(workdir))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    jobs = [r for r in runs if r not in parents]
    problems = [f"{r.info.run_name}: {r.info.status}" for r in runs if r.info.status != "FINISHED"]
    if len(jobs) != count:
        problems.append(f"{len(jobs)} job runs, expected {count}")
    if arm != "loop":
        if len(parents) != 1:
            problems.append(f"{len(parents)} sweep parent runs, expected 1")
        orphans = [
            r.info.run_name
            for r in jobs
            if parents and r.data.tags.get("mlflow.parentRunId") != parents[0].info.run_id
        ]
        if orphans:
            problems.append(f"runs not under the sweep's parent: {orphans}")
    if problems:
        sys.exit(f"{arm}: broken sweep in {workdir}: " + "; ".join(problems))
    return jobs


def time_spent(jobs, start: float, end: float) -> Dict[str, float]:
    """Job time, time with no job's run open, and jobs at once, from the runs' times
    (``start``/``end``: the command's, in epoch seconds)."""
    spans = sorted((r.info.start_time / 1000, r.info.end_time / 1000) for r in jobs)
    covered, reach = 0.0, start
    for open_, close in spans:  # length of the union of the runs' intervals
        covered += max(0.0, close - max(open_, reach))
        reach = max(reach, close)
    durations = [close - open_ for open_, close in spans]
    return {
        "job_s": statistics.median(durations),
        "idle_s": (end - start) - covered,
        "at_once": sum(durations) / covered,
    }


def adopt_orphans() -> None:
    """Make this process the parent of every process its commands leave behind (Linux's
    child subreaper): a process's last MLflow sidecar outlives it, and a process nobody
    waits for is missing from getrusage's count."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def children_cpu_s() -> float:
    """CPU seconds of every process this one has waited for, and of the processes those
    waited for (the loky and pool workers, each job's helper processes), once the adopted
    orphans have ended."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_arm(arm: str, args: argparse.Namespace, workdir: Path) -> Dict[str, float]:
    """Run the arm's commands one after another; wall seconds and where they went."""
    cpu, start_epoch = children_cpu_s(), time.time()
    runs = [stamped_lines(line, workdir) for line in commands(arm, args)]
    wall = runs[-1]["end"] - runs[0]["start"]
    cpu = children_cpu_s() - cpu
    jobs = finished_runs(workdir, arm, args.jobs)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "busy": cpu / wall,
        **time_spent(jobs, start_epoch, start_epoch + wall),
    }


def measure(args, scratch: Path) -> Dict[str, List[Dict[str, float]]]:
    template = make_store_template(scratch)
    results = {arm: [] for arm in args.arms}
    for round_ in range(args.rounds):
        shift = round_ % len(args.arms)
        for arm in args.arms[shift:] + args.arms[:shift]:
            workdir = workdir_with_store(template, scratch / f"{round_}_{arm}")
            run = timed_arm(arm, args, workdir)
            results[arm].append(run)
            print(
                f"round {round_ + 1}/{args.rounds} {arm:<12} {run['wall_s']:6.1f} s, "
                f"{run['cpu_s']:5.1f} CPU s (job {run['job_s']:.1f} s, no job running "
                f"{run['idle_s']:.1f} s, {run['at_once']:.2f} jobs at once)",
                flush=True,
            )
            shutil.rmtree(workdir)  # checkpoints and artifacts of 8 jobs: not kept
    return results


def table(results, args) -> str:
    def cells(arm, key, fmt):
        return spread([r[key] for r in results[arm]], fmt)

    base = results.get("sequential")
    lines = [
        f"{args.jobs}-job sweep of the default job (digits, batch 32, {args.epochs} epochs of "
        f"44 steps, optimizer.lr={','.join(rates(args.jobs))}), {args.rounds} interleaved rounds; "
        "median (min-max).",
        "",
        machine_line(),
        "",
        command_line("sweep_throughput.py"),
        "",
        row("arm", "wall (s)", "jobs per minute", "speedup vs sequential"),
        row(*["---"] * 4),
    ]
    for arm, runs in results.items():
        per_minute = [args.jobs * 60 / r["wall_s"] for r in runs]
        # Within a round: the arms of one round ran back to back.
        speedup = (
            spread([b["wall_s"] / r["wall_s"] for b, r in zip(base, runs)], ".2f") if base else "-"
        )
        lines.append(row(arm, cells(arm, "wall_s", ".1f"), spread(per_minute, ".1f"), speedup))
    lines += [
        "",
        "Where the time goes:",
        "",
        row(
            "arm",
            "CPU (s)",
            "cores busy",
            "one job's run (s)",
            "no job running (s)",
            "jobs at once",
        ),
        row(*["---"] * 6),
    ]
    lines += [
        row(
            arm,
            cells(arm, "cpu_s", ".1f"),
            cells(arm, "busy", ".2f"),
            cells(arm, "job_s", ".2f"),
            cells(arm, "idle_s", ".1f"),
            cells(arm, "at_once", ".2f"),
        )
        for arm in results
    ]
    lines += [
        "",
        "CPU: user and system seconds of every process the arm started (the "
        "launcher's workers and the jobs' helper processes included); cores busy: CPU "
        "over wall. One job's run: a job's MLflow run from open to closed (training, "
        "evaluation, checkpoints, artifacts). No job running: wall time with no job's "
        "run open (interpreters starting and importing, composing, each job until its "
        "run exists, the sweep's parent run and report). Jobs at once: the jobs' run "
        "time summed over the time any was open.",
    ]
    lines += [
        where_time_goes(results, arm)
        for arm in results
        if arm.startswith(("concurrent", "pool")) and "sequential" in results
    ]
    return "\n".join(lines) + "\n"


def where_time_goes(results, arm: str) -> str:
    """Why a concurrent arm is not twice as fast, from the measurements: wall = CPU / cores
    busy, so within a round the speedup is (more cores busy) x (less CPU work)."""
    pairs = list(zip(results["sequential"], results[arm]))

    def median(values):
        return statistics.median(list(values))

    busy = median(r["busy"] / s["busy"] for s, r in pairs)
    work = median(s["cpu_s"] / r["cpu_s"] for s, r in pairs)
    seq, own = (
        {key: median(r[key] for r in results[name]) for key in results[name][0]}
        for name in ("sequential", arm)
    )
    return (
        f"\n{arm}: {busy:.2f}x the cores busy ({own['busy']:.2f} of {os.cpu_count()} "
        f"against {seq['busy']:.2f}), times {work:.2f} for the CPU work ({own['cpu_s']:.0f} "
        f"CPU s against {seq['cpu_s']:.0f}; medians over rounds). Each job's run lasted "
        f"{own['job_s']:.2f} s against {seq['job_s']:.2f} s one at a time, with "
        f"{own['at_once']:.2f} jobs at once, and for {own['idle_s']:.1f} s no job's run was "
        f"open against {seq['idle_s']:.1f} s."
    )


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    boxplot(
        axis,
        {arm: [r["wall_s"] for r in runs] for arm, runs in results.items()},
        f"wall time of {args.jobs} jobs (s)",
    )
    axis.set_ylim(bottom=0)  # a speedup reads as a ratio of heights
    figure.suptitle(f"{args.jobs}-job sweep on {os.cpu_count()} cores: launchers compared")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=2)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(DEFAULT_ARMS))
    parser.add_argument("--jobs", type=int, default=JOBS)
    args = parser.parse_args()
    if min(args.rounds, args.epochs, args.jobs) < 1:
        parser.error("--rounds, --epochs and --jobs must be >= 1")
    adopt_orphans()
    measure_and_write("sweep_throughput", args, measure, table, plot)


if __name__ == "__main__":
    main()
