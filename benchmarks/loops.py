"""The two training loops and the mixed-precision levels on CPU: step time, samples per
second, final accuracy and wall time of ``trainer.loop=model`` (``Model.fit``) against
``trainer.loop=functional`` (value_and_grad and one ``@ms.jit`` step, ms_exp/train/functional.py),
each at several ``amp`` levels.

Two jobs, every run ``python -m ms_exp.run <job> <loop> <amp> trainer.progress_bar=never``:

  digits   the default job (digits, the tutorials' Network, batch 32, 44 steps an epoch),
           trainer.epochs=3 (--epochs)
  resnet   model=resnet model.depth=18 model.width=0.125 dataset=synthetic
           dataset.image_shape=[3,32,32] dataset.num_samples=512 dataset.num_eval_samples=128
           trainer.epochs=2 (--resnet-epochs)

  loops    trainer.loop=model | trainer.loop=functional
  amp      O0: amp.level=O0 (float32)
           O2: amp.level=O2 amp.loss_scale=fixed amp.loss_scale_value=1024 (float16, batch
               norm kept float32)
           O3: amp.level=O3 amp.loss_scale=fixed amp.loss_scale_value=1024 (all float16)
           digits runs O0, O2 and O3; resnet O0 and O2 (--resnet-amp to change)

Per run, from the run's own MLflow store (the run id is on the ``MLflow run <id>`` line of
its stdout): the median ``train/step_time_ms`` of the steps after epoch 1 (epoch 1 holds the
graph compilation), samples/s = batch / that step time (checked against ms_exp's own
``train/samples_per_s``), the final ``eval/accuracy``; time to first step, from starting the
command to the MLflow timestamp of step 1's metrics (taken when the step ends: it holds the
compilation of the step); and the command's wall time, start to exit.

Rounds are interleaved (every arm once per round, the order rotated each round); every
command runs in a fresh working directory with a copy of one migrated MLflow store.

    python benchmarks/loops.py                  # 3 rounds, about 4 minutes on 2 cores
    python benchmarks/loops.py --rounds 5 --resnet-amp O0 O2 O3

Writes benchmarks/results/loops.md and loops.png.
"""

import operator
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import (
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

JOBS = {
    "digits": [],
    "resnet": [
        "model=resnet",
        "model.depth=18",
        "model.width=0.125",
        "dataset=synthetic",
        "dataset.image_shape=[3,32,32]",
        "dataset.num_samples=512",
        "dataset.num_eval_samples=128",
    ],
}
LOOPS = ("model", "functional")
FIXED_SCALE = ["amp.loss_scale=fixed", "amp.loss_scale_value=1024"]
AMP = {
    "O0": ["amp.level=O0"],
    "O2": ["amp.level=O2", *FIXED_SCALE],
    "O3": ["amp.level=O3", *FIXED_SCALE],
}
RUN_LINE = re.compile(rb"^MLflow run ([0-9a-f]+) ")


def command(job: str, loop: str, amp: str, epochs: int) -> List[str]:
    return [
        sys.executable,
        "-m",
        "ms_exp.run",
        *JOBS[job],
        f"trainer.epochs={epochs}",
        "trainer.progress_bar=never",
        f"trainer.loop={loop}",
        *AMP[amp],
    ]


def run_figures(workdir: Path, run_id: str, start_epoch: float) -> Dict[str, float]:
    """Step time, samples/s, final accuracy and time to first step from the run's metrics."""
    from mlflow import MlflowClient

    client = MlflowClient(store_uri(workdir))
    run = client.get_run(run_id)
    if run.info.status != "FINISHED":
        sys.exit(f"run {run_id} in {workdir} is {run.info.status}, not FINISHED")
    history = {
        key: {m.step: m for m in client.get_metric_history(run_id, key)}
        for key in ("train/step_time_ms", "train/samples_per_s", "train/epoch", "eval/accuracy")
    }
    first_epoch_end = min(s for s, m in history["train/epoch"].items() if m.value == 1)
    steps = [s for s in history["train/step_time_ms"] if s > first_epoch_end]
    if not steps:
        sys.exit(f"no steps after epoch 1 in {workdir}")
    step_ms = statistics.median(history["train/step_time_ms"][s].value for s in steps)
    batch = int(run.data.params["dataset.batch_size"])
    samples = batch / step_ms * 1000
    logged = statistics.median(history["train/samples_per_s"][s].value for s in steps)
    if abs(logged / samples - 1) > 0.01:  # ms_exp's own figure must agree
        sys.exit(
            f"train/samples_per_s {logged:.1f} against {samples:.1f} = {batch} "
            f"samples / {step_ms:.3f} ms in {workdir}"
        )
    accuracy = history["eval/accuracy"][max(history["eval/accuracy"])].value
    first = history["train/step_time_ms"][min(history["train/step_time_ms"])]
    return {
        "step_ms": step_ms,
        "samples_s": samples,
        "accuracy": accuracy,
        "first_step_s": first.timestamp / 1000 - start_epoch,
    }


def epochs(args, job: str) -> int:
    return args.epochs if job == "digits" else args.resnet_epochs


def timed_run(job: str, loop: str, amp: str, epochs: int, workdir: Path) -> Dict[str, float]:
    start_epoch = time.time()
    run = stamped_lines(command(job, loop, amp, epochs), workdir, pattern=RUN_LINE)
    if len(run["stamps"]) != 1:
        sys.exit(
            f"expected one 'MLflow run <id>' line from {job} {loop} {amp}, "
            f"found {len(run['stamps'])}"
        )
    run_id = run["stamps"][0][0].group(1).decode()
    return {**run_figures(workdir, run_id, start_epoch), "wall_s": run["end"] - run["start"]}


def arms(args) -> List[str]:
    levels = {"digits": args.digits_amp, "resnet": args.resnet_amp}
    return [f"{job} {loop} {amp}" for job in args.jobs for amp in levels[job] for loop in LOOPS]


def measure(args, scratch: Path) -> Dict[str, List[Dict[str, float]]]:
    template = make_store_template(scratch)
    names = arms(args)
    results = {name: [] for name in names}
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            workdir = workdir_with_store(template, scratch / f"{round_}_{name.replace(' ', '_')}")
            job = name.split()[0]
            run = timed_run(*name.split(), epochs(args, job), workdir)
            results[name].append(run)
            print(
                f"round {round_ + 1}/{args.rounds} {name:<22} step {run['step_ms']:7.2f} ms, "
                f"{run['samples_s']:6.0f} samples/s, accuracy {run['accuracy']:.4f}, "
                f"first step {run['first_step_s']:5.2f} s, exit {run['wall_s']:5.1f} s",
                flush=True,
            )
            shutil.rmtree(workdir)
    return results


def per_round(results, over: str, under: str, key: str, fmt: str, op) -> str:
    """Median (min-max) of ``op(over, under)`` within each round (arms of one round ran
    in the same pass)."""
    return spread([op(a[key], b[key]) for a, b in zip(results[over], results[under])], fmt)


def table(results, args) -> str:
    def cells(name, key, fmt):
        return spread([r[key] for r in results[name]], fmt)

    lines = [
        f"{args.rounds} interleaved rounds; median (min-max). digits: the default job (the "
        f"tutorials' Network, batch 32, 44 steps an epoch), {args.epochs} epochs; "
        "resnet: model=resnet model.depth=18 model.width=0.125 on dataset=synthetic "
        "(3x32x32, 512 training and 128 evaluation samples), "
        f"{args.resnet_epochs} epochs. Step: median train/step_time_ms (MLflow) of the steps "
        "after epoch 1; samples/s = batch / step; eval accuracy: the final eval/accuracy; "
        "time to first step: command start to step 1's metrics. O2 and O3 with "
        "amp.loss_scale=fixed amp.loss_scale_value=1024.",
        "",
        machine_line(),
        "",
        command_line("loops.py"),
        "",
        row(
            "job",
            "loop",
            "amp",
            "step (ms)",
            "samples/s",
            "eval accuracy",
            "time to first step (s)",
            "wall (s)",
        ),
        row(*["---"] * 8),
    ]
    for name in arms(args):
        lines.append(
            row(
                *name.split(),
                cells(name, "step_ms", ".2f"),
                cells(name, "samples_s", ".0f"),
                cells(name, "accuracy", ".4f"),
                cells(name, "first_step_s", ".2f"),
                cells(name, "wall_s", ".1f"),
            )
        )
    lines += [
        "",
        "functional against model, within each round:",
        "",
        row(
            "job",
            "amp",
            "step, functional / model",
            "time to first step, functional - model (s)",
            "wall, functional / model",
        ),
        row(*["---"] * 5),
    ]
    ratio, minus = operator.truediv, operator.sub
    for name in arms(args):
        job, loop, amp = name.split()
        if loop != "functional":
            continue
        model = f"{job} model {amp}"
        lines.append(
            row(
                job,
                amp,
                per_round(results, name, model, "step_ms", ".2f", ratio),
                per_round(results, name, model, "first_step_s", "+.2f", minus),
                per_round(results, name, model, "wall_s", ".2f", ratio),
            )
        )
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    names = arms(args)
    figure, axes = plt.subplots(1, len(args.jobs), figsize=(5.5 * len(args.jobs), 4), squeeze=False)
    for axis, job in zip(axes[0], args.jobs):
        mine = [n for n in names if n.startswith(f"{job} ")]
        values = [[r["step_ms"] for r in results[n]] for n in mine]
        medians = [statistics.median(v) for v in values]
        bars = [
            [m - min(v) for m, v in zip(medians, values)],
            [max(v) - m for m, v in zip(medians, values)],
        ]
        colours = ["tab:blue" if n.split()[1] == "model" else "tab:orange" for n in mine]
        axis.bar(range(len(mine)), medians, yerr=bars, capsize=4, color=colours)
        axis.set_xticks(
            range(len(mine)), [" ".join(n.split()[1:]).replace(" ", "\n") for n in mine]
        )
        axis.set_ylabel(f"{job}: step time (ms), median and min-max")
        axis.grid(True, axis="y", alpha=0.3)
    figure.suptitle("Training loops and amp levels on CPU: model (blue) and functional (orange)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=3)  # --epochs: the digits job's
    parser.set_defaults(rounds=3)
    parser.add_argument("--resnet-epochs", type=int, default=2)
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--digits-amp", nargs="+", choices=AMP, default=["O0", "O2", "O3"])
    parser.add_argument("--resnet-amp", nargs="+", choices=AMP, default=["O0", "O2"])
    args = parser.parse_args()
    if args.rounds < 1 or min(args.epochs, args.resnet_epochs) < 2:
        parser.error(
            "--rounds >= 1, --epochs and --resnet-epochs >= 2 (step times come from epochs 2 on)"
        )
    measure_and_write("loops", args, measure, table, plot)


if __name__ == "__main__":
    main()
