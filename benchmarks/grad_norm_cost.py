"""What ``tracking.log_grad_norm`` costs: the median step time of a job with the norm
stored every step (true) against none (false), in each training loop.

Timed as benchmarks/overhead.py times its arms, from outside: every per-step loss line
(LossMonitor, ``trainer.loss_print_interval=1``) is stamped when it arrives, and a run's
step time is the median gap between consecutive lines of one epoch, epochs 2 on. The arms
of one loop run interleaved (true, false, false, true, ...) after one untimed warm-up
round, so that load from other processes spreads evenly over both; the cost is the ratio
of the two step times within each round, then its median.

Jobs: the default job (digits, the tutorials' Network, batch 32, 44 steps an epoch) with
``trainer.loop=model`` and with ``trainer.loop=functional``; tracking on (the default
store, every step logged).

    python benchmarks/grad_norm_cost.py                # 5 rounds of 4 epochs
    python benchmarks/grad_norm_cost.py --rounds 3 --epochs 3

Writes benchmarks/results/grad_norm.md and grad_norm.png.
"""

import statistics
import sys
from pathlib import Path
from typing import Dict, List

from benchlib import (
    boxplot,
    command_line,
    machine_line,
    measure_and_write,
    pyplot,
    rounds_parser,
    spread,
    stamped_lines,
    step_gaps,
    verdict,
)

LOOPS = ("model", "functional")
ARMS = ("true", "false")
# The default may turn the norm on only where it costs at most this (step time ratio).
COST_TARGET = 1.02


def command(loop: str, arm: str, epochs: int) -> List[str]:
    return [
        sys.executable,
        "-m",
        "ms_exp.run",
        f"trainer.epochs={epochs}",
        f"trainer.loop={loop}",
        f"tracking.log_grad_norm={arm}",
        "trainer.loss_print_interval=1",
        "trainer.progress_bar=never",
    ]


def step_ms(line: List[str], cwd: Path) -> float:
    run = stamped_lines(line, cwd)
    gaps = step_gaps(run["stamps"])
    if not gaps:
        sys.exit(f"no step times: {' '.join(line)}")
    return statistics.median(gaps) * 1000.0


def measure(args, workdir: Path) -> Dict[str, Dict[str, List[float]]]:
    results = {loop: {arm: [] for arm in ARMS} for loop in LOOPS}
    for loop in LOOPS:  # untimed: creates the store, fills the page cache
        step_ms(command(loop, "true", 2), workdir)
    for round_ in range(1, args.rounds + 1):
        for loop in LOOPS:
            # Each round starts with the other arm, so a drift in the machine's load
            # favours neither.
            for arm in ARMS if round_ % 2 else ARMS[::-1]:
                ms = step_ms(command(loop, arm, args.epochs), workdir)
                results[loop][arm].append(ms)
                print(
                    f"round {round_}/{args.rounds} {loop:<10} log_grad_norm={arm:<5} "
                    f"step {ms:6.3f} ms",
                    flush=True,
                )
    return results


def ratios(results, loop: str) -> List[float]:
    """Step time with the norm over without, within each round."""
    return [on / off for on, off in zip(results[loop]["true"], results[loop]["false"])]


def table(results, args) -> str:
    lines = [
        f"Default job (digits, the tutorials' Network, batch 32, {args.epochs} epochs of 44 "
        f"steps), {args.rounds} interleaved rounds; median (min-max).",
        "",
        machine_line(),
        "",
        command_line("grad_norm_cost.py"),
        "",
        "| loop | step time, log_grad_norm=true (ms) | false (ms) | true / false | "
        f"<= {COST_TARGET} |",
        "|---|---|---|---|---|",
    ]
    for loop in LOOPS:
        cost = ratios(results, loop)
        lines.append(
            f"| {loop} | {spread(results[loop]['true'], '.3f')} | "
            f"{spread(results[loop]['false'], '.3f')} | {spread(cost, '.3f')} | "
            f"{verdict(cost, COST_TARGET)} |"
        )
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    boxplot(
        axes[0],
        {f"{loop}\n{arm}": results[loop][arm] for loop in LOOPS for arm in ARMS},
        "median step time (ms)",
    )
    axes[0].set_title("step time per run")
    boxplot(axes[1], {loop: ratios(results, loop) for loop in LOOPS}, "true / false")
    axes[1].axhline(COST_TARGET, color="red", linestyle="--", linewidth=1)
    axes[1].set_title("cost of train/grad_norm (per round)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=4)
    args = parser.parse_args()
    if args.rounds < 1 or args.epochs < 2:
        parser.error("--rounds >= 1 and --epochs >= 2 (step times come from epochs 2 on)")
    measure_and_write("grad_norm", args, measure, table, plot)


if __name__ == "__main__":
    main()
