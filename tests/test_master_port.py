"""The master port: chosen free when the job launches unless set, so that distributed jobs
on one machine run side by side; an explicit port is honoured and checked.

The rendering and the refusals here; the jobs (two side by side with chosen ports, a third
refused the port one of them holds) are in test_distributed.py, on the jobs its tests share
(test_two_distributed_jobs_with_default_ports_run_side_by_side,
test_a_second_job_on_the_same_explicit_port_is_refused)."""

import pytest
from conftest import free_port

from ms_exp.config.errors import ConfigError
from ms_exp.job.launch_plan import COMMAND_FILE, launch_plan, save_command
from ms_exp.parallel.checks import port_is_free
from ms_exp.preflight.compose import compose_config, preflight
from ms_exp.run import main

ERROR = "ms_exp: error: "


def test_a_free_port_is_chosen_once_and_every_rendering_says_it(tmp_path):
    cfg = compose_config(["parallel=data"])
    assert cfg.parallel.launcher.master_port is None
    commands = save_command(cfg.parallel, tmp_path)
    port = cfg.parallel.launcher.master_port
    assert 1024 <= port <= 65535 and port_is_free("127.0.0.1", port)
    assert commands == (
        f"msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 "
        f"--master_port={port} --node_rank=-1 --log_dir={tmp_path}/log_output --join=True "
        f"--tail_worker_log=0 --cluster_time_out=600 python -m ms_exp.worker --run-dir {tmp_path}"
    )
    assert (tmp_path / COMMAND_FILE).read_text().splitlines()[-1] == commands
    # What ms_exp/job/supervise.py runs is rendered again from the same config.
    assert launch_plan(cfg.parallel, tmp_path).commands() == commands


def test_an_explicit_port_is_rendered_as_given(tmp_path):
    cfg = compose_config(["parallel=semi_auto", "parallel.launcher.master_port=8200"])
    assert "--master_port=8200 " in save_command(cfg.parallel, tmp_path)
    assert cfg.parallel.launcher.master_port == 8200


def test_several_nodes_need_an_explicit_port(workdir, capsys):
    rc = main(
        [
            "parallel=data",
            "parallel.device_num=4",
            "parallel.launcher.local_worker_num=2",
            "parallel.launcher.node_rank=0",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (rc, err) == (
        2,
        [
            ERROR + "parallel.launcher.master_port=null: not allowed; expected a port from 1024 "
            "to 65535 when the workers span 2 nodes (every node's msrun must reach the same "
            "scheduler; null chooses a free port on one node only)"
        ],
    )
    assert list(workdir.iterdir()) == []


def test_a_concurrent_sweep_checks_only_ports_set_explicitly(workdir):
    sweep = ["hydra/launcher=concurrent", "parallel=data", "optimizer.lr=0.01,0.1"]
    assert len(preflight(sweep, multirun=True)) == 2
    port = free_port()
    with pytest.raises(ConfigError) as refused:
        preflight([*sweep, f"parallel.launcher.master_port={port}"], multirun=True)
    assert str(refused.value).startswith(
        f"parallel.launcher.master_port={port}: not allowed; "
        "expected a different port for each distributed job"
    )
