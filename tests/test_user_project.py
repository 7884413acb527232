"""A user's own project (examples/my_project: its network, data, callback and conf/ folder)
trained through ms_exp from the checkout's install, everywhere the built-in options work;
and its bad components refused in one line before any run exists."""

import importlib
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest
from conftest import main_in_process, migrated_store, run_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_project"
OWN = ("--config-dir", "conf", "model=tiny_net", "dataset=blobs")
TINY = ("trainer.epochs=2", "trainer.progress_bar=never")
# blobs: 16 steps per epoch at batch 32; 4 snapshots an epoch from the first: 8 in 2 epochs,
# so the example's run is also the stage one of a dimension reduction.
SNAPSHOTS = ("checkpoint.snapshots.start_epoch=1", "checkpoint.snapshots.per_epoch=4")


def copy_example(folder: Path) -> Path:
    """A copy of the example project, so its runs write into a scratch folder."""
    copy = folder / "my_project"
    shutil.copytree(
        EXAMPLE,
        copy,
        ignore=shutil.ignore_patterns("__pycache__", "outputs", "multirun", "mlflow.db"),
    )
    return copy


def forget_project_modules() -> None:
    for name in [n for n in sys.modules if n.split(".")[0] == "my_project"]:
        del sys.modules[name]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the example project that this process imports as ``python -m ms_exp.run``
    started in its folder would: the folder first on ``sys.path``, no module of another
    test's copy left in ``sys.modules``."""
    copy = copy_example(tmp_path)
    monkeypatch.syspath_prepend(str(copy))
    forget_project_modules()
    yield copy
    forget_project_modules()


@pytest.fixture
def refusal(project, capfd):
    """``refusal(*overrides)``: ``python -m ms_exp.run`` of the project refused before any
    run exists (in-process: the refusal happens before any job starts); its one line."""

    def refused(*overrides: str) -> str:
        importlib.invalidate_caches()  # modules a test has just written
        capfd.readouterr()
        result = main_in_process("ms_exp.run", [*OWN, *TINY, *overrides], project)
        assert result.rc == 2, f"rc={result.rc}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        # Nor did anything write to the process's stderr past Python (MindSpore's C++ logs).
        assert capfd.readouterr().err == ""
        assert not (project / "outputs").exists() and not (project / "mlflow.db").exists()
        return lines[0]

    return refused


def train(project: Path, *args: str):
    """A run of the project from its folder; ms_exp's flags come before the overrides."""
    result = run_cli("ms_exp.run", [*args], project)
    assert result.rc == 0, f"rc={result.rc}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def write_module(project: Path, name: str, source: str) -> None:
    (project / "my_project" / f"{name}.py").write_text(textwrap.dedent(source))


# --- refused before any run exists ------------------------------------------------------


def test_a_model_target_that_does_not_import_is_refused(refusal):
    line = refusal("model._target_=my_project.nets.NoSuchNet")
    assert line.startswith(
        "ms_exp: error: model._target_='my_project.nets.NoSuchNet': does not import"
    )


def test_unknown_and_missing_arguments_name_the_parameters(project, refusal):
    line = refusal("+model.depth=3")
    assert line == (
        "ms_exp: error: model.depth=3: is not an argument of the target; expected "
        "a parameter of my_project.nets.TinyNet: input_shape, num_classes, hidden"
    )
    write_module(
        project,
        "strict",
        """
        from my_project.nets import TinyNet

        def net(input_shape, num_classes, width):
            return TinyNet(input_shape, num_classes, width)
    """,
    )
    line = refusal("model._target_=my_project.strict.net", "~model.hidden")
    assert line == (
        "ms_exp: error: model.width='missing': not allowed; expected a value: "
        "my_project.strict.net requires 'width' (its parameters: input_shape, "
        "num_classes, width)"
    )


def test_a_model_that_returns_no_cell_is_refused(project, refusal):
    write_module(
        project,
        "wrong",
        """
        def net(input_shape, num_classes, hidden=8):
            return [input_shape, num_classes]
    """,
    )
    line = refusal("model._target_=my_project.wrong.net")
    assert line == (
        "ms_exp: error: model._target_='my_project.wrong.net': returned a list; "
        "expected a mindspore.nn.Cell (a Cell class, or a function returning one)"
    )


def test_a_dataset_that_returns_something_else_is_refused(project, refusal):
    write_module(
        project,
        "wrong",
        """
        def data(split, size=4):
            return {"x": list(range(size))}
    """,
    )
    line = refusal(
        "dataset._target_=my_project.wrong.data",
        "~dataset.samples",
        "~dataset.features",
        "~dataset.classes",
    )
    assert line == (
        "ms_exp: error: dataset._target_='my_project.wrong.data': returned a "
        "dict for split='train'; expected a pair of numpy arrays (x, y), or a "
        "mindspore.dataset dataset of unbatched (data, label) samples"
    )
    # The target's own error, in one line, after the keys and values it was given.
    line = refusal("+dataset.spread=-1")
    assert line == (
        "ms_exp: error: dataset._target_='my_project.data.blobs': failed to "
        "build with dataset.samples=512, dataset.features=16, dataset.classes=4, "
        "dataset.spread=-1: ValueError: scale < 0; expected values of these keys "
        "that my_project.data.blobs accepts"
    )


def test_a_dataset_without_split_is_refused(project, refusal):
    write_module(
        project,
        "wrong",
        """
        def data(size=4):
            return None
    """,
    )
    line = refusal(
        "dataset._target_=my_project.wrong.data",
        "~dataset.samples",
        "~dataset.features",
        "~dataset.classes",
    )
    assert line == (
        "ms_exp: error: dataset._target_='my_project.wrong.data': does not take "
        "'split', which ms_exp passes; expected a callable taking 'split' (its "
        "parameters: size)"
    )


def test_shard_strategies_are_checked_against_the_users_operators(refusal):
    line = refusal("parallel=semi_auto_tiny", "+parallel.strategies.nosuch.matmul=[[2,1],[1,2]]")
    assert line.startswith("ms_exp: error: parallel.strategies: ")
    assert "nosuch" in line and "TinyNet" in line


def test_what_a_run_of_the_example_writes_is_ignored_by_git():
    """``git status`` stays clean after the example's runs and sweeps, in its folder as at
    the root, and no tracked file (the root's multirun/.gitkeep) is ignored."""
    written = [
        f"{folder}{name}"
        for folder in ("", "examples/my_project/")
        for name in (
            "multirun/2026-11-27/10-00-00/0/.hydra/config.yaml",
            "outputs/2026-11-27/10-00-00/config.yaml",
            "mlflow.db",
            "mlflow.db.lock",
            "mlartifacts/1/0a1b/artifacts/config.yaml",
        )
    ]
    git = ["git", "-C", str(EXAMPLE.parents[1])]
    checked = subprocess.run(
        [*git, "check-ignore", "--no-index", "--verbose", "--non-matching", *written],
        capture_output=True,
        text=True,
    )
    not_ignored = [line for line in checked.stdout.splitlines() if line.startswith("::")]
    assert not not_ignored, "\n".join(not_ignored)
    ignored_but_tracked = subprocess.run(
        [*git, "ls-files", "--cached", "--ignored", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ignored_but_tracked == []
    assert (EXAMPLE.parents[1] / "multirun" / ".gitkeep").is_file()


# --- trained ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The example's preset (its network, data and callback) run from a copy of the
    project, keeping weight snapshots (the stage one of the dimension reduction below);
    several tests read it back, and the other jobs run in its folder."""
    copy = copy_example(tmp_path_factory.mktemp("own"))
    shutil.copyfile(migrated_store(), copy / "mlflow.db")
    return train(copy, "--config-dir", "conf", "+experiment=blobs_quick", *TINY, *SNAPSHOTS)


@pytest.mark.e2e
def test_the_example_trains_and_is_recorded_with_its_targets(trained):
    run = trained.store.get_run(trained.run_id)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["model._target_"] == "my_project.nets.TinyNet"
    assert params["dataset._target_"] == "my_project.data.blobs"
    assert params["model.hidden"] == "32"
    assert params["trainer.callbacks.epoch_log._target_"] == "my_project.callbacks.EpochLog"
    assert run.data.tags["ms_exp.model"] == "TinyNet"
    assert run.info.run_name == "TinyNet-blobs-stand_alone"
    history = trained.store.get_metric_history(trained.run_id, "eval/accuracy")
    assert len(history) == 2 and history[-1].value > 0.5
    assert "512 training and 128 held-out samples of shape (16,), 4 classes" in trained.stdout
    # The project's callback ran in the job and wrote into the run directory.
    log = (trained.run_dir / "epochs.log").read_text().splitlines()
    assert [line.split()[:2] for line in log] == [["epoch", "1"], ["epoch", "2"]]
    # Weight snapshots of the user's network, as stage one of a dimension reduction keeps.
    assert len(list((trained.run_dir / "snapshots").glob("*.ckpt"))) == 8


@pytest.mark.e2e
def test_eval_from_rerun_and_resume_rebuild_the_users_network(trained, documented):
    # The run's config names the project's targets: trusted as the project's --config-dir
    # (the documented command, run before the resume below continues the run).
    evaluated = documented["python -m ms_exp.eval --run-id <run id> --config-dir conf"]
    assert evaluated.rc == 0, evaluated.stderr[-2000:]
    accuracy = trained.store.get_run(trained.run_id).data.metrics["eval/accuracy"]
    assert f"'accuracy': {accuracy}" in evaluated.stdout
    again = train(trained.cwd, "--from-run", trained.run_id, "--config-dir", "conf")
    assert again.store.get_run(again.run_id).data.metrics["eval/accuracy"] == accuracy
    # Without the snapshots: a snapshot series cannot be continued.
    longer = train(trained.cwd, *OWN, *TINY, "trainer.epochs=3", f"trainer.resume={trained.run_id}")
    assert "resuming" in longer.stdout.lower()
    history = longer.store.get_metric_history(trained.run_id, "eval/accuracy")
    assert [m.step for m in history][-1] > [m.step for m in history][0]


def _sweep_jobs(result, experiment: str):
    store = result.store
    runs = store.search_runs([store.get_experiment_by_name(experiment).experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len({r.data.tags["mlflow.parentRunId"] for r in children}) == 1
    return children


@pytest.mark.e2e
def test_a_submitit_sweep_of_dim_reduce_stage_two_over_the_users_data_argument(trained):
    """submitit's job processes import the project's modules, and stage two of a dimension
    reduction trains the user's network from the example's run and its snapshots: one
    parent, a child per value of the user's dataset argument."""
    result = train(
        trained.cwd,
        "-m",
        *OWN[:2],
        "+experiment=dim_reduce_stage_two",
        *OWN[2:],
        *TINY,
        "trainer.epochs=1",
        f"boost.stage_one_run_id={trained.run_id}",
        "boost.n_components=4",
        "+dataset.spread=0.5,1.0",
        "hydra/launcher=submitit_local",
        "tracking.experiment_name=sweep_submitit",
        "hydra.sweep.dir=multirun/submitit_local",
    )
    children = _sweep_jobs(result, "sweep_submitit")
    assert sorted(r.data.params["dataset.spread"] for r in children) == ["0.5", "1.0"]
    for run in children:
        assert run.info.status == "FINISHED"
        assert run.data.params["model._target_"] == "my_project.nets.TinyNet"
        assert run.data.params["boost.stage_one_run_id"] == trained.run_id
        assert run.data.tags["ms_exp.pca.source"] in ("computed", "cached")
        assert np.isfinite(run.data.metrics["eval/loss"])


# --- every command the example's README and its guide show, run as written ---------------

ROOT = EXAMPLE.parents[1]
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
PLACEHOLDER = re.compile(r"<[^<>]*run id[^<>]*>|<id>")
# Shown there but not run here: a server that runs until stopped, on a fixed port that
# another test process may hold (the browser tests start the same command on a free one).
NOT_RUN = {"mlflow ui --backend-store-uri sqlite:///$PWD/mlflow.db"}


def checked_only(command: str) -> bool:
    """Checked in-process below, not run: the example's ranks are trained from the wheel by
    tests/test_install.py (semi_auto_tiny on 2 ranks, its slices merged), and a job of
    ms_exp's own config alone (the guide's optimizer class) by tests/test_components.py."""
    words = command.split()
    ranks = any(w.startswith("parallel=") and w != "parallel=stand_alone" for w in words)
    return ranks or (words[:3] == ["python", "-m", "ms_exp.run"] and "--config-dir" not in words)


def documented_commands() -> List[str]:
    """The commands of examples/my_project/README.md's and docs/guides/own-experiments.md's
    bash blocks and of README.md's "Bringing your own model" block, in the order shown, each
    once: lines joined across a trailing backslash, comments and spacing dropped."""
    readme = (ROOT / "README.md").read_text()
    own_model = readme.split("## Bringing your own model", 1)[1].split("\n## ", 1)[0]
    texts = [
        (EXAMPLE / "README.md").read_text(),
        (ROOT / "docs" / "guides" / "own-experiments.md").read_text(),
        own_model,
    ]
    commands: List[str] = []
    for text in texts:
        for block in FENCE.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                command = PLACEHOLDER.sub("<run id>", " ".join(words))
                if command and command not in commands:
                    commands.append(command)
    return commands


def composed(command: str, project: Path) -> Optional[str]:
    """The one job config ``command`` composes from ``project``'s folder, when it is an
    ``ms_exp.run`` of the project's config folder that starts one job; else None."""
    from omegaconf import OmegaConf

    from ms_exp.preflight.compose import ConfigSource, compose_config

    words = shlex.split(command)
    if words[:5] != ["python", "-m", "ms_exp.run", "--config-dir", "conf"] or "-m" in words[3:]:
        return None
    source = ConfigSource(config_dir=str(project / "conf"))
    return OmegaConf.to_yaml(compose_config(words[5:], source=source))


@pytest.fixture(scope="module")
def documented(trained) -> Dict[str, Any]:
    """Each command the example's README and its guide show, run as written in the folder of
    the example's run (``trained``), whose id fills ``<run id>``: {command: its result}. A
    command that composes the very job of one run before it is composed, not run again."""
    results: Dict[str, Any] = {}
    jobs: Dict[str, str] = {}  # composed config: the command that ran it
    for command in documented_commands():
        if command in NOT_RUN or checked_only(command):
            continue
        words = shlex.split(command.replace("<run id>", trained.run_id))
        assert words[:2] == ["python", "-m"], f"a command this test does not run: {command}"
        config = composed(command, trained.cwd)
        if config is not None and config in jobs:
            results[command] = results[jobs[config]]
            continue
        started = time.monotonic()
        results[command] = run_cli(words[2], words[3:], trained.cwd, timeout=600)
        print(f"{time.monotonic() - started:5.1f} s  {command}")
        if config is not None:
            jobs[config] = command
    return results


@pytest.mark.e2e
def test_every_command_the_example_and_its_guide_show_runs_as_written(
    documented, trained, monkeypatch
):
    """As a user pastes them from the project's folder, after a run printed its id: none is
    refused or fails (the evaluation without ``--config-dir conf`` was refused). The ones
    that start ranks pass every check against the user's network (the example's strategy
    2 x 2 on 4 ranks); the guide's optimizer class passes them on ms_exp's own config."""
    from ms_exp.preflight.compose import ConfigSource, preflight
    from ms_exp.run import hydra_job, parse_args

    commands = documented_commands()
    assert commands[0] == "python -m ms_exp.run --config-dir conf model=tiny_net dataset=blobs"
    checked_here = [c for c in commands if checked_only(c)]
    assert NOT_RUN <= set(commands)
    assert set(documented) == set(commands) - NOT_RUN - set(checked_here)
    for command, result in documented.items():
        assert result.rc == 0, (
            f"{command}\nrc={result.rc}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )
    (evaluate,) = [c for c in commands if c.startswith("python -m ms_exp.eval")]
    assert evaluate == "python -m ms_exp.eval --run-id <run id> --config-dir conf"
    assert "result: {'accuracy': " in documented[evaluate].stdout
    monkeypatch.chdir(trained.cwd)
    monkeypatch.syspath_prepend(str(trained.cwd))
    forget_project_modules()
    checked = {}
    for command in checked_here:
        args = parse_args(shlex.split(command)[3:])
        (checked[command],) = preflight(
            args.overrides, source=ConfigSource.from_args(args, hydra_job)
        )
    forget_project_modules()
    assert sorted((c.parallel.mode, c.parallel.device_num) for c in checked.values()) == [
        ("data", 2),
        ("semi_auto", 4),
        ("stand_alone", 1),
    ]
    (own_optimizer,) = [c for c in checked.values() if c.parallel.mode == "stand_alone"]
    assert own_optimizer.optimizer._target_ == "mindspore.nn.AdamWeightDecay"
    (semi_auto,) = [c for c in checked.values() if c.parallel.mode == "semi_auto"]
    assert [list(s) for s in semi_auto.parallel.strategies.hidden.matmul] == [[2, 1], [1, 2]]
