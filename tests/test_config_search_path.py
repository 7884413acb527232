"""A user project's own config folder: ``--config-dir``, ``--config-path``/``--config-name``
and ``hydra.searchpath`` compose the user's options with ms_exp's, in the checks, ``--help``
and the refusal of an unknown option exactly as in Hydra's own run."""

import os
from pathlib import Path

import pytest
from conftest import FAST, main_in_process, run_cli
from omegaconf import OmegaConf

from ms_exp.config.errors import ConfigError
from ms_exp.preflight.compose import ConfigSource, compose_config, preflight
from ms_exp.run import parse_args, share_import_path

# A user's option that re-uses a built-in schema, an experiment preset, and a primary
# config of the project's own that extends ms_exp's (as README "Your own config folder").
USER_FILES = {
    "model/my_mlp.yaml": "defaults:\n  - /schema/model/mlp@_here_\n  - _self_\nhidden_size: 8\n",
    "experiment/my_exp.yaml": "# @package _global_\ntrainer:\n  epochs: 3\n",
    "experiment/bad_exp.yaml": "# @package _global_\ntrainer:\n  epochs: 0\n",
    "my_config.yaml": (
        "defaults: [config, _self_]\nhydra: {searchpath: [pkg://ms_exp.conf]}\n"
        "trainer:\n  epochs: 2\n"
    ),
}


@pytest.fixture
def project(tmp_path) -> Path:
    for name, text in USER_FILES.items():
        path = tmp_path / "conf" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def job_config(result):
    assert result.rc == 0, result.stderr[-3000:]
    return OmegaConf.create(result.stdout)


def refusal(result) -> str:
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_config_dir_composes_the_users_options(project):
    cfg = job_config(
        main_in_process(
            "ms_exp.run",
            ["--config-dir", "conf", "model=my_mlp", "+experiment=my_exp", "--cfg", "job"],
            project,
        )
    )
    assert (cfg.model.name, cfg.model.hidden_size, cfg.trainer.epochs) == ("mlp", 8, 3)


def test_preflight_sees_the_config_dir(project, monkeypatch):
    monkeypatch.chdir(project)
    args = parse_args(["--config-dir", "conf", "model=my_mlp", "+experiment=my_exp"])
    (cfg,) = preflight(args.overrides, source=ConfigSource.from_args(args))
    assert (cfg.model.hidden_size, cfg.trainer.epochs) == (8, 3)
    assert cfg.hydra.runtime.choices.model == "my_mlp"
    # The user's values go through the same checks as ms_exp's own.
    with pytest.raises(ConfigError, match=r"^trainer\.epochs=0: "):
        preflight(["+experiment=bad_exp"], source=ConfigSource(config_dir="conf"))


def test_searchpath_override(project):
    searchpath = f"hydra.searchpath=[file://{project / 'conf'}]"
    (cfg,) = preflight([searchpath, "model=my_mlp", "+experiment=my_exp"])
    assert (cfg.model.hidden_size, cfg.trainer.epochs) == (8, 3)
    line = refusal(main_in_process("ms_exp.run", [searchpath, "model=nosuch"], project))
    assert line.endswith("expected one of mlp, my_mlp, resnet, wide_deep")


def test_users_primary_config_extends_ms_exps(project):
    conf = str(project / "conf")
    cfg = job_config(
        main_in_process(
            "ms_exp.run",
            ["--config-path", conf, "--config-name", "my_config", "model=my_mlp", "--cfg", "job"],
            project,
        )
    )
    assert (cfg.model.hidden_size, cfg.trainer.epochs, cfg.dataset.name) == (8, 2, "digits")
    (checked,) = preflight(
        ["model=my_mlp"], source=ConfigSource(config_path=conf, config_name="my_config")
    )
    assert checked.trainer.epochs == 2
    assert (
        compose_config(source=ConfigSource(config_path=conf, config_name="my_config")).model.name
        == "mlp"
    )


def test_unknown_option_lists_every_folder(project):
    line = refusal(main_in_process("ms_exp.run", ["--config-dir", "conf", "model=nosuch"], project))
    assert line == (
        "ms_exp: error: model='nosuch': unknown option; "
        "expected one of mlp, my_mlp, resnet, wide_deep"
    )
    line = refusal(
        main_in_process("ms_exp.run", ["--config-dir", "conf", "+experiment=nosuch"], project)
    )
    assert "my_exp" in line and "model_saving" in line
    assert not (project / "outputs").exists() and not (project / "mlflow.db").exists()


def test_a_users_option_named_without_its_config_dir_says_to_add_it(project):
    line = refusal(main_in_process("ms_exp.run", ["model=my_mlp"], project))
    assert line == (
        "ms_exp: error: model='my_mlp': unknown option; expected one of mlp, "
        "resnet, wide_deep; conf/model/my_mlp.yaml is there: add --config-dir conf"
    )
    # An option no folder here holds gets no such hint.
    line = refusal(main_in_process("ms_exp.run", ["model=nosuch"], project))
    assert line.endswith("expected one of mlp, resnet, wide_deep")
    assert sorted(p.name for p in project.iterdir()) == ["conf"]


def test_bad_config_folders_are_one_line(project):
    line = refusal(main_in_process("ms_exp.run", ["--config-dir", "no_such_dir"], project))
    assert line.startswith("ms_exp: error: --config-dir='no_such_dir': no such folder")


@pytest.mark.e2e
def test_a_relative_config_path_that_is_no_folder_is_one_line(project):
    # A subprocess: Hydra resolves a relative --config-path against the __main__ module,
    # which only `python -m ms_exp.run` makes ms_exp.run.
    line = refusal(run_cli("ms_exp.run", ["--config-path", "no_such_dir"], project))
    assert line.startswith("ms_exp: error: --config-path='no_such_dir': no such folder")
    assert "absolute path" in line


def test_help_lists_the_users_options(project):
    result = main_in_process("ms_exp.run", ["--config-dir", "conf", "--help"], project)
    assert result.rc == 0, result.stderr
    lines = result.stdout.splitlines()
    model = next(line for line in lines if line.split()[:1] == ["model"])
    assert model.split(None, 1)[1] == "mlp, my_mlp, resnet, wide_deep"
    experiment = next(line for line in lines if line.strip().startswith("+experiment"))
    assert "my_exp" in experiment and "model_saving" in experiment


def test_jobs_import_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/a", "/b"]))
    share_import_path()
    share_import_path()
    assert os.environ["PYTHONPATH"] == os.pathsep.join([str(tmp_path), "/a", "/b"])
    monkeypatch.delenv("PYTHONPATH")
    share_import_path()
    assert os.environ["PYTHONPATH"] == str(tmp_path)


@pytest.mark.e2e
def test_training_run_with_the_users_options(project):
    # Hydra's flags come before the overrides (its argument parser does not mix them).
    result = run_cli(
        "ms_exp.run",
        [
            "--config-dir",
            "conf",
            *FAST,
            "model=my_mlp",
            "+experiment=my_exp",
            "trainer.epochs=1",
            "dataset=synthetic",
            "dataset.num_samples=64",
            "dataset.num_eval_samples=32",
        ],
        project,
    )
    assert result.rc == 0, result.stderr[-3000:]
    run = result.store.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.hidden_size"] == "8"


@pytest.mark.parametrize(
    "text, line, column, found",
    [
        (
            "trainer:\n\tepochs: 2\n",
            3,
            1,
            "while scanning for the next token: found character '\\t' that cannot start any token",
        ),
        (
            "trainer:\n  epochs: 2\n  epochs: 3\n",
            4,
            3,
            "while constructing a mapping: found duplicate key epochs",
        ),
    ],
)
def test_an_experiment_file_that_is_not_yaml_is_named_in_one_line(
    tmp_path, text, line, column, found
):
    experiment = tmp_path / "conf" / "experiment" / "mine.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\n" + text)
    result = main_in_process("ms_exp.run", ["--config-dir", "conf", "+experiment=mine"], tmp_path)
    assert (result.rc, result.stderr) == (
        2,
        (
            f"ms_exp: error: {experiment}, line {line}, column {column}: not valid YAML ({found}); "
            "expected YAML: spaces for indentation, each key once\n"
        ),
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf"]
