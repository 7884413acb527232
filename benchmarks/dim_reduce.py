"""Does dimension-reduction stage two beat simply training on? Measured over several seeds.

For each seed, on the bundled digits (real handwritten digits, held-out 20%):
  stage one      +experiment=dim_reduce_stage_one (12 epochs, 40 weight snapshots)
  dim_reduce     +experiment=dim_reduce_stage_two from it: 2 epochs of DimReduce
  continue x2    stage one's own optimizer for 2 more epochs  (12 + 2 epochs)
  continue x8    stage one's own optimizer for 8 more epochs  (12 + 8: 4x as many)
"Continuing" is a longer run with the same seed: training is deterministic (a re-run is
bit-for-bit, tests/test_reproduce.py) and the learning rate is constant, so its first 12
epochs are stage one; the script checks that its accuracy after epoch 12 equals stage
one's. Held-out accuracy is read back from MLflow.

    python benchmarks/dim_reduce.py                 # 5 seeds, about 6 minutes on 2 cores
    python benchmarks/dim_reduce.py --seeds 1 2 3 --extra boost.n_components=16

Writes benchmarks/results/dim_reduce.md (table) and dim_reduce.png (plot).
"""

import sys
from pathlib import Path

from benchlib import (
    RESULTS,
    accuracy_at,
    arms_per_seed,
    command_line,
    machine_line,
    ms_exp_job,
    pyplot,
    runs_folder,
    seed_table,
    seeds_parser,
)
from mlflow import MlflowClient

STAGE_ONE_EPOCHS = 12
STEPS_PER_EPOCH = 44  # digits, batch 32
ARMS = ("stage one", "dim_reduce +2", "continue +2", "continue +8")


def measure(seeds, extra, workdir: Path):
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    rows = []
    for seed in seeds:
        common = [f"trainer.seed={seed}", *extra]
        stage_one = ms_exp_job(workdir, "+experiment=dim_reduce_stage_one", *common)
        print(f"seed {seed}: stage one {stage_one}", flush=True)
        stage_two = ms_exp_job(
            workdir,
            "+experiment=dim_reduce_stage_two",
            f"boost.stage_one_run_id={stage_one}",
            *common,
        )
        longer = {
            n: ms_exp_job(
                workdir,
                "+experiment=dim_reduce_stage_one",
                f"trainer.epochs={STAGE_ONE_EPOCHS + n}",
                "checkpoint.snapshots.per_epoch=0",
                *common,
            )
            for n in (2, 8)
        }
        base = accuracy_at(client, stage_one)
        for n, run_id in longer.items():
            same = accuracy_at(client, run_id, STAGE_ONE_EPOCHS * STEPS_PER_EPOCH)
            if same != base:
                sys.exit(
                    f"seed {seed}: the {STAGE_ONE_EPOCHS + n}-epoch run is not stage one "
                    f"continued ({same} != {base} after epoch {STAGE_ONE_EPOCHS})"
                )
        row = {
            "seed": seed,
            "stage one": base,
            "dim_reduce +2": accuracy_at(client, stage_two),
            "continue +2": accuracy_at(client, longer[2]),
            "continue +8": accuracy_at(client, longer[8]),
        }
        print("  " + ", ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "seed"), flush=True)
        rows.append(row)
    return rows


def table(rows, extra) -> str:
    lines = seed_table(rows, ARMS, ARMS)
    wins = sum(r["dim_reduce +2"] > r["continue +2"] for r in rows)
    header = (
        f"Held-out accuracy on digits (360 images), {len(rows)} seeds"
        + (f", overrides: {' '.join(extra)}" if extra else "")
        + ".\n"
        f"dim_reduce +2 beats continue +2 in {wins} of {len(rows)} seeds.\n\n"
        f"{machine_line()}\n\n{command_line('dim_reduce.py')}\n\n"
    )
    return header + "\n".join(lines) + "\n"


def plot(rows, path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    arms_per_seed(axes, rows, ARMS, ARMS)
    axes.set_title("Dimension-reduction stage two vs training on (digits, per seed)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = seeds_parser(__doc__, [1, 2, 3, 4, 5])
    parser.add_argument(
        "--extra", nargs="*", default=[], help="overrides for every job, e.g. model.hidden_size=256"
    )
    args = parser.parse_args()
    workdir = runs_folder(args, "ms_exp_dim_reduce_")
    rows = measure(args.seeds, args.extra, workdir)
    RESULTS.mkdir(exist_ok=True)
    text = table(rows, args.extra)
    (RESULTS / "dim_reduce.md").write_text(text)
    plot(rows, RESULTS / "dim_reduce.png")
    print(text)
    print(f"written: {RESULTS / 'dim_reduce.md'}, {RESULTS / 'dim_reduce.png'}")


if __name__ == "__main__":
    main()
