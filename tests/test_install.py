"""ms_exp installed from its wheel (not editable) into a fresh virtual environment: the wheel
ships the config folder as the package ``ms_exp.conf``, and ``python -m ms_exp.run`` works
from a folder outside the checkout, with a user's own config folder too."""

import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import FAST, free_port, run_installed
from mlflow import MlflowClient

# Every test here goes through a built wheel and a fresh environment: the end-to-end lane.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
USER_MODEL = "defaults:\n  - /schema/model/mlp@_here_\n  - _self_\nhidden_size: 8\n"
# The primary config of a project of its own, as README "Your own config folder" shows it.
USER_PRIMARY = "defaults: [config, _self_]\nhydra: {searchpath: [pkg://ms_exp.conf]}\n"
TINY = (
    "trainer.epochs=1",
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A user project's folder, outside the checkout, with a config folder of its own."""
    assert ROOT not in tmp_path.parents
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "my_mlp.yaml").write_text(USER_MODEL)
    (tmp_path / "conf" / "my_config.yaml").write_text(USER_PRIMARY)
    return tmp_path


def test_wheel_ships_the_configs_and_every_module(built_wheel):
    names = set(zipfile.ZipFile(built_wheel).namelist())
    conf = {
        f"ms_exp/conf/{p.relative_to(ROOT / 'conf')}"
        for p in (ROOT / "conf").rglob("*.yaml")
        if "experiment" not in p.relative_to(ROOT / "conf").parts
    }
    presets = {f"ms_exp/conf/experiment/{p.name}" for p in (ROOT / "experiments").glob("*.yaml")}
    modules = {
        str(p.relative_to(ROOT))
        for folder in ("ms_exp", "hydra_plugins")
        for p in (ROOT / folder).rglob("*.py")
    }
    assert "ms_exp/conf/config.yaml" in conf and presets
    assert conf | presets | modules <= names


def test_installed_ms_exp_is_the_wheels(installed_wheel, outside):
    result = run_installed(
        installed_wheel,
        [
            "-c",
            (
                "import ms_exp, ms_exp.preflight.compose as c, ms_exp.tracking.provenance as p; "
                "print(ms_exp.__file__); print(c.conf_dir()); print(p.PROJECT_DIR)"
            ),
        ],
        outside,
    )
    assert result.returncode == 0, result.stderr
    package, conf, project = result.stdout.splitlines()
    venv = installed_wheel.parents[1]
    assert Path(package).is_relative_to(venv) and Path(conf).is_relative_to(venv)
    assert Path(conf).name == "conf" and Path(conf).parent == Path(package).parent
    assert project == "None"  # no checkout: no git state of ms_exp to record


def test_hydra_finds_ms_exps_sweeper_and_launcher_in_the_installed_wheel(installed_wheel, outside):
    # Hydra's own plugin scan, without ms_exp registering the classes.
    result = run_installed(
        installed_wheel,
        [
            "-c",
            (
                "from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
                "from hydra.plugins.launcher import Launcher; "
                "print(sorted(f'{p.__module__}.{p.__name__}' for kind in (Sweeper, Launcher) "
                "for p in Plugins.instance().discover(kind)))"
            ),
        ],
        outside,
    )
    assert result.returncode == 0, result.stderr
    assert "hydra_plugins.ms_exp_optuna_sweeper.optuna_sweeper.OptunaSweeper" in result.stdout
    assert "hydra_plugins.ms_exp_pool_launcher.pool_launcher.PoolLauncher" in result.stdout


def test_help_outside_the_checkout(installed_wheel, outside):
    result = run_installed(
        installed_wheel, ["-m", "ms_exp.run", "--config-dir", "conf", "--help"], outside
    )
    assert result.returncode == 0, result.stderr
    assert "model_saving" in result.stdout  # the presets shipped from experiments/
    model = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["model"])
    assert "my_mlp" in model and "wide_deep" in model


def test_users_config_folders_with_the_installed_configs(installed_wheel, outside):
    cfg = run_installed(
        installed_wheel,
        [
            "-m",
            "ms_exp.run",
            "--config-path",
            str(outside / "conf"),
            "--config-name",
            "my_config",
            "model=my_mlp",
            "--cfg",
            "job",
        ],
        outside,
    )
    assert cfg.returncode == 0, cfg.stderr
    assert "hidden_size: 8" in cfg.stdout and "name: digits" in cfg.stdout
    bad = run_installed(
        installed_wheel, ["-m", "ms_exp.run", "--config-dir", "conf", "model=nosuch"], outside
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "ms_exp: error: model='nosuch': unknown option; "
        "expected one of mlp, my_mlp, resnet, wide_deep"
    )


EXAMPLE = ROOT / "examples" / "my_project"
OWN = ("--config-dir", "conf", "model=tiny_net", "dataset=blobs")


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """examples/my_project copied outside the checkout, as a user's project would be."""
    copy = tmp_path_factory.mktemp("user") / "my_project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert ROOT not in copy.parents
    return copy


def run_example(python: Path, project: Path, module: str, *args: str):
    result = run_installed(python, ["-m", module, *args], project)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_a_sweep_of_the_example_trains_from_the_wheel_and_a_job_is_evaluated_by_run_id(
    installed_wheel, example
):
    result = run_example(
        installed_wheel,
        example,
        "ms_exp.run",
        "-m",
        *OWN,
        *FAST,
        "trainer.epochs=1",
        "model.hidden=8,16",
        "tracking.experiment_name=sweep",
    )
    assert "dataset=blobs: 512 training" in result.stdout
    store = MlflowClient(f"sqlite:///{example / 'mlflow.db'}")
    runs = store.search_runs([store.get_experiment_by_name("sweep").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.params["model.hidden"] for r in children) == ["16", "8"]
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 3
    run = children[0]
    assert run.data.params["model._target_"] == "my_project.nets.TinyNet"
    assert run.data.tags["ms_exp.version.ms_exp"] == "0.1.0"
    assert "ms_exp.git.project.commit" not in run.data.tags  # an installed ms_exp: no checkout
    evaluated = run_example(
        installed_wheel, example, "ms_exp.eval", "--run-id", run.info.run_id, "--config-dir", "conf"
    )
    assert f"'accuracy': {run.data.metrics['eval/accuracy']}" in evaluated.stdout


@pytest.mark.distributed
def test_ranks_of_the_example_from_the_wheel_import_its_modules_and_their_slices_merge(
    installed_wheel, example, tmp_path
):
    """Semi-auto parallel of the user's network on 2 ranks (on CPU ms_exp trains it data
    parallel and writes each rank's slice), from the wheel: the ranks import the project's
    modules and each reads half the data; the slices of the user's layer merge back to its
    weights. The project's callback runs on both ranks, or on rank 0 alone with
    rank_zero_only."""
    import mindspore as ms

    def epoch_log(name: str, rank_zero_only: str) -> str:
        return (
            f"{name}:{{_target_:my_project.callbacks.EpochLog,path:{tmp_path}/{name}.log,"
            f"rank_zero_only:{rank_zero_only}}}"
        )

    # 2 ranks: the option's strategy for 4 (2 x 2) is checked in-process
    # (tests/test_user_project.py); the 2 x 2 layouts' slices and their merge, on ms_exp's
    # network in tests/test_semi_auto.py.
    result = run_example(
        installed_wheel,
        example,
        "ms_exp.run",
        *OWN,
        *FAST,
        "trainer.epochs=1",
        "parallel=semi_auto_tiny",
        "parallel.device_num=2",
        "parallel.strategies.hidden.matmul=[[1,1],[1,2]]",
        "checkpoint=sliced",
        f"parallel.launcher.master_port={free_port()}",
        "tracking.experiment_name=ranks",
        f"+trainer.callbacks={{{epoch_log('every', 'false')},{epoch_log('once', 'true')}}}",
    )
    run_dir = Path(
        next(
            line.split(":", 1)[1].strip()
            for line in result.stdout.splitlines()
            if line.startswith("outputs:")
        )
    )
    for rank in range(2):
        log = (run_dir / "log_output" / f"worker_{rank}.log").read_text()
        assert "dataset=blobs: 256 training and 128 held-out samples" in log
    # One line per rank and epoch in the file both ranks append to; one per epoch with
    # rank_zero_only.
    assert [line.split()[:2] for line in (tmp_path / "every.log").read_text().splitlines()] == [
        ["epoch", "1"]
    ] * 2
    assert [line.split()[:2] for line in (tmp_path / "once.log").read_text().splitlines()] == [
        ["epoch", "1"]
    ]
    store = MlflowClient(f"sqlite:///{example / 'mlflow.db'}")
    (run,) = store.search_runs([store.get_experiment_by_name("ranks").experiment_id])
    assert run.info.status == "FINISHED"
    part = ms.load_checkpoint(str(run_dir / "checkpoints/rank_0/checkpoint-1_8.ckpt"))
    assert tuple(part["hidden.weight"].shape) == (16, 16)  # [16, 32] split on its columns
    merged = run_example(
        installed_wheel,
        example,
        "ms_exp.ckpt",
        "merge",
        str(run_dir),
        "--output",
        str(tmp_path / "merged"),
    )
    weights = ms.load_checkpoint(merged.stdout.strip().splitlines()[-1])
    assert tuple(weights["hidden.weight"].shape) == (16, 32)
    assert tuple(weights["out.weight"].shape) == (4, 32)
