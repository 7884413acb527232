"""What ms_exp costs, against the lean MindSpore script a user would write instead
(benchmarks/baselines/plain_digits.py: the same network, data, batch, steps and optimizer,
``Model.fit`` evaluating and checkpointing every epoch, as the default job does).

Whole processes, timed from outside the same way for every arm: each command runs for a
short and a long number of epochs (2 and 92 by default), and

- per epoch: (wall time of the long run - wall time of the short run) / the epochs between;
- fixed cost: the short run's wall time less its epochs at that rate: start-up (imports,
  composition, checks, the run's creation) plus the end of the run (its models, the last
  records);
- step time: the median gap between consecutive loss lines of one epoch (printed every 20
  steps, as the default job does), epochs 2 on, divided by the steps between;
- CPU seconds of each process of the long run: the job's own (from ``wait4``) and its MLflow
  sidecar's (its last sample, taken every 0.1 s).

Arms, interleaved (every arm once, then again) so that drift on the machine spreads evenly,
after one untimed warm-up round (it creates the MLflow stores and fills the page cache):

  lean        python benchmarks/baselines/plain_digits.py --print-every 20
  ms_exp      python -m ms_exp.run  (default store: sqlite:///mlflow.db, every step's
              metrics, system metrics, models logged at the end)
  no_tracking python -m ms_exp.run tracking.enabled=false
  server      python -m ms_exp.run tracking.uri=http://127.0.0.1:<port> (a local
              `mlflow server` started once for the whole benchmark)

Targets (the results say met or missed for each): per epoch at most 3% above the lean
script's (ms_exp / lean <= 1.03), and the fixed cost at most 0.5 s above it.

    python benchmarks/overhead.py                        # 5 rounds, about 10 minutes on 2 cores
    python benchmarks/overhead.py --rounds 3 --arms lean ms_exp no_tracking

Writes benchmarks/results/overhead.md and overhead.png.
"""

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

from benchlib import (
    LOSS_LINE,
    ROOT,
    boxplot,
    command_line,
    free_port,
    machine_line,
    measure_and_write,
    pyplot,
    rounds_parser,
    spread,
    verdict,
)

BASELINE = ROOT / "benchmarks" / "baselines" / "plain_digits.py"
ARMS = ("lean", "ms_exp", "no_tracking", "server")
EPOCH_RATIO_TARGET = 1.03
FIXED_TARGET_S = 0.5
PRINT_EVERY = 20  # the default job's trainer.loss_print_interval
SIDECAR = "ms_exp.tracking.sidecar"


def command(arm: str, epochs: int, workdir: Path, server_uri: str) -> List[str]:
    if arm == "lean":
        return [
            sys.executable,
            str(BASELINE),
            *("--epochs", str(epochs), "--print-every", str(PRINT_EVERY)),
            *("--ckpt-dir", str(workdir / "lean_ckpt")),
        ]
    line = [sys.executable, "-m", "ms_exp.run", f"trainer.epochs={epochs}"]
    line.append("trainer.progress_bar=never")  # the lean script has none either
    if arm == "no_tracking":
        line.append("tracking.enabled=false")
    elif arm == "server":
        line.append(f"tracking.uri={server_uri}")
    return line


def sidecar_cpu(root: int, seen: Dict[int, float], done: threading.Event) -> None:
    """Keep the last CPU seconds of every sidecar under ``root`` until ``done``."""
    import psutil

    while not done.wait(0.1):
        try:
            children = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                if SIDECAR in " ".join(child.cmdline()):
                    times = child.cpu_times()
                    seen[child.pid] = times.user + times.system
            except psutil.Error:
                pass


def timed_run(line: List[str], cwd: Path) -> Dict[str, float]:
    """Run ``line`` to its end: wall time, step time, and CPU seconds of its processes."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(line, cwd=cwd, env=env, stdout=subprocess.PIPE)
    seen: Dict[int, float] = {}
    done = threading.Event()
    sampler = threading.Thread(target=sidecar_cpu, args=(process.pid, seen, done))
    sampler.start()
    stamps = []
    for raw in process.stdout:
        match = LOSS_LINE.match(raw)
        if match:
            stamps.append((int(match.group(1)), int(match.group(2)), time.perf_counter()))
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"failed ({process.returncode}): {' '.join(line)}")
    gaps = [
        (later - earlier) / (s2 - s1)
        for (e1, s1, earlier), (e2, s2, later) in zip(stamps, stamps[1:])
        if e1 == e2 >= 2
    ]
    return {
        "wall_s": wall,
        "step_ms": statistics.median(gaps) * 1000 if gaps else float("nan"),
        "cpu_job_s": usage.ru_utime + usage.ru_stime,
        "cpu_sidecar_s": sum(seen.values()),
    }


def start_server(workdir: Path):
    port = free_port()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"),
            *("--port", str(port), "--backend-store-uri", f"sqlite:///{workdir / 'server.db'}"),
            *("--default-artifact-root", str(workdir / "server_artifacts")),
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
    server, uri = start_server(workdir) if "server" in args.arms else (None, "")
    results: Dict[str, List[Dict[str, float]]] = {arm: [] for arm in args.arms}
    try:
        for arm in args.arms:  # untimed: creates the stores, fills the page cache
            timed_run(command(arm, args.short, workdir, uri), workdir)
        for round_ in range(1, args.rounds + 1):
            for arm in args.arms:
                short = timed_run(command(arm, args.short, workdir, uri), workdir)
                long = timed_run(command(arm, args.epochs, workdir, uri), workdir)
                per_epoch = (long["wall_s"] - short["wall_s"]) / (args.epochs - args.short)
                run = {
                    **long,
                    "epoch_s": per_epoch,
                    "fixed_s": short["wall_s"] - args.short * per_epoch,
                }
                results[arm].append(run)
                print(
                    f"round {round_}/{args.rounds} {arm:<12} per epoch {per_epoch:.4f} s, "
                    f"fixed {run['fixed_s']:5.2f} s, step {run['step_ms']:.3f} ms, CPU job "
                    f"{run['cpu_job_s']:.1f} s sidecar {run['cpu_sidecar_s']:.1f} s",
                    flush=True,
                )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return results


def table(results, args) -> str:
    arms = list(results)
    rounds = range(args.rounds)

    def column(arm: str, key: str) -> List[float]:
        return [r[key] for r in results[arm]]

    lines = [
        f"Default job (digits, the tutorials' Network, batch 32, 44 steps an epoch), whole "
        f"processes of {args.short} and {args.epochs} epochs, {args.rounds} interleaved "
        "rounds; median (min-max).",
        "",
        machine_line(),
        "",
        command_line("overhead.py"),
        "",
        "| arm | per epoch (s) | fixed cost (s) | step time (ms) | CPU s: job | CPU s: sidecar |",
        "|---|---|---|---|---|---|",
    ]
    for arm in arms:
        cells = [
            spread(column(arm, "epoch_s"), ".4f"),
            spread(column(arm, "fixed_s"), ".2f"),
            spread(column(arm, "step_ms"), ".3f"),
            spread(column(arm, "cpu_job_s"), ".1f"),
            spread(column(arm, "cpu_sidecar_s"), ".1f")
            if arm not in ("lean", "no_tracking")
            else "-",
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    if "lean" in results:
        lines += ["", "| target | measured | |", "|---|---|---|"]
        for arm in (a for a in arms if a != "lean"):
            ratio = [column(arm, "epoch_s")[i] / column("lean", "epoch_s")[i] for i in rounds]
            fixed = [column(arm, "fixed_s")[i] - column("lean", "fixed_s")[i] for i in rounds]
            lines += [
                f"| {arm}: per epoch / lean <= {EPOCH_RATIO_TARGET} | {spread(ratio, '.3f')} | "
                f"{verdict(ratio, EPOCH_RATIO_TARGET)} |",
                f"| {arm}: fixed cost - lean <= +{FIXED_TARGET_S} s | {spread(fixed, '+.2f')} s | "
                f"{verdict(fixed, FIXED_TARGET_S)} |",
            ]
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(14, 4))
    for axis, key, label in (
        (axes[0], "epoch_s", "per epoch (s)"),
        (axes[1], "fixed_s", "fixed cost: start-up and end (s)"),
        (axes[2], "cpu_job_s", f"CPU seconds of the job, {args.epochs} epochs"),
    ):
        boxplot(axis, {arm: [r[key] for r in runs] for arm, runs in results.items()}, label)
    figure.suptitle("ms_exp against the lean MindSpore script (default job, CPU)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = rounds_parser(__doc__, epochs=92)
    parser.add_argument("--short", type=int, default=2, help="epochs of the short run")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    args = parser.parse_args()
    if args.rounds < 1 or not 2 <= args.short < args.epochs:
        parser.error("--rounds >= 1 and 2 <= --short < --epochs")
    measure_and_write("overhead", args, measure, table, plot)


if __name__ == "__main__":
    main()
