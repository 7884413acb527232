"""What MLflow's system-metrics monitor costs the training step.

The monitor samples CPU, memory, disk and network in the job's MLflow sidecar process, not
in the training process; what it can still take from the step is CPU time on the same
cores (psutil's reads, MLflow's ``log_batch`` and ``get_run`` into the SQLite store every
interval). The default job (digits, 10 epochs of 44 steps) runs in three arms:

  off   python -m ms_exp.run tracking.system_metrics_interval=null
  10s   python -m ms_exp.run                                    (the default, 10 s)
  1s    python -m ms_exp.run tracking.system_metrics_interval=1 (the worst case worth having)

interleaved after one untimed warm-up round, each round starting with the next arm (off,
10s, 1s; 10s, 1s, off; 1s, off, 10s; ...), so that drift on the machine and the position in
a round spread evenly over the arms. Step time: the median of the run's own
``train/step_time_ms`` in MLflow, epochs 2 on (the first holds graph compilation). The
slowdown is the ratio of an arm's step time to the ``off`` arm's of the same round.

Target: at most 1% slower than off (ratio <= 1.01), at either interval.

    python benchmarks/system_metrics_overhead.py             # 6 rounds, about 6 min on 2 cores
    python benchmarks/system_metrics_overhead.py --rounds 3

Writes benchmarks/results/system_metrics.md and system_metrics.png.
"""

import statistics
from pathlib import Path
from typing import Dict, List

from benchlib import (
    boxplot,
    command_line,
    machine_line,
    make_store_template,
    measure_and_write,
    ms_exp_job,
    pyplot,
    rounds_parser,
    spread,
    store_uri,
    verdict,
    workdir_with_store,
)

ARMS = {
    "off": ("tracking.system_metrics_interval=null",),
    "10s": (),
    "1s": ("tracking.system_metrics_interval=1",),
}
TARGET = 1.01
STEPS_PER_EPOCH = 44


def job(workdir: Path, arm: str, epochs: int) -> Dict[str, float]:
    from mlflow import MlflowClient

    run_id = ms_exp_job(workdir, f"trainer.epochs={epochs}", *ARMS[arm])
    client = MlflowClient(store_uri(workdir))
    steps = [
        m.value
        for m in client.get_metric_history(run_id, "train/step_time_ms")
        if m.step > STEPS_PER_EPOCH
    ]
    samples = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    # The monitor's own reading of the machine: how loaded it was while the arm trained.
    cpu = statistics.median([m.value for m in samples]) if samples else None
    return {"step_ms": statistics.median(steps), "samples": len(samples), "cpu_pct": cpu}


def measure(args, scratch: Path) -> Dict[str, List[Dict[str, float]]]:
    template = make_store_template(scratch)
    results = {arm: [] for arm in ARMS}
    workdirs = {arm: workdir_with_store(template, scratch / arm) for arm in ARMS}
    for arm in ARMS:  # untimed: compiles MindSpore's kernels, fills the page cache
        job(workdirs[arm], arm, 2)
    names = list(ARMS)
    for round_ in range(1, args.rounds + 1):
        # Each round starts with the next arm, so no arm always runs first or last.
        shift = (round_ - 1) % len(names)
        for arm in names[shift:] + names[:shift]:
            run = job(workdirs[arm], arm, args.epochs)
            results[arm].append(run)
            print(
                f"round {round_}/{args.rounds} {arm:<4} step {run['step_ms']:6.3f} ms, "
                f"{run['samples']} system-metrics samples",
                flush=True,
            )
    return results


def table(results, args) -> str:
    step = {arm: [r["step_ms"] for r in results[arm]] for arm in ARMS}
    ratio = {
        arm: [step[arm][i] / step["off"][i] for i in range(args.rounds)]
        for arm in ARMS
        if arm != "off"
    }
    lines = [
        f"Default job (digits, batch 32, {args.epochs} epochs of {STEPS_PER_EPOCH} steps), "
        f"{args.rounds} interleaved rounds; median (min-max). Step time: the run's "
        f"train/step_time_ms, epochs 2 on. Machine CPU use: the median of the run's "
        f"system/cpu_utilization_percentage (all cores, every process on the machine).",
        "",
        machine_line(),
        "",
        command_line("system_metrics_overhead.py"),
        "",
        "| arm | step time (ms) | system-metrics samples per run | machine CPU use (%) |",
        "|---|---|---|---|",
    ]
    for arm in ARMS:
        samples = [r["samples"] for r in results[arm]]
        cpu = [r["cpu_pct"] for r in results[arm] if r["cpu_pct"] is not None]
        lines.append(
            f"| {arm} | {spread(step[arm], '.3f')} | {spread(samples, '.0f')} | "
            f"{spread(cpu, '.0f') if cpu else '-'} |"
        )
    lines += ["", "| target | measured (ratio to off, per round) | |", "|---|---|---|"]
    for arm, values in ratio.items():
        lines.append(
            f"| interval {arm}: step time / off <= {TARGET} | "
            f"{spread(values, '.3f')} | {verdict(values, TARGET)} |"
        )
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, (steps, ratios) = plt.subplots(1, 2, figsize=(10, 4))
    boxplot(steps, {arm: [r["step_ms"] for r in results[arm]] for arm in ARMS}, "step time (ms)")
    off = [r["step_ms"] for r in results["off"]]
    for arm in ("10s", "1s"):
        values = [r["step_ms"] / o for r, o in zip(results[arm], off)]
        ratios.plot(range(1, len(values) + 1), values, marker="o", label=f"interval {arm}")
    ratios.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET}")
    ratios.axhline(1.0, color="grey", linewidth=0.8)
    ratios.set_xlabel("round")
    ratios.set_ylabel("step time / off (same round)")
    ratios.legend()
    figure.suptitle("System metrics on against off (default job, CPU)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=10)
    parser.set_defaults(rounds=6)  # a multiple of the arms: each starts as many rounds
    args = parser.parse_args()
    if args.rounds < 1 or args.epochs < 2:
        parser.error("--rounds >= 1 and --epochs >= 2 (step times come from epochs 2 on)")
    measure_and_write("system_metrics", args, measure, table, plot)


if __name__ == "__main__":
    main()
