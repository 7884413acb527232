"""Data-parallel scaling on CPU: samples per second with 1 and 2 msrun workers against one
process, and the launch overhead of msrun itself.

Two jobs, each run three ways, ``--epochs`` epochs, every step logged:

  stand_alone   python -m ms_exp.run <job> trainer.epochs=2 trainer.loss_print_interval=1
                    trainer.progress_bar=never
  dp_1          ... parallel=data parallel.device_num=1 parallel.launcher.master_port=<free>
  dp_2          ... parallel=data parallel.device_num=2 parallel.launcher.master_port=<free>

  digits        the default job: digits, the tutorials' Network (hidden 512), batch 32
  wide          the same with model.hidden_size=2048 (14x the parameters and multiply-adds)

ms_exp accepts parallel.device_num=1 with parallel=data: it starts msrun with one worker.

Under data parallel, ``dataset.batch_size`` is each rank's batch and each rank reads its
own shard of the training set (ms_exp/data/spec.py Shard, ms_exp/job/run_job.py): a global step
trains batch_size x ranks samples, and 2 ranks take half the steps per epoch. Samples/s =
batch_size x ranks / median step time, where the step time is rank 0's
``train/step_time_ms`` read back from MLflow (every step, epochs 2 on: epoch 1 holds the
graph compilation), and is checked against ms_exp's own ``train/samples_per_s``. The
ranks' loss lines are not used: msrun tails both ranks' logs into one stdout, where lines
of the two ranks run into each other.

Time to first step: from starting the command to the MLflow timestamp of step 1's metrics
(taken when the step ends). stand_alone against dp_1 gives what msrun, the worker's own
start and collective init cost; last step to exit, what they cost at the end. The bare
launcher, timed to exit (msrun starts its command twice, as the scheduler and as the worker;
in ms_exp both are ``python -m ms_exp.worker``):

  direct        python -c pass
  msrun         msrun --worker_num=1 --local_worker_num=1 --master_addr=127.0.0.1
                    --master_port=<free> --join=True --log_dir=<tmp> python -c pass

Rounds are interleaved (every arm once per round, the order rotated each round); every
command runs in a fresh working directory with a copy of one migrated MLflow store, and
everything binds 127.0.0.1 on a port found free just before.

    python benchmarks/dp_scaling.py             # 5 rounds, about 10 minutes on 2 cores
    python benchmarks/dp_scaling.py --rounds 7 --epochs 3 --jobs wide

Writes benchmarks/results/dp_scaling.md and dp_scaling.png.
"""

import operator
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import (
    boxplot,
    command_line,
    free_port,
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
from sweep_throughput import EXPERIMENT

JOBS = {"digits": [], "wide": ["model.hidden_size=2048"]}
LAUNCHES = {
    "stand_alone": (1, []),
    "dp_1": (1, ["parallel=data", "parallel.device_num=1"]),
    "dp_2": (2, ["parallel=data", "parallel.device_num=2"]),
}
LAUNCHERS = ("direct", "msrun")
PAYLOAD = "pass"
VENV_BIN = Path(sys.executable).parent


def training_command(job: str, launch: str, epochs: int) -> List[str]:
    line = [
        sys.executable,
        "-m",
        "ms_exp.run",
        *JOBS[job],
        *LAUNCHES[launch][1],
        f"trainer.epochs={epochs}",
        "trainer.loss_print_interval=1",
        "trainer.progress_bar=never",
    ]
    if launch != "stand_alone":
        line.append(f"parallel.launcher.master_port={free_port()}")
    return line


def launcher_command(launcher: str, log_dir: Path) -> List[str]:
    if launcher == "direct":
        return [sys.executable, "-c", PAYLOAD]
    return [
        str(VENV_BIN / "msrun"),
        "--worker_num=1",
        "--local_worker_num=1",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "--join=True",
        f"--log_dir={log_dir}",
        "python",
        "-c",
        PAYLOAD,
    ]


def the_run(workdir: Path):
    """The one FINISHED run in the working directory's store; stops the benchmark if not."""
    from mlflow import MlflowClient

    client = MlflowClient(store_uri(workdir))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    if len(runs) != 1 or runs[0].info.status != "FINISHED":
        sys.exit(
            f"expected one FINISHED run in {workdir}, found "
            f"{[(r.info.run_name, r.info.status) for r in runs]}"
        )
    return client, runs[0]


def step_figures(workdir: Path, ranks: int, start_epoch: float) -> Dict[str, float]:
    """Step time, samples/s and time to first step from rank 0's metrics in MLflow."""
    client, run = the_run(workdir)
    history = {
        key: {m.step: m for m in client.get_metric_history(run.info.run_id, key)}
        for key in ("train/step_time_ms", "train/samples_per_s", "train/epoch")
    }
    first_epoch_end = min(s for s, m in history["train/epoch"].items() if m.value == 1)
    steps = [s for s in history["train/step_time_ms"] if s > first_epoch_end]
    if not steps:
        sys.exit(f"no steps after epoch 1 in {workdir}: use --epochs 2 or more")
    step_ms = statistics.median(history["train/step_time_ms"][s].value for s in steps)
    global_batch = int(run.data.params["dataset.batch_size"]) * ranks
    samples = global_batch / step_ms * 1000
    logged = statistics.median(history["train/samples_per_s"][s].value for s in steps)
    if abs(logged / samples - 1) > 0.01:  # ms_exp's own figure must agree
        sys.exit(
            f"train/samples_per_s {logged:.1f} against {samples:.1f} = {global_batch} "
            f"samples / {step_ms:.3f} ms in {workdir}"
        )
    stamps = [m.timestamp / 1000 - start_epoch for m in history["train/step_time_ms"].values()]
    return {
        "samples_s": samples,
        "step_ms": step_ms,
        "first_step_s": min(stamps),
        "last_step_s": max(stamps),
    }


def timed_training(job: str, launch: str, epochs: int, workdir: Path) -> Dict[str, float]:
    start_epoch = time.time()
    run = stamped_lines(training_command(job, launch, epochs), workdir)
    figures = step_figures(workdir, LAUNCHES[launch][0], start_epoch)
    wall = run["end"] - run["start"]
    return {**figures, "wall_s": wall, "after_last_s": wall - figures.pop("last_step_s")}


def timed_launcher(launcher: str, workdir: Path) -> Dict[str, float]:
    # msrun runs its task with the `python` first on PATH: this interpreter's.
    env = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = stamped_lines(launcher_command(launcher, workdir / "msrun_logs"), workdir, env=env)
    return {"wall_s": run["end"] - run["start"]}


def arms(jobs: List[str]) -> List[str]:
    return [f"{job} {launch}" for job in jobs for launch in LAUNCHES] + list(LAUNCHERS)


def measure(args, scratch: Path) -> Dict[str, List[Dict[str, float]]]:
    template = make_store_template(scratch)
    names = arms(args.jobs)
    results = {name: [] for name in names}
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            workdir = workdir_with_store(template, scratch / f"{round_}_{name.replace(' ', '_')}")
            if name in LAUNCHERS:
                run = timed_launcher(name, workdir)
                shown = f"exit {run['wall_s']:6.2f} s"
            else:
                run = timed_training(*name.split(), args.epochs, workdir)
                shown = (
                    f"{run['samples_s']:7.0f} samples/s, step {run['step_ms']:6.2f} ms, "
                    f"first step {run['first_step_s']:5.2f} s, exit {run['wall_s']:5.1f} s "
                    f"({run['after_last_s']:4.1f} s after the last step)"
                )
            results[name].append(run)
            print(f"round {round_ + 1}/{args.rounds} {name:<18} {shown}", flush=True)
            shutil.rmtree(workdir)  # the wide job's checkpoints are tens of MB a run
    return results


def per_round(results, over: str, under: str, key: str, fmt: str, op) -> str:
    """Median (min-max) of ``op(over, under)`` within each round (arms of one round ran
    back to back)."""
    return spread([op(a[key], b[key]) for a, b in zip(results[over], results[under])], fmt)


def table(results, args) -> str:
    def cells(name, key, fmt):
        return spread([r[key] for r in results[name]], fmt)

    ratio, minus = operator.truediv, operator.sub

    lines = [
        f"{args.epochs} epochs per run, step times of epochs 2 on; {args.rounds} interleaved "
        "rounds; median (min-max). digits: the default job (hidden 512, 44 steps per epoch "
        "in one process, 22 per rank with 2 ranks); wide: model.hidden_size=2048. Under data "
        "parallel dataset.batch_size (32) is each rank's batch, each rank reading its own "
        "shard: a global step trains 32 x ranks samples, and samples/s = 32 x ranks / rank "
        "0's median step time (train/step_time_ms in MLflow).",
        "",
        machine_line(),
        "",
        command_line("dp_scaling.py"),
        "",
        row(
            "job",
            "arm",
            "samples/s",
            "step (ms)",
            "time to first step (s)",
            "last step to exit (s)",
            "wall (s)",
        ),
        row(*["---"] * 7),
    ]
    for job in args.jobs:
        for launch in LAUNCHES:
            name = f"{job} {launch}"
            lines.append(
                row(
                    job,
                    launch,
                    cells(name, "samples_s", ".0f"),
                    cells(name, "step_ms", ".2f"),
                    cells(name, "first_step_s", ".2f"),
                    cells(name, "after_last_s", ".2f"),
                    cells(name, "wall_s", ".1f"),
                )
            )
    lines += [
        "",
        row(
            "job",
            "samples/s, 2 workers / 1 worker",
            "2 workers / stand_alone",
            "time to first step, dp_1 - stand_alone (s)",
            "last step to exit, dp_1 - stand_alone (s)",
        ),
        row(*["---"] * 5),
    ]
    for job in args.jobs:
        dp_2, dp_1, alone = (f"{job} {launch}" for launch in ("dp_2", "dp_1", "stand_alone"))
        lines.append(
            row(
                job,
                per_round(results, dp_2, dp_1, "samples_s", ".2f", ratio),
                per_round(results, dp_2, alone, "samples_s", ".2f", ratio),
                per_round(results, dp_1, alone, "first_step_s", "+.2f", minus),
                per_round(results, dp_1, alone, "after_last_s", "+.2f", minus),
            )
        )
    lines += [
        "",
        f"The bare launcher, `python -c {PAYLOAD}` timed to exit:",
        "",
        row("launcher", "wall (s)"),
        row("---", "---"),
    ]
    lines += [row(name, cells(name, "wall_s", ".2f")) for name in LAUNCHERS]
    lines.append(
        row("msrun - direct", per_round(results, "msrun", "direct", "wall_s", "+.2f", minus))
    )
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, len(args.jobs) + 1, figsize=(5 * (len(args.jobs) + 1), 4))
    for axis, job in zip(axes, args.jobs):
        boxplot(
            axis,
            {launch: [r["samples_s"] for r in results[f"{job} {launch}"]] for launch in LAUNCHES},
            f"{job}: samples/s",
        )
        axis.set_ylim(bottom=0)  # scaling reads as a ratio of heights
    boxplot(
        axes[-1],
        {
            name.replace(" ", "\n"): [r["first_step_s"] for r in results[name]]
            for name in arms(args.jobs)
            if name not in LAUNCHERS
        },
        "time to first step (s)",
    )
    figure.suptitle(
        f"Data parallel on {os.cpu_count()} CPU cores: stand-alone, 1 and 2 msrun workers"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=2)
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    args = parser.parse_args()
    if args.rounds < 1 or args.epochs < 2:
        parser.error("--rounds >= 1 and --epochs >= 2 (step times come from epochs 2 on)")
    measure_and_write("dp_scaling", args, measure, table, plot)


if __name__ == "__main__":
    main()
