"""``hydra/sweeper=optuna``: an Optuna study in a database that the same command resumes,
several sweep commands share, whose trials a pruner stops after an epoch, and a sweep that
stops at its first failed job when asked (``sweep.fail_fast``)."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from conftest import FAST, main_in_process, migrated_store, run_cli
from mlflow import MlflowClient

from ms_exp.config.errors import ConfigError
from ms_exp.preflight.compose import compose_config, preflight

OPTUNA = ("hydra/sweeper=optuna", "hydra.sweeper.study_name=s")
# Two training steps a job, on a small network: what a trial's job does, the least of it.
DATA = (
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)
TINY = (*FAST, "trainer.epochs=1", *DATA)
SPACE = "optimizer.lr=interval(0.01,0.2)"


def study(folder: Path, name: str = "s"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{folder / 'optuna.db'}")


def states(found) -> dict:
    return {t.number: t.state.name for t in found.get_trials()}


def runs_by_trial(folder: Path) -> dict:
    """Trial number -> the MLflow child runs tagged with it, over every parent."""
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    found = {}
    for run in client.search_runs(["1"], "tags.`ms_exp.optuna.trial` != ''"):
        found.setdefault(int(run.data.tags["ms_exp.optuna.trial"]), []).append(run)
    return found


def with_store(folder: Path) -> Path:
    """``folder`` with a copy of the migrated empty MLflow store, as ``train()`` gives a job:
    where a store's first use is not the behaviour, no test pays its migrations."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "mlflow.db").exists():
        shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return folder


def sweep(folder: Path, *overrides: str, timeout: int = 300):
    with_store(folder)
    result = run_cli(
        "ms_exp.run", ["-m", *OPTUNA, *TINY, SPACE, *overrides], folder, timeout=timeout
    )
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


# ---------------------------------------------------------------------------------------------
# Config and refusals


def test_the_sweeper_takes_hydras_key_names_and_its_pruners_and_samplers():
    cfg = compose_config(
        [
            "hydra/sweeper=optuna",
            "hydra/sweeper/pruner=median",
            "hydra/sweeper/sampler=random",
            "hydra.sweeper.sampler.seed=3",
            "hydra.sweeper.n_trials=7",
            "hydra.sweeper.study_name=x",
            "hydra.sweeper.storage=sqlite:////tmp/x.db",
        ],
        return_hydra_config=True,
    )
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.ms_exp_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    assert (sweeper.n_trials, sweeper.study_name, sweeper.storage, sweeper.direction.name) == (
        7,
        "x",
        "sqlite:////tmp/x.db",
        "maximize",
    )
    assert sweeper.sampler == {"_target_": "optuna.samplers.RandomSampler", "seed": 3}
    assert sweeper.pruner._target_ == "optuna.pruners.MedianPruner"
    for pruner, target in [
        ("none", "NopPruner"),
        ("successive_halving", "SuccessiveHalvingPruner"),
        ("hyperband", "HyperbandPruner"),
    ]:
        composed = compose_config(
            ["hydra/sweeper=optuna", f"hydra/sweeper/pruner={pruner}"], return_hydra_config=True
        )
        assert composed.hydra.sweeper.pruner._target_ == f"optuna.pruners.{target}"
    tpe = compose_config(["hydra/sweeper=optuna"], return_hydra_config=True)
    assert tpe.hydra.sweeper.sampler._target_ == "optuna.samplers.TPESampler"
    brute = compose_config(
        ["hydra/sweeper=optuna", "hydra/sweeper/sampler=brute_force"], return_hydra_config=True
    )
    assert brute.hydra.sweeper.sampler._target_ == "optuna.samplers.BruteForceSampler"


@pytest.mark.parametrize("pruner", ["median", "successive_halving", "hyperband"])
def test_every_pruner_option_prunes_a_trial_far_behind_the_others(pruner):
    from hydra.utils import instantiate

    cfg = compose_config(
        ["hydra/sweeper=optuna", f"hydra/sweeper/pruner={pruner}"], return_hydra_config=True
    )
    # Hyperband puts a trial into a bracket by a hash of the study's name and the trial's
    # number: a fixed name.
    found = optuna.create_study(
        study_name="pruners",
        direction="maximize",
        pruner=instantiate(cfg.hydra.sweeper.pruner),
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    for _ in range(8):  # trials that improve epoch by epoch, as training does; asked after
        trial = found.ask()  # every epoch, as ms_exp's jobs ask (pruners keep rungs)
        for epoch in range(1, 10):
            trial.report(0.5 + 0.05 * epoch, epoch)
            trial.should_prune()
        found.tell(trial, 0.95)
    pruned = 0
    for _ in range(4):  # trials far behind (Hyperband leaves some brackets unpruned)
        behind = found.ask()
        for epoch in range(1, 9):
            behind.report(0.01, epoch)
            if behind.should_prune():
                pruned += 1
                break
        found.tell(behind, state=optuna.trial.TrialState.PRUNED)
    assert pruned >= 1


def test_the_job_returns_the_sweep_metric_or_the_first_default_it_logged():
    from ms_exp.search.trial import objective_value

    assert objective_value({"eval/accuracy": 0.9, "eval/loss": 0.3}, None) == 0.9
    assert objective_value({"eval/auc": 0.7, "eval/loss": 0.3}, None) == 0.7
    assert objective_value({"eval/accuracy": 0.9, "eval/loss": 0.3}, "eval/loss") == 0.3
    assert objective_value({"eval/loss": 0.3}, "eval/top_5") is None


@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ["hydra.sweeper.n_trials=0", SPACE],
            "hydra.sweeper.n_trials=0: not allowed; expected an integer >= 1",
        ),
        (
            ["hydra.sweeper.n_jobs=2", SPACE],
            "hydra.sweeper.n_jobs=2: not allowed; expected 1 with Hydra's basic launcher",
        ),
        (
            ["hydra/sweeper/pruner=median", "parallel=data", SPACE],
            "hydra/sweeper/pruner='MedianPruner': not allowed; expected none for a distributed job",
        ),
        (
            ["hydra.sweeper.storage=not a url", SPACE],
            "hydra.sweeper.storage='not a url': not allowed; expected a database URL",
        ),
        # The password is in no line either: Hydra would write the URL into every job's record.
        (
            ["hydra.sweeper.storage=postgresql://ms_exp:s3cret@127.0.0.1/optuna", SPACE],
            "hydra.sweeper.storage='postgresql://ms_exp:***@127.0.0.1/optuna': a password in the URL "
            "would be written into the sweep's Hydra records and MLflow artifacts; expected a "
            "database URL without a password, the password in PGPASSWORD or ~/.pgpass (libpq reads "
            "them)",
        ),
        (
            ["hydra.sweeper.storage=postgresql://ms_exp:s3/cret@127.0.0.1/optuna", SPACE],
            "hydra.sweeper.storage='postgresql://ms_exp:***@127.0.0.1/optuna': a password in the URL "
            "would be written",
        ),
        (
            ["+hydra.sweeper.sampler.bogus=1", SPACE],
            "hydra.sweeper.sampler='optuna.samplers.TPESampler': ",
        ),
        ([], "hydra.sweeper.params=null: nothing to search; expected a search space"),
    ],
)
def test_bad_optuna_settings_are_refused_before_anything_runs(tmp_path, overrides, line):
    with pytest.raises(ConfigError) as refused:
        preflight(
            ["hydra/sweeper=optuna", f"hydra.sweep.dir={tmp_path}/sweep", *overrides], multirun=True
        )
    assert str(refused.value).startswith(line)
    assert "\n" not in str(refused.value) and list(tmp_path.iterdir()) == []


def test_an_existing_study_of_the_other_direction_or_a_dead_server_is_refused(tmp_path):
    optuna.create_study(
        study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}", direction="minimize"
    )
    sweep_dir = f"hydra.sweep.dir={tmp_path}/sweep"
    with pytest.raises(ConfigError) as refused:
        preflight(
            [*OPTUNA, SPACE, sweep_dir, f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
            multirun=True,
        )
    assert str(refused.value) == (
        f"hydra.sweeper.direction='maximize': not allowed; expected minimize, the direction "
        f"study s in sqlite:///{tmp_path / 'optuna.db'} was created with (or another "
        f"hydra.sweeper.study_name)"
    )
    from conftest import free_port

    dead = f"postgresql://ms_exp@127.0.0.1:{free_port()}/x"
    with pytest.raises(
        ConfigError,
        match=r"^hydra.sweeper.storage='postgresql://ms_exp"
        r"@127.0.0.1:\d+/x': .*; expected a database Optuna "
        r"can open$",
    ):
        preflight([*OPTUNA, SPACE, sweep_dir, f"hydra.sweeper.storage={dead}"], multirun=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optuna.db"]


def test_a_refused_setting_is_one_line_and_exit_2(tmp_path):
    result = main_in_process(
        "ms_exp.run", ["-m", *OPTUNA, "hydra.sweeper.n_trials=0", SPACE], tmp_path
    )
    assert (result.rc, result.stderr) == (
        2,
        "ms_exp: error: hydra.sweeper.n_trials=0: not allowed; expected an integer >= 1\n",
    )
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# A study in a database: resumed, extended, shared


def _states_so_far(folder) -> list:
    """The trials' states, read without writing: optuna.load_study would create the
    tables itself and race the sweep creating them ("table ... already exists")."""
    return [state for (state,) in _read(folder, "SELECT state FROM trials")]


def _heartbeat_ages_s(folder) -> list:
    """Seconds since each trial's last heartbeat, by the database's clock at the database's
    resolution (whole seconds), as Optuna measures it to find the stale ones."""
    return [
        age
        for (age,) in _read(
            folder,
            "SELECT strftime('%s', CURRENT_TIMESTAMP) - "
            "strftime('%s', heartbeat) FROM trial_heartbeats",
        )
    ]


def _read(folder, query: str) -> list:
    try:
        db = sqlite3.connect(f"file:{folder / 'optuna.db'}?mode=ro", uri=True)
    except sqlite3.OperationalError:  # no file yet
        return []
    try:
        return db.execute(query).fetchall()
    except sqlite3.OperationalError:  # no table yet
        return []
    finally:
        db.close()


@pytest.mark.e2e
def test_a_killed_sweep_resumes_its_running_trial_failed_and_the_same_command_resumes_it(tmp_path):
    """A study in a database across commands: a sweep killed with its process group in its
    first trial and run again at once (its trial fails at once: its process is gone, though
    its heartbeat is not old yet; its parent and trial runs end KILLED); the same command
    twice, its jobs in worker processes two at a time (the second command has
    nothing left to run); a larger n_trials extends it. The study minimises another metric
    than the default."""
    seed = "hydra.sweeper.sampler.seed=1"
    beat = "hydra.sweeper.heartbeat_interval=60"  # not old before the test ends
    minimize = ("sweep.metric=eval/loss", "hydra.sweeper.direction=minimize")
    concurrent = ("hydra/launcher=concurrent", "hydra.sweeper.n_jobs=2")
    command = [
        sys.executable,
        "-m",
        "ms_exp.run",
        "-m",
        *OPTUNA,
        *FAST,
        *DATA,
        SPACE,
        seed,
        beat,
        *minimize,
        "hydra.sweeper.n_trials=2",
        "trainer.epochs=1000",
        "trainer.loss_print_interval=1",
    ]
    process = subprocess.Popen(
        command,
        cwd=with_store(tmp_path),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        seen = []
        for line in process.stdout:  # the trial trains (and has beaten its heartbeat)
            seen.append(line)
            if line.startswith("epoch: 1 step: 1"):
                break
        else:
            pytest.fail("the sweep ended before its first trial trained:\n" + "".join(seen[-50:]))
        assert _states_so_far(tmp_path) == ["RUNNING"] and _heartbeat_ages_s(tmp_path)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()
    assert states(study(tmp_path)) == {0: "RUNNING"}
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    left = client.search_runs(["1"], "attributes.status = 'RUNNING'")
    assert len(left) == 2  # the killed sweep's parent and its trial's run

    # Three trials, two at a time in joblib's worker processes (one runs a second job).
    resumed = sweep(tmp_path, "hydra.sweeper.n_trials=3", seed, beat, *minimize, *concurrent)
    assert (
        "trials 0 were RUNNING when their worker stopped (its process is gone, or it "
        "stopped sending heartbeats): marked FAIL" in resumed.stdout
    )
    (ended,) = [
        line
        for line in resumed.stdout.splitlines()
        if line.endswith(" were RUNNING, their process gone: marked KILLED")
    ]
    assert set(ended[len("runs ") :].split(" were")[0].split(", ")) == {r.info.run_id for r in left}
    assert {client.get_run(r.info.run_id).info.status for r in left} == {"KILLED"}
    assert states(study(tmp_path)) == {0: "FAIL", 1: "COMPLETE", 2: "COMPLETE", 3: "COMPLETE"}
    # optuna.db beside mlflow.db
    assert (tmp_path / "optuna.db").is_file()
    again = sweep(tmp_path, "hydra.sweeper.n_trials=3", seed, beat, *minimize, *concurrent)
    assert "3 of hydra.sweeper.n_trials=3 trials done already; nothing to run" in again.stdout
    sweep(tmp_path, "hydra.sweeper.n_trials=4", seed, beat, *minimize)
    found = study(tmp_path)
    assert states(found) == {0: "FAIL", **{n: "COMPLETE" for n in range(1, 5)}}
    runs = runs_by_trial(tmp_path)
    # Every trial ran once: the killed one too (its run was made before it trained).
    assert sorted(runs) == [0, 1, 2, 3, 4] and all(len(r) == 1 for r in runs.values())
    complete = found.get_trials()[1:]
    for trial in complete:
        (run,) = runs[trial.number]
        assert float(run.data.params["optimizer.lr"]) == trial.params["optimizer.lr"]
        assert run.data.metrics["eval/loss"] == trial.value
        assert run.data.tags["ms_exp.optuna.study"] == "s"
    assert found.best_value == min(t.value for t in complete)
    # The seed moved on: no resumed sweep drew an earlier trial's value again.
    assert len({t.params["optimizer.lr"] for t in found.get_trials()}) == 5
    parent = client.get_run(resumed.field("MLflow parent run ").split()[0])
    assert parent.data.tags["ms_exp.optuna.study"] == "s"
    assert parent.data.tags["ms_exp.optuna.storage"] == f"sqlite:///{tmp_path / 'optuna.db'}"
    # The report ranks the jobs by what the study minimised.
    assert parent.data.tags["ms_exp.sweep.metric"] == "eval/loss"
    assert "by eval/loss, lowest first, as the sweep minimizes it" in resumed.stdout


@pytest.mark.e2e
def test_two_sweep_commands_share_one_study_and_no_trial_runs_twice(tmp_path):
    def start(seed: int, folder: str):
        args = [
            sys.executable,
            "-m",
            "ms_exp.run",
            "-m",
            *OPTUNA,
            *TINY,
            SPACE,
            "hydra.sweeper.n_trials=4",
            f"hydra.sweeper.sampler.seed={seed}",
            f"hydra.sweep.dir={folder}",
        ]
        return subprocess.Popen(
            args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    workers = [start(1, "a"), start(2, "b")]
    outputs = [w.communicate(timeout=400)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    found = study(tmp_path)
    done = [t for t in found.get_trials() if t.state.name == "COMPLETE"]
    # n_trials counts the study's trials, both workers together (a trial that was running
    # in one when the other completed the fourth still finishes)
    assert 4 <= len(done) <= 5 and len(found.get_trials()) == len(done)
    runs = runs_by_trial(tmp_path)
    assert sorted(runs) == [t.number for t in done]
    assert all(len(r) == 1 for r in runs.values())  # every trial ran once, in one worker
    parents = {r.data.tags["mlflow.parentRunId"] for rs in runs.values() for r in rs}
    assert len(parents) == 2
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert {client.get_run(p).data.tags["ms_exp.optuna.study"] for p in parents} == {"s"}
    # each worker's folders are its trials' numbers
    folders = {
        int(p.name) for d in ("a", "b") for p in (tmp_path / d).iterdir() if p.name.isdigit()
    }
    assert folders == set(runs)


@pytest.mark.server
@pytest.mark.e2e
def test_workers_share_a_study_in_postgresql_and_its_password_is_recorded_nowhere(
    tmp_path, postgres
):
    postgres, password = postgres
    env = {**os.environ, "PGPASSWORD": password}
    storage = f"hydra.sweeper.storage={postgres}"

    def start(seed: int, folder: str):
        args = [
            sys.executable,
            "-m",
            "ms_exp.run",
            "-m",
            *OPTUNA,
            *TINY,
            SPACE,
            storage,
            "hydra.sweeper.n_trials=3",
            f"hydra.sweeper.sampler.seed={seed}",
            f"hydra.sweep.dir={folder}",
        ]
        return subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    workers = [start(1, "a"), start(2, "b")]
    outputs = [w.communicate(timeout=400)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    os.environ["PGPASSWORD"] = password
    try:
        found = optuna.load_study(study_name="s", storage=postgres)
    finally:
        del os.environ["PGPASSWORD"]
    done = sorted(t.number for t in found.get_trials() if t.state.name == "COMPLETE")
    assert 3 <= len(done) <= 4 and sorted(runs_by_trial(tmp_path)) == done
    assert not (tmp_path / "optuna.db").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parents = client.search_runs(["1"], "tags.`ms_exp.sweep` = 'true'")
    assert {p.data.tags["ms_exp.optuna.storage"] for p in parents} == {postgres}
    # The report at each worker's end read the study from the server.
    assert all("optuna_trials.md" in o for o in outputs)
    for run in client.search_runs(["1"]):
        assert password not in json.dumps([run.data.tags, run.data.params])
    # Nor in any file: the workers' folders (multirun.yaml, each trial's .hydra/*.yaml,
    # config.yaml, console.log), the runs' artifacts (hydra/*.yaml, config/, logs/) and the
    # MLflow store; the storage's URL, without it, is where Hydra and the runs record it.
    assert password not in "".join(outputs)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in files if password.encode() in p.read_bytes()]
    recorded = {
        str(p.relative_to(tmp_path))
        for p in files
        if f"storage: {postgres}\n".encode() in p.read_bytes()
    }
    hydra_records = {str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/*/.hydra/hydra.yaml")}
    assert hydra_records and {"a/multirun.yaml", "b/multirun.yaml", *hydra_records} <= recorded
    assert [
        name
        for name in recorded
        if name.startswith("mlartifacts/") and name.endswith("/artifacts/hydra/hydra.yaml")
    ], recorded
    for pattern in (
        "*/*/config.yaml",
        "*/*/console.log",
        "*/*/.hydra/overrides.yaml",
        "mlartifacts/*/*/artifacts/config/config.yaml",
    ):
        assert list(tmp_path.glob(pattern)), pattern


# ---------------------------------------------------------------------------------------------
# Pruning


@pytest.mark.e2e
@pytest.mark.parametrize(
    "launcher",
    [
        "basic",
        # the pool's worker process: the pruned trial comes back pickled from another process,
        # as from joblib's or submitit's (submitit's job processes run a user's sweep in
        # tests/test_user_project.py)
        "pool",
    ],
)
def test_a_trial_worse_than_the_median_after_an_epoch_is_pruned(tmp_path, launcher):
    # Trial 0 (the sampler's seed orders the two values) trains with a good rate; trial 1,
    # whose rate barely moves the weights, is behind it after epoch 1 (of 2: it is pruned
    # before its end).
    result = run_cli(
        "ms_exp.run",
        [
            "-m",
            *OPTUNA,
            *FAST,
            f"hydra/launcher={launcher}",
            "trainer.epochs=2",
            "optimizer.lr=choice(0.1,0.0001)",
            "hydra.sweeper.n_trials=2",
            "hydra/sweeper/sampler=brute_force",
            "hydra.sweeper.sampler.seed=1",
            "hydra/sweeper/pruner=median",
            "hydra.sweeper.pruner.n_startup_trials=1",
        ],
        with_store(tmp_path),
    )
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Optuna study s pruned trial 1 after epoch 1 (eval/accuracy " in result.stdout
    assert "Error executing job" not in result.stdout + result.stderr
    found = study(tmp_path)
    assert states(found) == {0: "COMPLETE", 1: "PRUNED"}
    assert list(found.trials[0].intermediate_values) == [1, 2]
    assert list(found.trials[1].intermediate_values) == [1]
    (pruned,) = runs_by_trial(tmp_path)[1]
    assert pruned.info.status == "KILLED"
    assert pruned.data.tags["ms_exp.pruned_epoch"] == "1"
    assert pruned.data.tags["ms_exp.ended_by"] == "pruned by Optuna study s after epoch 1"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(pruned.info.run_id, "eval/accuracy")
    assert [m.value for m in history] == [found.trials[1].intermediate_values[1]]
    assert pruned.info.artifact_uri and "train/loss" in pruned.data.metrics
    parent = client.get_run(pruned.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep/pruned_jobs"] == 1.0
    assert parent.data.metrics["sweep/failed_jobs"] == 0.0
    assert "1 of 2 jobs finished, 1 pruned" in result.stdout


# ---------------------------------------------------------------------------------------------
# Fail-fast

# Every job's data reader fails once the command line was validated. One process runs the
# four sweeps below, each in its own folder (``main()`` as ``python -m ms_exp.run`` calls it).
FAILING = """
import json, os, sys
import ms_exp.data
from ms_exp.run import main

def reader(*args, **kwargs):
    raise OSError("disk went away")

ms_exp.data.create_datasets = reader
for folder, args in json.loads(sys.argv[1]):
    os.chdir(folder)
    print(f"=== sweep in {folder}", flush=True)
    try:
        code = main(args)
    except SystemExit as exit:
        code = exit.code
    print(f"=== exit {code}", flush=True)
"""
FAILING_SWEEPS = {  # name: its overrides
    "plain-true": ("trainer.seed=1,2", "sweep.fail_fast=true"),
    "plain-false": ("trainer.seed=1,2", "sweep.fail_fast=false"),
    "optuna-true": (*OPTUNA, SPACE, "hydra.sweeper.n_trials=2", "sweep.fail_fast=true"),
    "optuna-false": (*OPTUNA, SPACE, "hydra.sweeper.n_trials=2", "sweep.fail_fast=false"),
}


@pytest.fixture(scope="module")
def failing_sweeps(tmp_path_factory):
    """Name -> (exit status, what it printed, its folder, parent run, child runs)."""
    root = tmp_path_factory.mktemp("failing")
    cases = [(str(root / name), ["-m", *TINY, *args]) for name, args in FAILING_SWEEPS.items()]
    for folder, _ in cases:  # each with a store of its own
        with_store(Path(folder))
    done = subprocess.run(
        [sys.executable, "-c", FAILING, json.dumps(cases)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout.split("=== sweep in ")[1:]
    assert len(printed) == len(cases), done.stdout[-3000:]
    found = {}
    for name, text in zip(FAILING_SWEEPS, printed):
        folder = root / name
        assert text.startswith(f"{folder}\n"), text[:200]
        code = int(text.rsplit("=== exit ", 1)[1].split()[0])
        client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
        runs = client.search_runs(["1"])
        (parent,) = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
        children = [r for r in runs if r is not parent]
        found[name] = (code, text, folder, parent, children)
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("fail_fast, jobs", [("true", 1), ("false", 2)])
def test_fail_fast_starts_no_job_after_the_first_failed_one(failing_sweeps, fail_fast, jobs):
    code, stdout, _, parent, children = failing_sweeps[f"plain-{fail_fast}"]
    assert code == 1
    assert len(children) == jobs and {c.info.status for c in children} == {"FAILED"}
    assert parent.info.status == "FAILED"
    # The job's overrides as Hydra's basic sweeper writes them (false as False).
    job = " ".join(TINY).replace("=false", "=False")
    assert parent.data.tags["ms_exp.sweep.failed_jobs"].startswith(f"#0 {job} trainer.seed=1")
    assert f"failed: #0 {job} trainer.seed=1" in stdout


@pytest.mark.e2e
@pytest.mark.parametrize("fail_fast, trials", [("true", 1), ("false", 2)])
def test_fail_fast_stops_the_optuna_study_at_its_first_failed_trial(
    failing_sweeps, fail_fast, trials
):
    code, _, folder, parent, children = failing_sweeps[f"optuna-{fail_fast}"]
    assert code == 1
    assert states(study(folder)) == {n: "FAIL" for n in range(trials)}
    assert len(children) == trials and parent.info.status == "FAILED"
    # the parent names the failed jobs, the first one first
    assert parent.data.tags["ms_exp.sweep.failed_jobs"].startswith(f"#0 {' '.join(TINY)}")
