"""Composition of every group option, --help and --cfg (bad input: test_bad_inputs.py)."""

from pathlib import Path

import pytest
from conftest import main_in_process

from ms_exp.config.schema import GROUP_SCHEMAS
from ms_exp.preflight.compose import CONF_DIR, compose_config

OPTIONS = [(group, option) for group, options in GROUP_SCHEMAS.items() for option in options]


def test_yaml_options_and_schemas_match_one_to_one():
    for group, options in GROUP_SCHEMAS.items():
        on_disk = {p.stem for p in (CONF_DIR / group).glob("*.yaml")}
        assert on_disk == set(options), group


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_of_every_group_composes(group, option):
    cfg = compose_config([f"{group}={option}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices[group] == option
    section = cfg[group]
    # Each option fills its own schema: the option is typed, not a bag of keys.
    schema = GROUP_SCHEMAS[group][option]
    assert set(section.keys()) == {f.name for f in schema.__dataclass_fields__.values()}


def test_checkpoint_options_map_to_what_they_say():
    integrated = compose_config(["checkpoint=integrated"]).checkpoint
    sliced = compose_config(["checkpoint=sliced"]).checkpoint
    none = compose_config(["checkpoint=none"]).checkpoint
    assert (integrated.save, integrated.integrated_save) == (True, True)
    assert (sliced.save, sliced.integrated_save) == (True, False)
    assert (none.save, none.keep_best) == (False, False)


def test_model_saving_experiment_is_the_tutorial_setup():
    cfg = compose_config(["+experiment=model_saving"], return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    assert (choices["dataset"], choices["model"], choices["checkpoint"]) == (
        "mnist",
        "mlp",
        "sliced",
    )
    assert cfg.optimizer.name.value == "sgd" and cfg.optimizer.lr == 0.01
    assert cfg.dataset.batch_size == 32 and cfg.trainer.loss_print_interval == 20
    assert cfg.loss.name.value == "cross_entropy"
    assert (
        cfg.checkpoint.save_checkpoint_steps,
        cfg.checkpoint.keep_checkpoint_max,
        cfg.checkpoint.integrated_save,
    ) == (1000, 1, False)


@pytest.mark.parametrize(
    "name,integrated,keep",
    [("model_saving_sliced", False, 1), ("model_saving_integrated", True, 3)],
)
def test_eight_rank_tutorial_presets(name, integrated, keep):
    cfg = compose_config([f"+experiment={name}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices["parallel"] == "semi_auto"
    assert cfg.parallel.device_num == 8
    assert cfg.parallel.strategies == {
        "layer1": {"matmul": [[2, 1], [1, 2]]},
        "layer3": {"matmul": [[2, 2], [2, 1]]},
    }
    assert cfg.checkpoint.integrated_save is integrated
    assert cfg.checkpoint.keep_checkpoint_max == keep
    assert cfg.checkpoint.save_checkpoint_steps == 1000
    assert cfg.optimizer.name.value == "sgd" and cfg.dataset.name == "mnist"


def test_help_lists_every_group_and_option(tmp_path):
    result = main_in_process("ms_exp.run", ["--help"], tmp_path)
    assert result.rc == 0
    for group, options in GROUP_SCHEMAS.items():
        line = next(
            text for text in result.stdout.splitlines() if text.strip().startswith(group + " ")
        )
        assert all(option in line for option in options), line
    assert (
        "+experiment dim_reduce_search, dim_reduce_stage_one, dim_reduce_stage_two, "
        "model_saving, model_saving_integrated, model_saving_sliced" in result.stdout
    )
    assert "schema/" not in result.stdout
    # Where each key is explained, beside the config it prints.
    assert (
        "What each key means, its type and the values allowed: docs/reference/config.md"
        in result.stdout
    )
    assert (Path(__file__).parents[1] / "docs" / "reference" / "config.md").is_file()
    assert not (tmp_path / "outputs").exists()


def test_cfg_job_prints_the_resolved_config(tmp_path):
    result = main_in_process(
        "ms_exp.run", ["--cfg", "job", "dataset=synthetic", "dataset.num_classes=3"], tmp_path
    )
    assert result.rc == 0
    assert "num_classes: 3" in result.stdout and "name: synthetic" in result.stdout
    assert "epochs: 10" in result.stdout
