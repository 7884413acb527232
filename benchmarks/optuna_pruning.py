"""What does Optuna's median pruner buy the dimension-reduction search? Both arms, same seeds.

For each seed, on the bundled digits (real handwritten digits, held-out 20%):
  stage one   +experiment=dim_reduce_stage_one, once (12 epochs, 40 weight snapshots)
  none        -m +experiment=dim_reduce_search from it, hydra/sweeper/pruner=none
  median      the same sweep with hydra/sweeper/pruner=median (n_startup_trials=3,
              n_warmup_steps=3: the first 3 trials always finish, and no trial is judged
              before its third epoch; Optuna prunes from step n_warmup_steps on, and a
              job's steps are its epoch numbers, 1 first)
Both sweeps are separate commands with the same TPE sampler seed, trainer seed, number of
trials (12) and stage-two epochs (8, where the preset trains 2: two epochs leave a pruner
nothing to cut), each with its own study name in the working directory's optuna.db. Per
arm: the sweep command's wall time (timed from outside, start-up and report included), its
trials COMPLETE and PRUNED, the epochs trained (the sum over trials of the epochs they
reported to the study), and the study's best value (held-out accuracy of its best
COMPLETE trial). Training is deterministic, so where both arms drew the same
rho/gamma/sigma (TPE's first 10 trials are random draws of the same seed) a pruned trial's
full run is in the other arm: the table says after which epoch each trial was pruned, what
the pruned trials would have reached, and whether the unpruned arm's best trial was among
them. The arm that runs first alternates from seed to seed.

    python benchmarks/optuna_pruning.py               # 2 seeds, about 16 minutes on 2 cores
    python benchmarks/optuna_pruning.py --seeds 1 2 3 --trials 20 --epochs 10

Writes benchmarks/results/optuna_pruning.md (table) and optuna_pruning.png (plot).
"""

import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import (
    RESULTS,
    command_line,
    machine_line,
    ms_exp_job,
    pyplot,
    row,
    runs_folder,
    seeds_parser,
)
from mlflow import MlflowClient

from ms_exp.tracking.sweep_runs import PRUNED_EPOCH_TAG, child_runs

TRIALS = 12
EPOCHS = 8
STARTUP_TRIALS = 3
WARMUP_STEPS = 3
ARMS = {
    "none": ["hydra/sweeper/pruner=none"],
    "median": [
        "hydra/sweeper/pruner=median",
        f"hydra.sweeper.pruner.n_startup_trials={STARTUP_TRIALS}",
        f"hydra.sweeper.pruner.n_warmup_steps={WARMUP_STEPS}",
    ],
}


def load_study(workdir: Path, name: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{workdir / 'optuna.db'}")


def study_exists(workdir: Path, name: str) -> bool:
    import optuna

    if not (workdir / "optuna.db").exists():
        return False
    summaries = optuna.get_all_study_summaries(storage=f"sqlite:///{workdir / 'optuna.db'}")
    return any(summary.study_name == name for summary in summaries)


def measure_arm(
    seed: int, arm: str, stage_one: str, args, workdir: Path, client: MlflowClient
) -> Dict[str, object]:
    name = f"pruning_seed{seed}_{arm}"
    if study_exists(workdir, name):
        sys.exit(
            f"{workdir / 'optuna.db'} holds a study {name} already: the sweep would "
            "resume it; use a new --workdir"
        )
    started = time.perf_counter()
    parent = ms_exp_job(
        workdir,
        "-m",
        "+experiment=dim_reduce_search",
        f"boost.stage_one_run_id={stage_one}",
        f"trainer.seed={seed}",
        f"trainer.epochs={args.epochs}",
        f"hydra.sweeper.sampler.seed={seed}",
        f"hydra.sweeper.study_name={name}",
        f"hydra.sweeper.n_trials={args.trials}",
        *ARMS[arm],
    )
    wall = time.perf_counter() - started
    study = load_study(workdir, name)
    trials = study.trials
    states = [trial.state.name for trial in trials]
    # What MLflow says of the same trials: a pruned job's run ends KILLED with the epoch.
    runs = child_runs(client, client.get_run(parent))
    killed = {
        int(run.data.tags.get("ms_exp.optuna.trial", -1)): int(run.data.tags[PRUNED_EPOCH_TAG])
        for run in runs
        if run.info.status == "KILLED" and PRUNED_EPOCH_TAG in run.data.tags
    }
    pruned = {trial.number: trial.last_step for trial in trials if trial.state.name == "PRUNED"}
    mismatch = (
        ""
        if killed == pruned
        else (
            f"MLflow KILLED runs {killed} != study PRUNED trials {pruned} (trial: epoch); "
            f"parent run {parent}, {len(runs)} child runs"
        )
    )
    best = study.best_trial
    result = {
        "seed": seed,
        "arm": arm,
        "study": name,
        "parent": parent,
        "wall": wall,
        "complete": states.count("COMPLETE"),
        "pruned": states.count("PRUNED"),
        "other": len(states) - states.count("COMPLETE") - states.count("PRUNED"),
        "epochs": sum(len(trial.intermediate_values) for trial in trials),
        "trial_seconds": sum(
            (trial.datetime_complete - trial.datetime_start).total_seconds()
            for trial in trials
            if trial.datetime_complete
        ),
        "best": study.best_value,
        "best_trial": best.number,
        "trials": [
            {
                "number": trial.number,
                "state": trial.state.name,
                "params": trial.params,
                "curve": dict(trial.intermediate_values),
                "value": trial.value,
            }
            for trial in trials
        ],
        "mismatch": mismatch,
    }
    print(
        f"seed {seed}, {arm}: {wall:.0f} s, {result['complete']} COMPLETE, "
        f"{result['pruned']} PRUNED, {result['epochs']} epochs, best {result['best']:.4f} "
        f"(trial {best.number}){'; ' + mismatch if mismatch else ''}",
        flush=True,
    )
    return result


def counterfactual(none: Dict[str, object], median: Dict[str, object]) -> Dict[str, object]:
    """The median arm's pruned trials found in the unpruned arm (same parameters): their
    final accuracy there, and whether the unpruned arm's best trial is among them."""
    finished = {
        tuple(sorted(t["params"].items())): t for t in none["trials"] if t["state"] == "COMPLETE"
    }
    pruned = [t for t in median["trials"] if t["state"] == "PRUNED"]
    matched = [
        (t, finished[key])
        for t in pruned
        if (key := tuple(sorted(t["params"].items()))) in finished
    ]
    # Deterministic training: the same parameters give the same curve up to the cut.
    diverged = [
        t["number"]
        for t, full in matched
        if any(full["curve"].get(step) != value for step, value in t["curve"].items())
    ]
    best_lost = any(full["number"] == none["best_trial"] for _, full in matched)
    return {
        "pruned": len(pruned),
        "matched": len(matched),
        "cuts": sorted(max(t["curve"]) for t in pruned if t["curve"]),
        "finals": [full["value"] for _, full in matched],
        "best_lost": best_lost,
        "diverged": diverged,
    }


def measure(args, workdir: Path) -> List[Dict[str, object]]:
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    rows = []
    for seed in args.seeds:
        started = time.perf_counter()
        stage_one = ms_exp_job(workdir, "+experiment=dim_reduce_stage_one", f"trainer.seed={seed}")
        print(
            f"seed {seed}: stage one {stage_one} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        # Alternate which arm runs first, so that a drift in the machine's load (other
        # processes) does not always favour the same one.
        order = list(ARMS) if len(rows) % 2 == 0 else list(reversed(ARMS))
        measured = {arm: measure_arm(seed, arm, stage_one, args, workdir, client) for arm in order}
        arms = {arm: measured[arm] for arm in ARMS}
        rows.append(
            {
                "seed": seed,
                "arms": arms,
                "counterfactual": counterfactual(arms["none"], arms["median"]),
            }
        )
    return rows


def table(rows, args) -> str:
    full_epochs = args.trials * args.epochs
    lines = [
        f"Dimension-reduction search (+experiment=dim_reduce_search: TPE over boost.rho, "
        f"gamma, sigma) on digits (360 held-out images), {args.trials} trials of "
        f"{args.epochs} stage-two epochs (at most {full_epochs} epochs per sweep), "
        f"{len(rows)} seeds; each seed's stage one once, then each arm as its own "
        f"sweep command. median: MedianPruner, n_startup_trials={STARTUP_TRIALS}, "
        f"n_warmup_steps={WARMUP_STEPS} (first judged after epoch {WARMUP_STEPS}).",
        "",
        machine_line(),
        "",
        command_line("optuna_pruning.py"),
        "",
        row(
            "seed",
            "arm",
            "wall time (s)",
            "COMPLETE",
            "PRUNED",
            "epochs trained",
            "best held-out accuracy (trial)",
        ),
        "|---" * 7 + "|",
    ]
    for seed_row in rows:
        for arm, result in seed_row["arms"].items():
            lines.append(
                row(
                    str(seed_row["seed"]),
                    arm,
                    f"{result['wall']:.0f}",
                    str(result["complete"]),
                    str(result["pruned"]),
                    str(result["epochs"]),
                    f"{result['best']:.4f} (#{result['best_trial']})",
                )
            )
    for arm in ARMS:
        results = [seed_row["arms"][arm] for seed_row in rows]
        lines.append(
            row(
                "mean",
                arm,
                f"{statistics.mean(r['wall'] for r in results):.0f}",
                f"{statistics.mean(r['complete'] for r in results):.1f}",
                f"{statistics.mean(r['pruned'] for r in results):.1f}",
                f"{statistics.mean(r['epochs'] for r in results):.1f}",
                f"{statistics.mean(r['best'] for r in results):.4f}",
            )
        )

    def ratio(key):
        return statistics.mean(
            seed_row["arms"]["median"][key] / seed_row["arms"]["none"][key] for seed_row in rows
        )

    delta = statistics.mean(
        seed_row["arms"]["median"]["best"] - seed_row["arms"]["none"]["best"] for seed_row in rows
    )
    lines += [
        "",
        f"median against none (mean over seeds): wall time x{ratio('wall'):.2f}, "
        f"epochs trained x{ratio('epochs'):.2f}, summed trial durations "
        f"x{ratio('trial_seconds'):.2f}, best held-out accuracy {delta * 100:+.2f} "
        "points.",
        "",
        "The median arm's pruned trials in the unpruned arm (same rho/gamma/sigma, so "
        "the same run to the cut; deterministic training):",
        "",
        row(
            "seed",
            "pruned",
            "pruned after epoch",
            "found in none",
            "their final accuracy there",
            "none's best among them",
        ),
        "|---" * 6 + "|",
    ]
    for seed_row in rows:
        cf = seed_row["counterfactual"]
        finals = ", ".join(f"{value:.4f}" for value in sorted(cf["finals"], reverse=True))
        lines.append(
            row(
                str(seed_row["seed"]),
                str(cf["pruned"]),
                ", ".join(map(str, cf["cuts"])) or "-",
                str(cf["matched"]),
                finals or "-",
                "yes" if cf["best_lost"] else "no",
            )
        )
    notes = []
    for seed_row in rows:
        for arm, result in seed_row["arms"].items():
            if result["mismatch"]:
                notes.append(f"seed {seed_row['seed']}, {arm}: {result['mismatch']}")
            if result["other"]:
                notes.append(
                    f"seed {seed_row['seed']}, {arm}: {result['other']} trials "
                    "neither COMPLETE nor PRUNED"
                )
        if seed_row["counterfactual"]["diverged"]:
            notes.append(
                f"seed {seed_row['seed']}: pruned trials "
                f"{seed_row['counterfactual']['diverged']} reported other values "
                "than the same parameters in the unpruned arm"
            )
    if notes:
        lines += ["", "Checks that failed:", "", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def plot(rows, args, path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (
        ("wall", "sweep wall time (s)"),
        ("epochs", "epochs trained (all trials)"),
        ("best", "best held-out accuracy"),
    )
    width = 0.8 / len(rows)
    for axis, (key, label) in zip(axes, panels):
        for index, seed_row in enumerate(rows):
            values = [seed_row["arms"][arm][key] for arm in ARMS]
            positions = [a + (index - (len(rows) - 1) / 2) * width for a in range(len(ARMS))]
            bars = axis.bar(positions, values, width, label=f"seed {seed_row['seed']}")
            axis.bar_label(bars, fmt="%.4f" if key == "best" else "%.0f", fontsize=7)
        axis.set_xticks(range(len(ARMS)), [f"pruner={arm}" for arm in ARMS])
        axis.set_ylabel(label)
        axis.grid(True, axis="y", alpha=0.3)
        if key == "best":
            low = min(r["arms"][arm]["best"] for r in rows for arm in ARMS)
            axis.set_ylim(low - 0.02, 1.0)
    axes[0].legend(fontsize=8)
    figure.suptitle(
        f"dim_reduce_search, {args.trials} trials of {args.epochs} epochs: "
        "no pruning against the median pruner (same seeds)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = seeds_parser(__doc__, [1, 2])
    parser.add_argument("--trials", type=int, default=TRIALS, help="hydra.sweeper.n_trials")
    parser.add_argument(
        "--epochs", type=int, default=EPOCHS, help="trainer.epochs of stage two, both arms"
    )
    args = parser.parse_args()
    workdir = runs_folder(args, "ms_exp_optuna_pruning_")
    started = time.perf_counter()
    rows = measure(args, workdir)
    RESULTS.mkdir(exist_ok=True)
    text = table(rows, args)
    (RESULTS / "optuna_pruning.md").write_text(text)
    plot(rows, args, RESULTS / "optuna_pruning.png")
    print(text)
    print(
        f"written: {RESULTS / 'optuna_pruning.md'}, {RESULTS / 'optuna_pruning.png'} "
        f"({time.perf_counter() - started:.0f} s in all)"
    )


if __name__ == "__main__":
    main()
