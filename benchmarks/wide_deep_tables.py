"""Wide&Deep step time and peak host memory against embedding-table size, for both
placements (the hybrid-training tutorial's reason to keep tables on the host).

For each table size R the Criteo-format sample (``python -m ms_exp.data.criteo_sample``)
is converted with ``--hash-buckets`` so that its ids spread over all R rows
(R = 39 + 26 x buckets), then ``+experiment=wide_deep_hybrid`` trains one epoch on it with
``placement=device`` (dense Adam over whole tables) and ``placement=host_device`` (host
EmbeddingLookup, FusedSparseFtrl and FusedSparseLazyAdam touching only the rows a batch
uses). Runs are interleaved (every size and placement once, then again) so drift on the
machine spreads over all arms. Step time is the median of ``train/step_time_ms`` after the
first two (compiling) steps; peak memory is the training process's ``ru_maxrss``
(``system/peak_host_memory_mb``), both read back from MLflow.

    python benchmarks/wide_deep_tables.py                  # about 10 minutes on 2 cores
    python benchmarks/wide_deep_tables.py --rows 100000 1000000 --repeats 2 --emb-dim 16

Writes benchmarks/results/wide_deep_tables.md (table) and wide_deep_tables.png (plot).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import command_line, machine_line
from mlflow import MlflowClient

RESULTS = Path(__file__).resolve().parent / "results"
PLACEMENTS = ("device", "host_device")
FIELDS, CATEGORICAL = 39, 26
WARMUP_STEPS = 2


def buckets_for(rows: int) -> int:
    return max(1, (rows - FIELDS) // CATEGORICAL)


def check(command, cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"failed: {' '.join(map(str, command))}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done.stdout


def prepare(workdir: Path, rows, lines: int, per_record: int) -> dict:
    """One converted dataset per table size: {rows: folder}."""
    raw = workdir / "criteo_sample.txt"
    check(
        [sys.executable, "-m", "ms_exp.data.criteo_sample", str(raw), "--lines", str(lines)],
        workdir,
    )
    folders = {}
    for size in rows:
        out = workdir / f"criteo_{size}"
        check(
            [
                sys.executable,
                "-m",
                "ms_exp.data.criteo_convert",
                str(raw),
                str(out),
                "--hash-buckets",
                str(buckets_for(size)),
                "--samples-per-record",
                str(per_record),
            ],
            workdir,
        )
        folders[size] = out
    return folders


def train(workdir: Path, folder: Path, placement: str, args) -> str:
    stdout = check(
        [
            sys.executable,
            "-m",
            "ms_exp.run",
            "+experiment=wide_deep_hybrid",
            f"dataset.path={folder}",
            f"placement={placement}",
            f"dataset.batch_size={args.batch_size}",
            f"model.emb_dim={args.emb_dim}",
            "checkpoint=none",
            "tracking.log_checkpoints=none",
            "trainer.progress_bar=never",
            "trainer.loss_print_interval=1000",
        ],
        workdir,
    )
    line = next(text for text in stdout.splitlines() if text.startswith("MLflow run "))
    return line.split()[2]


def read_run(client: MlflowClient, run_id: str) -> dict:
    steps = client.get_metric_history(run_id, "train/step_time_ms")
    times = [m.value for m in sorted(steps, key=lambda m: m.step)][WARMUP_STEPS:]
    metrics = client.get_run(run_id).data.metrics
    return {
        "step_ms": statistics.median(times),
        "peak_mb": metrics["system/peak_host_memory_mb"],
        "host_mb": metrics.get("placement/host_table_mb", 0.0),
    }


def measure(args, workdir: Path):
    folders = prepare(workdir, args.rows, args.lines, args.samples_per_record)
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    results = {(size, p): [] for size in args.rows for p in PLACEMENTS}
    total = args.repeats * len(results)
    done = 0
    for repeat in range(args.repeats):
        for size in args.rows:
            for placement in PLACEMENTS:
                run_id = train(workdir, folders[size], placement, args)
                results[size, placement].append(read_run(client, run_id))
                done += 1
                last = results[size, placement][-1]
                print(
                    f"[{done}/{total}] rows {size:>10,} {placement:<11} "
                    f"{last['step_ms']:8.1f} ms/step  peak {last['peak_mb']:7.0f} MB",
                    flush=True,
                )
    return results


def summary(samples, key):
    values = [s[key] for s in samples]
    return statistics.median(values), min(values), max(values)


def table(results, args) -> str:
    lines = [
        f"Wide&Deep, `+experiment=wide_deep_hybrid`, emb_dim {args.emb_dim}, batch "
        f"{args.batch_size}, one epoch of {args.lines} generated Criteo-format lines; "
        f"median (min-max) of {args.repeats} interleaved runs per cell.",
        "",
        machine_line() + " Host and device are the same memory here: the difference is "
        "in the kernels.",
        "",
        command_line("wide_deep_tables.py"),
        "",
        "| table rows | params (MB) | placement | step time (ms) | peak host memory (MB) |",
        "|---|---|---|---|---|",
    ]
    for size in args.rows:
        rows = FIELDS + CATEGORICAL * buckets_for(size)
        params_mb = rows * (args.emb_dim + 1) * 4 / 2**20
        for placement in PLACEMENTS:
            step = summary(results[size, placement], "step_ms")
            peak = summary(results[size, placement], "peak_mb")
            lines.append(
                f"| {rows:,} | {params_mb:,.0f} | {placement} | "
                f"{step[0]:.1f} ({step[1]:.1f}-{step[2]:.1f}) | "
                f"{peak[0]:,.0f} ({peak[1]:,.0f}-{peak[2]:,.0f}) |"
            )
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (steps, memory) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [FIELDS + CATEGORICAL * buckets_for(size) for size in args.rows]
    for placement in PLACEMENTS:
        step = [summary(results[s, placement], "step_ms")[0] for s in args.rows]
        peak = [summary(results[s, placement], "peak_mb")[0] for s in args.rows]
        steps.plot(rows, step, marker="o", label=placement)
        memory.plot(rows, peak, marker="o", label=placement)
    for axis, label in ((steps, "median step time (ms)"), (memory, "peak host memory (MB)")):
        axis.set_xscale("log")
        axis.set_xlabel("embedding table rows")
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        axis.legend()
    figure.suptitle(f"Wide&Deep on CPU, emb_dim {args.emb_dim}, batch {args.batch_size}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[10_000, 100_000, 1_000_000, 4_000_000],
        help="embedding table sizes (rows) to measure",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--lines", type=int, default=12_000, help="generated Criteo lines (90%% train)"
    )
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--samples-per-record", type=int, default=1000)
    parser.add_argument("--emb-dim", type=int, default=80, help="the model zoo's 80")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ms_exp_bench_wd_") as scratch:
        results = measure(args, Path(scratch))
    text = table(results, args)
    (RESULTS / "wide_deep_tables.md").write_text(text)
    plot(results, args, RESULTS / "wide_deep_tables.png")
    print(text)


if __name__ == "__main__":
    main()
