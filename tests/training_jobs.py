"""Several independent training jobs in one process: a multirun (``-m``) over experiment
files a test writes into its own config folder (``--config-dir``), one job per file. The
jobs of a sweep run one after the other in the launching process, so each costs its
training, not a new process with MindSpore's import and a fresh MLflow store; their
products (console.log, checkpoints, MLflow runs) are what a single run leaves behind."""

import shutil
from pathlib import Path
from typing import Dict, Optional, Sequence

from conftest import CliResult, migrated_store, run_cli
from mlflow import MlflowClient
from mlflow.entities import Run


class Job:
    """One job of a sweep: its run directory, what it printed (its console.log: stdout and
    stderr of the job), and its MLflow run."""

    def __init__(self, name: str, run: Run, store: MlflowClient):
        self.name, self.run, self.store = name, run, store
        self.run_id = run.info.run_id
        self.run_dir = Path(run.data.tags["ms_exp.run_dir"])
        self.console = (self.run_dir / "console.log").read_text()

    def field(self, prefix: str) -> str:
        """The rest of the first console line that starts with ``prefix``."""
        for line in self.console.splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise AssertionError(
            f"{self.name}: no line starting {prefix!r} in:\n{self.console[-3000:]}"
        )


class Sweep:
    def __init__(self, result: CliResult, jobs: Dict[str, Job], parent: Run):
        self.result, self.jobs, self.parent = result, jobs, parent

    def __getitem__(self, name: str) -> Job:
        return self.jobs[name]


def experiment_sweep(
    cwd: Path,
    experiments: Dict[str, str],
    *overrides: str,
    presets: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
    fresh_store: bool = False,
) -> Sweep:
    """``python -m ms_exp.run -m --config-dir conf OVERRIDES +experiment=A,B,...`` in
    ``cwd``: ``experiments`` maps a name to the body of ``conf/experiment/<name>.yaml``
    (``# @package _global_`` is added), ``presets`` are ms_exp's own experiments swept
    beside them. Overrides on the command line apply to every job (and win over an
    experiment's values). The sweep must succeed; its jobs by experiment name."""
    cwd = Path(cwd)
    folder = cwd / "conf" / "experiment"
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in experiments.items():
        (folder / f"{name}.yaml").write_text("# @package _global_\n" + body)
    if not fresh_store and not (cwd / "mlflow.db").exists():
        shutil.copyfile(migrated_store(), cwd / "mlflow.db")
    names = [*experiments, *presets]
    result = run_cli(
        "ms_exp.run",
        ["-m", "--config-dir", "conf", *overrides, "+experiment=" + ",".join(names)],
        cwd,
        env,
        timeout=900,
    )
    assert result.rc == 0, f"rc={result.rc}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    store = result.store
    runs = store.search_runs(["1"])
    (parent,) = [r for r in runs if "ms_exp.sweep" in r.data.tags]
    jobs = {}
    for run in runs:
        if run is parent or "ms_exp.sweep" in run.data.tags:
            continue
        overrides_file = Path(run.data.tags["ms_exp.run_dir"]) / ".hydra" / "overrides.yaml"
        (name,) = [
            line.split("=", 1)[1].strip()
            for line in overrides_file.read_text().splitlines()
            if "+experiment=" in line
        ]
        jobs[name] = Job(name, run, store)
    assert sorted(jobs) == sorted(names), (sorted(jobs), result.stdout[-3000:])
    return Sweep(result, jobs, parent)
