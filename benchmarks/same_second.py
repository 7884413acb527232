"""Commands that meet: ``--jobs`` (8) commands of different configs (learning rates)
started in the same second against one MLflow store and one working folder, first with the
default run folders, then all with one ``hydra.run.dir``. Not a timing: a count of what each
run recorded, checked against what it was given.

For every command that finished, its MLflow run must hold its own ``optimizer.lr`` (param
and ``config/config.yaml`` artifact), a run folder no other run names, whose ``run.json``
names this run, and whose checkpoints are the ones it printed. Every other command must
have been refused in one line (exit 2) naming who holds the folder. Anything else counts as
misfiled.

    python benchmarks/same_second.py            # about 2 minutes on 2 cores
    python benchmarks/same_second.py --jobs 16

Writes benchmarks/results/same_second.md.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

from benchlib import (
    RESULTS,
    command_line,
    machine_line,
    make_store_template,
    row,
    workdir_with_store,
)

JOB = (
    "trainer.progress_bar=never",
    "tracking.log_models=false",
    "trainer.epochs=2",
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)
REFUSED = re.compile(
    r"^ms_exp: error: hydra\.run\.dir=\S+: \S+ (is in use by another ms_exp "
    r"process \(pid \d+ |belongs to run \w+ \(FINISHED\))"
)


def start_together(workdir: Path, lrs: List[str], shared: bool) -> List[Dict]:
    extra = ["hydra.run.dir=run"] if shared else []
    jobs = [
        subprocess.Popen(
            [sys.executable, "-m", "ms_exp.run", *JOB, *extra, f"optimizer.lr={lr}"],
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for lr in lrs
    ]
    return [{"lr": lr, "rc": job.wait(), "out": job.communicate()} for lr, job in zip(lrs, jobs)]


def check(workdir: Path, commands: List[Dict]) -> Dict[str, int]:
    from mlflow import MlflowClient

    store = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    runs = store.search_runs(["1"])
    by_lr = {}
    for run in runs:
        by_lr.setdefault(run.data.params.get("optimizer.lr"), []).append(run)
    counts = {"finished": 0, "refused": 0, "misfiled": 0, "runs": len(runs)}
    folders = set()
    for command in commands:
        stdout, stderr = command["out"]
        lines = stderr.strip().splitlines()
        if command["rc"] == 2 and len(lines) == 1 and REFUSED.match(lines[0]):
            counts["refused"] += 1
            counts["misfiled"] += command["lr"] in by_lr  # a refused command made a run
            continue
        own = by_lr.get(command["lr"], [])
        if command["rc"] != 0 or len(own) != 1:
            counts["misfiled"] += 1
            print(f"lr={command['lr']}: exit {command['rc']}, {len(own)} runs\n{stderr[-2000:]}")
            continue
        run = own[0]
        folder = Path(run.data.tags["ms_exp.run_dir"])
        config = Path(
            store.download_artifacts(run.info.run_id, "config/config.yaml", tempfile.mkdtemp())
        )
        record = json.loads((folder / "run.json").read_text())
        good = (
            run.info.status == "FINISHED"
            and f"lr: {command['lr']}" in config.read_text()
            and record["run_id"] == run.info.run_id
            and folder not in folders
            and f"MLflow run {run.info.run_id}" in stdout
            and str(folder / "checkpoints") in stdout
        )
        folders.add(folder)
        counts["finished" if good else "misfiled"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    lrs = [f"{0.01 * (i + 1):.2f}" for i in range(args.jobs)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ms_exp_same_second_") as scratch:
        template = make_store_template(Path(scratch))
        for name, shared in (("default run folders", False), ("one hydra.run.dir", True)):
            workdir = workdir_with_store(template, Path(scratch) / name.replace(" ", "_"))
            counts = check(workdir, start_together(workdir, lrs, shared))
            rows.append(
                row(
                    name,
                    str(args.jobs),
                    *(str(counts[k]) for k in ("finished", "refused", "misfiled", "runs")),
                )
            )
            print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Commands started in the same second",
            "",
            machine_line(),
            command_line("same_second.py"),
            "",
            row(
                "folders",
                "commands",
                "finished, own records",
                "refused in one line",
                "misfiled or lost",
                "MLflow runs",
            ),
            row(*["---"] * 6),
            *rows,
            "",
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "same_second.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
