"""What ms_exp costs at training time, against the plain MindSpore script a user would
write instead (benchmarks/baselines/plain_digits.py: the same network, data, batch, steps,
optimizer, LossMonitor and ModelCheckpoint, ``Model.train``).

Every arm is timed the same way, from outside: the command's stdout is read line by line
and each ``epoch: E step: S, loss is ...`` line (LossMonitor, printing every step in every
arm) is stamped when it arrives.

- time to the first step: from starting the command to the first loss line;
- step time: the median gap between consecutive loss lines of one epoch, epochs 2 on (the
  gaps across an epoch's end hold checkpointing and ms_exp's evaluation: not steps).

Arms, interleaved (all arms once, then again) so that drift on the machine spreads evenly,
after one untimed warm-up round (it creates the MLflow stores and fills the page cache):

  plain       python benchmarks/baselines/plain_digits.py
  ms_exp      python -m ms_exp.run  (default store: sqlite:///mlflow.db, metrics of every
              step, sent to the MLflow sidecar process about every 0.5 s)
  no_tracking python -m ms_exp.run tracking.enabled=false
  server      python -m ms_exp.run tracking.uri=http://127.0.0.1:<port> (a local
              `mlflow server` started once for the whole benchmark)

Targets, the overhead ms_exp allows itself (the results say met or missed for each):
step time at most 3% above the plain script's (ms_exp / plain <= 1.03); the first step at
most 2 s later than the plain script's; logging every step at most 3% slower than tracking
off, with the default store and with a local server alike.

    python benchmarks/overhead.py                 # 5 rounds, about 5 minutes on 2 cores
    python benchmarks/overhead.py --rounds 7 --epochs 6

Writes benchmarks/results/overhead.md and overhead.png.
"""

import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import (
    ROOT,
    boxplot,
    command_line,
    free_port,
    machine_line,
    measure_and_write,
    pyplot,
    rounds_parser,
    spread,
    stamped_lines,
    step_gaps,
    verdict,
)

BASELINE = ROOT / "benchmarks" / "baselines" / "plain_digits.py"
ARMS = ("plain", "ms_exp", "no_tracking", "server")
STEP_RATIO_TARGET = 1.03
STARTUP_TARGET_S = 2.0
LOGGING_TARGET = 1.03


def command(arm: str, epochs: int, workdir: Path, server_uri: str) -> List[str]:
    if arm == "plain":
        return [
            sys.executable,
            str(BASELINE),
            "--epochs",
            str(epochs),
            "--ckpt-dir",
            str(workdir / "plain_ckpt"),
        ]
    line = [
        sys.executable,
        "-m",
        "ms_exp.run",
        f"trainer.epochs={epochs}",
        "trainer.loss_print_interval=1",
        "trainer.progress_bar=never",
    ]
    if arm == "no_tracking":
        line.append("tracking.enabled=false")
    elif arm == "server":
        line.append(f"tracking.uri={server_uri}")
    return line


def timed_run(line: List[str], cwd: Path) -> Dict[str, float]:
    """Start ``line``, stamp every loss line, and reduce the stamps to the two figures."""
    run = stamped_lines(line, cwd)
    if not run["stamps"]:
        sys.exit(f"no loss lines: {' '.join(line)}")
    return {
        "first_step_s": run["stamps"][0][1] - run["start"],
        "step_ms": statistics.median(step_gaps(run["stamps"])) * 1000,
        "wall_s": run["end"] - run["start"],
    }


def start_server(workdir: Path):
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{workdir / 'server.db'}",
            "--default-artifact-root",
            str(workdir / "server_artifacts"),
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.5)
    server.kill()
    sys.exit("mlflow server did not start within 120 s")


def measure(args, workdir: Path) -> Dict[str, List[Dict[str, float]]]:
    server, uri = start_server(workdir)
    results = {arm: [] for arm in ARMS}
    try:
        # Untimed: creates both MLflow stores and fills the page cache for every arm.
        for arm in ARMS:
            timed_run(command(arm, 2, workdir, uri), workdir)
        for round_ in range(1, args.rounds + 1):
            for arm in ARMS:
                run = timed_run(command(arm, args.epochs, workdir, uri), workdir)
                results[arm].append(run)
                print(
                    f"round {round_}/{args.rounds} {arm:<12} first step "
                    f"{run['first_step_s']:5.2f} s, step {run['step_ms']:6.3f} ms",
                    flush=True,
                )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return results


def table(results, args) -> str:
    per_round = range(args.rounds)
    step = {arm: [r["step_ms"] for r in results[arm]] for arm in ARMS}
    first = {arm: [r["first_step_s"] for r in results[arm]] for arm in ARMS}
    # Ratios within a round (arms of one round ran back to back), then their median.
    step_ratio = [step["ms_exp"][i] / step["plain"][i] for i in per_round]
    startup = [first["ms_exp"][i] - first["plain"][i] for i in per_round]
    logging = {
        arm: [step[arm][i] / step["no_tracking"][i] for i in per_round]
        for arm in ("ms_exp", "server")
    }
    lines = [
        f"Default job (digits, the tutorials' Network, batch 32, {args.epochs} epochs of 44 "
        f"steps), {args.rounds} interleaved rounds; median (min-max).",
        "",
        machine_line(),
        "",
        command_line("overhead.py"),
        "",
        "| arm | step time (ms) | time to first step (s) |",
        "|---|---|---|",
    ]
    for arm in ARMS:
        lines.append(f"| {arm} | {spread(step[arm], '.3f')} | {spread(first[arm], '.2f')} |")
    lines += [
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| step time ms_exp / plain <= {STEP_RATIO_TARGET} | {spread(step_ratio, '.3f')} | "
        f"{verdict(step_ratio, STEP_RATIO_TARGET)} |",
        f"| time to first step, ms_exp - plain <= {STARTUP_TARGET_S:.0f} s | "
        f"{spread(startup, '+.2f')} s | {verdict(startup, STARTUP_TARGET_S)} |",
        f"| logging every step, default store / tracking off <= {LOGGING_TARGET} | "
        f"{spread(logging['ms_exp'], '.3f')} | {verdict(logging['ms_exp'], LOGGING_TARGET)} |",
        f"| logging every step, local server / tracking off <= {LOGGING_TARGET} | "
        f"{spread(logging['server'], '.3f')} | {verdict(logging['server'], LOGGING_TARGET)} |",
    ]
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, (steps, first) = plt.subplots(1, 2, figsize=(11, 4))
    for axis, key, label in (
        (steps, "step_ms", "step time (ms)"),
        (first, "first_step_s", "time to first step (s)"),
    ):
        boxplot(axis, {arm: [r[key] for r in results[arm]] for arm in ARMS}, label)
    figure.suptitle("ms_exp against the plain MindSpore script (default job, CPU)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=5)
    args = parser.parse_args()
    if args.rounds < 1 or args.epochs < 2:
        parser.error("--rounds >= 1 and --epochs >= 2 (step times come from epochs 2 on)")
    measure_and_write("overhead", args, measure, table, plot)


if __name__ == "__main__":
    main()
