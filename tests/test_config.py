"""Composition of every group option, --help and --cfg, and the refusal of bad input."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from ms_exp.config.compose import CONF_DIR, compose_config
from ms_exp.config.schema import GROUP_SCHEMAS
from ms_exp.run import main

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
    assert (choices["dataset"], choices["model"], choices["checkpoint"]) == \
        ("mnist", "mlp", "sliced")
    assert cfg.optimizer.name.value == "sgd" and cfg.optimizer.lr == 0.01
    assert cfg.dataset.batch_size == 32 and cfg.trainer.loss_print_interval == 20
    assert cfg.loss.name.value == "cross_entropy"
    assert (cfg.checkpoint.save_checkpoint_steps, cfg.checkpoint.keep_checkpoint_max,
            cfg.checkpoint.integrated_save) == (1000, 1, False)


@pytest.mark.parametrize("name,integrated,keep", [("model_saving_sliced", False, 1),
                                                  ("model_saving_integrated", True, 3)])
def test_eight_rank_tutorial_presets(name, integrated, keep):
    cfg = compose_config([f"+experiment={name}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices["parallel"] == "semi_auto"
    assert cfg.parallel.device_num == 8
    assert cfg.parallel.strategies == {"layer1": {"matmul": [[2, 1], [1, 2]]},
                                       "layer3": {"matmul": [[2, 2], [2, 1]]}}
    assert cfg.checkpoint.integrated_save is integrated
    assert cfg.checkpoint.keep_checkpoint_max == keep
    assert cfg.checkpoint.save_checkpoint_steps == 1000
    assert cfg.optimizer.name.value == "sgd" and cfg.dataset.name == "mnist"


def test_help_lists_every_group_and_option(tmp_path):
    result = run_cli("ms_exp.run", ["--help"], tmp_path)
    assert result.rc == 0
    for group, options in GROUP_SCHEMAS.items():
        line = next(l for l in result.stdout.splitlines() if l.strip().startswith(group + " "))
        assert all(option in line for option in options), line
    assert "+experiment dim_reduce_search, dim_reduce_stage_one, dim_reduce_stage_two, "\
           "model_saving, model_saving_integrated, model_saving_sliced" in \
        result.stdout
    assert "schema/" not in result.stdout
    assert not (tmp_path / "outputs").exists()


def test_cfg_job_prints_the_resolved_config(tmp_path):
    result = run_cli("ms_exp.run", ["--cfg", "job", "dataset=synthetic",
                                    "dataset.num_classes=3"], tmp_path)
    assert result.rc == 0
    assert "num_classes: 3" in result.stdout and "name: synthetic" in result.stdout
    assert "epochs: 10" in result.stdout


BAD_INPUTS = {
    "unknown group option": (["dataset=cifar"],
                             "dataset='cifar': unknown option; expected one of criteo, "
                             "digits, imagenet, mnist, synthetic"),
    "unknown key": (["model.hiden_size=3"],
                    "model.hiden_size=3: unknown key; expected one of hidden_size, name, "
                    "weight_init"),
    "unknown key added with +": (["+trainer.warmup=3"], "trainer.warmup=3: unknown key"),
    "wrong type": (["dataset.batch_size=abc"],
                   "dataset.batch_size='abc': not allowed; expected an integer"),
    "batch size 0": (["dataset.batch_size=0"],
                     "dataset.batch_size=0: not allowed; expected an integer >= 1"),
    "missing dataset path": (["dataset=mnist", "dataset.path=/no/such/mnist"],
                             "dataset.path='/no/such/mnist': not allowed; "
                             "expected a folder that exists"),
    "dataset path unset": (["dataset=imagenet"], "dataset.path=null: not allowed; expected a "
                           "folder that exists (set it, or the DATA_PATH environment variable)"),
    "device target": (["trainer.device_target=TPU"],
                      "trainer.device_target='TPU': not allowed; expected one of None, CPU, "
                      "GPU, Ascend"),
    "device id": (["trainer.device_id=-1"],
                  "trainer.device_id=-1: not allowed; expected an integer >= 0"),
    "tracking uri scheme": (["tracking.uri=ftp://x"], "tracking.uri='ftp://x': not allowed"),
    "context mode": (["trainer.mode=eager"],
                     "trainer.mode='eager': not allowed; expected one of graph, pynative"),
    "unknown parallel option": (["parallel=pipeline"],
                                "parallel='pipeline': unknown option; expected one of auto, "
                                "data, semi_auto, stand_alone"),
    "stand-alone on two devices": (["parallel.device_num=2"],
                                   "parallel.device_num=2: not allowed; expected 1 for "
                                   "parallel=stand_alone"),
    "workers other than devices": (["parallel=data", "parallel.launcher.worker_num=4"],
                                   "parallel.launcher.worker_num=4: not allowed; expected null "
                                   "or parallel.device_num (2): one worker per device"),
    "node rank beyond the nodes": (["parallel=data", "parallel.launcher.local_worker_num=1",
                                    "parallel.launcher.node_rank=2"],
                                   "parallel.launcher.node_rank=2: not allowed; expected this "
                                   "node's rank, 0 to 1 (2 workers, 1 on each node)"),
    "master port out of range": (["parallel=data", "parallel.launcher.master_port=80"],
                                 "parallel.launcher.master_port=80: not allowed; expected a "
                                 "port from 1024 to 65535"),
    "fusion config not increasing": (["parallel=data",
                                      "parallel.all_reduce_fusion_config=[35,20]"],
                                     "parallel.all_reduce_fusion_config=[35, 20]: not allowed"),
    "auto search mode": (["parallel=auto", "parallel.search_mode=random"],
                         "parallel.search_mode='random': not allowed; expected one of "
                         "sharding_propagation, dynamic_programming, recursive_programming"),
    "resnet on 8x8 digits": (["model=resnet"], "model='resnet': not allowed; expected images "
                             "of at least 32x32; dataset=digits has 8x8"),
    "label smoothing conflict": (["loss.name=softmax_cross_entropy", "loss.label_smoothing=0.1"],
                                 "loss.label_smoothing=0.1: not allowed"),
    "one bad job of a sweep": (["-m", "trainer.epochs=1,0"],
                               "trainer.epochs=0: not allowed; expected an integer >= 1"),
}


@pytest.mark.parametrize("argv,message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_refused_in_one_line_before_anything_is_created(workdir, capsys, argv,
                                                                     message, monkeypatch):
    monkeypatch.delenv("DATA_PATH", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ms_exp: error: ")
    assert message in err[0]
    assert list(workdir.iterdir()) == []  # no outputs/, multirun/, mlflow.db


def test_unwritable_output_directory_is_refused(workdir, capsys):
    blocker = workdir / "a_file"
    blocker.write_text("not a folder")
    assert main([f"hydra.run.dir={blocker}/run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ms_exp: error: hydra.run.dir='{blocker}/run': not allowed; expected a "
                   f"writable folder ({blocker} is a file, not a folder)")
    assert sorted(p.name for p in workdir.iterdir()) == ["a_file"]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux's read-only /proc")
def test_read_only_output_directory_is_refused_even_for_root(workdir, capsys):
    assert main(["hydra.run.dir=/proc/ms_exp_run"]) == 2
    assert "hydra.run.dir='/proc/ms_exp_run': not allowed; expected a writable folder" in \
        capsys.readouterr().err


def test_busy_master_port_is_refused(workdir, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["parallel=data", f"parallel.launcher.master_port={port}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ms_exp: error: parallel.launcher.master_port={port}: not allowed; expected a free "
        f"port (another process is listening on 127.0.0.1:{port})")
    assert list(workdir.iterdir()) == []


def test_refusal_happens_before_mindspore_is_imported(tmp_path):
    code = ("import sys; from ms_exp.run import main; rc = main(['dataset.batch_size=0']); "
            "print(rc, 'mindspore' in sys.modules, 'mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "2 False False"
