"""The master port: chosen free when the job launches unless set, so that distributed jobs
on one machine run side by side; an explicit port is honoured and checked."""
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import FAST, free_port
from mlflow import MlflowClient

from ms_exp.config.errors import ConfigError
from ms_exp.job.launch_plan import COMMAND_FILE, launch_plan, save_command
from ms_exp.preflight.compose import compose_config, preflight
from ms_exp.preflight.parallel import port_is_free
from ms_exp.run import main

ERROR = "ms_exp: error: "
TINY = (*FAST, "parallel=data", "trainer.epochs=1")


def saved_port(run_dir: Path) -> int:
    line = (run_dir / COMMAND_FILE).read_text().splitlines()[-1].split()
    return int(next(a for a in line if a.startswith("--master_port=")).split("=")[1])


def test_a_free_port_is_chosen_once_and_every_rendering_says_it(tmp_path):
    cfg = compose_config(["parallel=data"])
    assert cfg.parallel.launcher.master_port is None
    commands = save_command(cfg.parallel, tmp_path)
    port = cfg.parallel.launcher.master_port
    assert 1024 <= port <= 65535 and port_is_free("127.0.0.1", port)
    assert commands == (
        f"msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 "
        f"--master_port={port} --node_rank=-1 --log_dir={tmp_path}/log_output --join=True "
        f"--tail_worker_log=0 --cluster_time_out=600 python -m ms_exp.worker --run-dir {tmp_path}")
    assert (tmp_path / COMMAND_FILE).read_text().splitlines()[-1] == commands
    # What ms_exp/job/supervise.py runs is rendered again from the same config.
    assert launch_plan(cfg.parallel, tmp_path).commands() == commands


def test_an_explicit_port_is_rendered_as_given(tmp_path):
    cfg = compose_config(["parallel=semi_auto", "parallel.launcher.master_port=8200"])
    assert "--master_port=8200 " in save_command(cfg.parallel, tmp_path)
    assert cfg.parallel.launcher.master_port == 8200


def test_several_nodes_need_an_explicit_port(workdir, capsys):
    rc = main(["parallel=data", "parallel.device_num=4", "parallel.launcher.local_worker_num=2",
               "parallel.launcher.node_rank=0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (rc, err) == (2, [
        ERROR + "parallel.launcher.master_port=null: not allowed; expected a port from 1024 "
        "to 65535 when the workers span 2 nodes (every node's msrun must reach the same "
        "scheduler; null chooses a free port on one node only)"])
    assert list(workdir.iterdir()) == []


def test_a_concurrent_sweep_checks_only_ports_set_explicitly(workdir):
    sweep = ["hydra/launcher=concurrent", "parallel=data", "optimizer.lr=0.01,0.1"]
    assert len(preflight(sweep, multirun=True)) == 2
    port = free_port()
    with pytest.raises(ConfigError) as refused:
        preflight([*sweep, f"parallel.launcher.master_port={port}"], multirun=True)
    assert str(refused.value).startswith(f"parallel.launcher.master_port={port}: not allowed; "
                                         "expected a different port for each distributed job")


def _start(cwd: Path, *overrides: str) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "ms_exp.run", *TINY, *overrides], cwd=cwd,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _listening_ports(cwd: Path) -> set:
    """TCP ports the processes working in ``cwd`` (the job, msrun, its scheduler and
    ranks) listen on."""
    pids = set()
    for process in psutil.process_iter(["cwd"]):
        if process.info["cwd"] == str(cwd):
            pids.add(process.pid)
    return {c.laddr.port for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


@pytest.mark.distributed
@pytest.mark.e2e
def test_two_data_parallel_jobs_with_default_ports_run_side_by_side(tmp_path):
    cwds = [tmp_path / "a", tmp_path / "b"]
    jobs = [_start(cwd) for cwd in cwds]
    # Both jobs at once, each with its scheduler and both ranks listening: no port shared.
    seen = [set(), set()]
    deadline = time.time() + 240
    while any(len(ports) < 3 for ports in seen) and time.time() < deadline \
            and all(job.poll() is None for job in jobs):
        seen = [_listening_ports(cwd) for cwd in cwds]
        time.sleep(0.5)
    outputs = [job.communicate(timeout=300)[0] for job in jobs]
    for job, output in zip(jobs, outputs):
        assert job.returncode == 0, output[-3000:]
    assert all(len(ports) >= 3 for ports in seen), seen
    assert not seen[0] & seen[1], seen
    ports = []
    for cwd, output in zip(cwds, outputs):
        (run,) = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}").search_runs(["1"])
        (run_dir,) = (cwd / "outputs").glob("*/*")
        port = saved_port(run_dir)
        # The chosen port is printed, saved and recorded on the run.
        assert f"--master_port={port} " in output
        assert f"--master_port={port} " in run.data.tags["ms_exp.launch_command"]
        assert run.info.status == "FINISHED"
        ports.append(port)
    assert ports[0] != ports[1]
    assert [ports[0] in seen[0], ports[1] in seen[1]] == [True, True]


@pytest.mark.distributed
@pytest.mark.e2e
def test_a_second_job_on_the_same_explicit_port_is_refused(tmp_path_factory, workdir,
                                                           capsys):
    port = free_port()
    first = _start(tmp_path_factory.mktemp("first"), f"parallel.launcher.master_port={port}")
    deadline = time.time() + 240
    while port_is_free("127.0.0.1", port):
        assert time.time() < deadline and first.poll() is None, first.communicate()[0]
        time.sleep(0.2)
    rc = main([*TINY, f"parallel.launcher.master_port={port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (rc, err) == (2, [
        ERROR + f"parallel.launcher.master_port={port}: not allowed; expected a free port "
        f"(another process is listening on 127.0.0.1:{port})"])
    assert list(workdir.iterdir()) == []
    output = first.communicate(timeout=300)[0]
    assert first.returncode == 0, output[-3000:]
