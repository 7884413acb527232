"""The device pool's logic in this process: what a pool holds on each kind of machine (the
vendors' listing tools faked on the PATH), what a job is told, how shares are handed out and
given back (workers faked: no process), and the refusals before a sweep starts."""

import os
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import main_in_process
from omegaconf import OmegaConf

from ms_exp.pool import dispatch
from ms_exp.pool.devices import (
    NoDevices,
    accelerator_of,
    pool_units,
    share_environment,
    units_per_job,
)
from ms_exp.pool.launcher import started_pool
from ms_exp.tracking.sweep_runs import jobs_per_device


def fake_tool(folder: Path, name: str, output: str, rc: int = 0) -> None:
    tool = folder / name
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\nexit {rc}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


NPU_SMI = """\
        NPU ID                         : 0
        Chip Count                     : 1

        NPU ID                         : 1
        Chip Count                     : 1
"""


def test_the_pool_is_what_the_vendor_tool_lists_or_the_cpu_cores(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    fake_tool(tmp_path, "nvidia-smi", "0\n1\n2\n3\n")
    assert pool_units("GPU", None) == [0, 1, 2, 3]
    fake_tool(tmp_path, "npu-smi", "        Total Count                    : 2\n\n" + NPU_SMI)
    assert pool_units("Ascend", None) == [0, 1]
    assert pool_units("GPU", [6, 7]) == [6, 7]  # given: nothing is asked
    # Inside a SLURM allocation (or any launch that set it): only the devices it names.
    assert pool_units("GPU", None, {"CUDA_VISIBLE_DEVICES": "2,5"}) == [2, 5]
    assert pool_units("Ascend", None, {"ASCEND_RT_VISIBLE_DEVICES": "4"}) == [4]
    with pytest.raises(NoDevices, match="CUDA_VISIBLE_DEVICES=GPU-6f3e names devices by"):
        pool_units("GPU", None, {"CUDA_VISIBLE_DEVICES": "GPU-6f3e"})
    assert pool_units("CPU", None) == sorted(os.sched_getaffinity(0))


def test_a_tool_missing_or_listing_nothing_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NoDevices, match="nvidia-smi is not on the PATH.*hydra.launcher.devices"):
        pool_units("GPU", None)
    fake_tool(tmp_path, "npu-smi", "dcmi module initialize failed\n", rc=1)
    with pytest.raises(NoDevices, match="listed no Ascend device"):
        pool_units("Ascend", None)


def test_which_devices_auto_means(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert accelerator_of("auto", "None") == "CPU"
    assert accelerator_of("auto", "Ascend") == "Ascend"
    assert accelerator_of("GPU", "CPU") == "GPU"
    fake_tool(tmp_path, "nvidia-smi", "0\n")
    assert accelerator_of("auto", None) == "GPU"


def test_a_job_sees_only_its_share():
    assert share_environment("GPU", (2, 3)) == {
        "MS_EXP_DEVICES": "2,3",
        "CUDA_VISIBLE_DEVICES": "2,3",
    }
    assert share_environment("Ascend", (5,)) == {
        "MS_EXP_DEVICES": "5",
        "ASCEND_RT_VISIBLE_DEVICES": "5",
    }
    assert share_environment("CPU", (0, 1)) == {"MS_EXP_DEVICES": "0,1", "OMP_NUM_THREADS": "2"}
    assert units_per_job("GPU", 4, 3) == 4 and units_per_job("CPU", 2, 3) == 6


class FakeWorker:
    """A worker without a process: its job ends when the test says so."""

    started: list = []
    ended: list = []  # what the pool did to end its workers, in order

    def __init__(self, share, stop_timeout, tracking_uri):
        self.share, self.tracking_uri = share, tracking_uri
        self.process = SimpleNamespace(
            pid=1000 + len(FakeWorker.started),
            exitcode=-9,
            is_alive=lambda: not self.closed,
            join=lambda *a: None,
        )
        self.stopping = False
        self.closed = False
        FakeWorker.started.append(self)

    def run(self, order):
        from hydra.core.utils import JobReturn, JobStatus

        outcome = order.task_function(self.share.units)  # the test's stand-in for the job
        if outcome in ("died", "exited"):  # killed (SIGKILL), or the job called os._exit(0)
            self.process.exitcode = -9 if outcome == "died" else 0
            raise EOFError
        result = JobReturn(overrides=list(order.overrides))
        result.status = JobStatus.FAILED if outcome == "failed" else JobStatus.COMPLETED
        result._return_value = RuntimeError("failed") if outcome == "failed" else outcome
        return result

    def stop_job(self):
        self.stopping = True

    def hang_up(self):
        FakeWorker.ended.append(("hung up", self.share.units))

    def close(self, timeout):
        FakeWorker.ended.append(("waited for", self.share.units))
        self.closed = True


@pytest.fixture
def fake_workers(monkeypatch):
    FakeWorker.started, FakeWorker.ended = [], []
    monkeypatch.setattr(dispatch, "Worker", FakeWorker)
    return FakeWorker.started


def order(number, job):
    return dispatch.JobOrder(number, [f"job={number}"], None, None, job, {}, {})


def test_shares_are_held_one_job_at_a_time_and_workers_kept(fake_workers, capsys, monkeypatch):
    monkeypatch.setenv("MS_EXP_SWEPT_KEYS", '["job"]')  # as the sweep's parent sets it
    pool = dispatch.DevicePool("GPU", [0, 1], stop_timeout=1)
    running, most, lock = set(), [0], threading.Lock()

    def job(share):
        with lock:
            assert not running & set(share), f"{share} is already in use"
            running.update(share)
            most[0] = max(most[0], len(running))
        threading.Event().wait(0.05)
        with lock:
            running.difference_update(share)
        return share

    results = dispatch.launch_jobs(pool, [order(n, job) for n in range(6)], lambda i: 1, False)
    assert {r.return_value for r in results} == {(0,), (1,)}
    assert most[0] == 2
    # One worker per device, reused by every later job on it.
    assert sorted(w.share.units for w in fake_workers) == [(0,), (1,)]
    assert "job #0 (job=0) on GPU devices 0 (process 1000)" in capsys.readouterr().out
    pool.close()
    assert all(w.closed for w in fake_workers)
    # Every worker told to end before the pool waits for any: they end side by side.
    assert [what for what, _ in FakeWorker.ended[:2]] == ["hung up", "hung up"]


def test_the_launcher_takes_the_workers_ms_exp_run_started_before_the_sweeps_parent_run(
    fake_workers,
):
    def config(device_num):
        launcher = {"devices": [0, 1], "accelerator": "GPU", "cores_per_job": 1, "stop_timeout": 1}
        tracking = {"enabled": True, "uri": "sqlite:///sweep.db"}
        return OmegaConf.create(
            {
                "hydra": {"launcher": launcher},
                "trainer": {},
                "parallel": {"device_num": device_num},
                "tracking": tracking,
            }
        )

    early = started_pool(config(1), early=True)
    assert started_pool(config(1)) is early
    assert [w.share.units for w in fake_workers] == [(0,), (1,)]  # started once
    # Their sidecars import the client of the sweep's store before the first job comes.
    assert {w.tracking_uri for w in fake_workers} == {"sqlite:///sweep.db"}
    # Started for one-device jobs, but the launcher's are two-device jobs: ended at once.
    unused = started_pool(config(1), early=True)
    taken = started_pool(config(2))
    assert taken is not unused
    assert [w.closed for w in fake_workers[2:]] == [True, True, False]
    dispatch.close_pools()  # ms_exp.run's end closes what it started early
    assert all(w.closed for w in fake_workers[:2])
    taken.close()


def test_a_failed_or_dead_job_gives_its_share_back(fake_workers):
    pool = dispatch.DevicePool("CPU", [0], stop_timeout=1)
    outcomes = iter(["died", "failed", "ok"])
    results = dispatch.launch_jobs(
        pool, [order(n, lambda share: next(outcomes)) for n in range(3)], lambda i: 1, False
    )
    assert [r.status.name for r in results] == ["FAILED", "FAILED", "COMPLETED"]
    assert "its worker process 1000 was killed by SIGKILL" in str(results[0]._return_value)
    # The dead worker is replaced; the failed job's worker is kept for the next job.
    assert len(fake_workers) == 2 and fake_workers[0].closed and not fake_workers[1].closed


@pytest.mark.parametrize(
    "outcome, how", [("died", "was killed by SIGKILL"), ("exited", "exited with code 0")]
)
def test_a_job_whose_worker_died_is_one_line_and_no_traceback(
    fake_workers, capsys, monkeypatch, outcome, how
):
    """Its worker killed, or ended by the job's own os._exit(0): one line as it is found,
    naming the job, the process and how it ended. Hydra's basic sweeper, reading it as the
    sweep's failure, ends the sweep (exit status 1) with nothing more; the Optuna sweeper
    gets a failure it counts."""
    from hydra._internal.utils import run_and_report

    monkeypatch.setenv("MS_EXP_SWEPT_KEYS", '["job"]')
    pool = dispatch.DevicePool("CPU", [0], stop_timeout=1)
    (lost,) = dispatch.launch_jobs(pool, [order(3, lambda share: outcome)], lambda i: 1, False)
    line = f"job #3 (job=3) on cores 0: its worker process 1000 {how} before the job ended"
    assert capsys.readouterr().err.splitlines() == [f"ms_exp: error: {line}"]
    with pytest.raises(dispatch.WorkerDied) as failure:
        lost.return_value
    assert str(failure.value) == line
    lost.ends_sweep = True  # what the launcher sets for Hydra's basic sweeper
    with pytest.raises(SystemExit) as ended:
        run_and_report(lambda: lost.return_value)
    assert ended.value.code == 1 and capsys.readouterr().err == ""


def test_a_worker_that_died_while_idle_is_replaced_before_a_job_is_sent(fake_workers):
    pool = dispatch.DevicePool("CPU", [0], stop_timeout=1)
    pool.warm(1)
    fake_workers[0].closed = True  # killed while waiting for a job
    (result,) = dispatch.launch_jobs(pool, [order(0, lambda share: "ok")], lambda i: 1, False)
    assert result.status.name == "COMPLETED"
    assert len(fake_workers) == 2 and not fake_workers[1].closed


def test_fail_fast_starts_no_job_after_a_failure(fake_workers):
    pool = dispatch.DevicePool("CPU", [0], stop_timeout=1)
    results = dispatch.launch_jobs(
        pool, [order(0, lambda share: "failed"), order(1, lambda share: "ok")], lambda i: 1, True
    )
    assert results[1].status.name == "FAILED"
    assert isinstance(results[1]._return_value, dispatch.NotStarted)
    assert "job #1 was not started: another job of the sweep failed (sweep.fail_fast)" in str(
        results[1]._return_value
    )


def test_a_multi_rank_job_waits_for_enough_free_devices(fake_workers):
    pool = dispatch.DevicePool("GPU", [0, 1, 2], stop_timeout=1)
    results = dispatch.launch_jobs(
        pool, [order(n, lambda share: share) for n in range(3)], lambda i: [2, 1, 2][i], False
    )
    shares = [r.return_value for r in results]
    assert [len(s) for s in shares] == [2, 1, 2]


def test_jobs_per_device_in_start_order():
    def run(name, start, devices):
        return SimpleNamespace(
            info=SimpleNamespace(run_name=name, run_id=name, start_time=start),
            data=SimpleNamespace(tags={"ms_exp.devices": devices} if devices else {}),
        )

    runs = [run("c", 3, "1"), run("a", 1, "0"), run("b", 2, "1"), run("other", 0, None)]
    assert jobs_per_device(runs) == {"0": ["a"], "1": ["b", "c"]}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["hydra.launcher.accelerator=TPU"],
            "hydra.launcher.accelerator='TPU': not allowed; expected one of auto, Ascend, GPU, CPU",
        ),
        (
            ["hydra.launcher.devices=[0,0]"],
            "hydra.launcher.devices=[0, 0]: not allowed; expected null or a list of distinct ids",
        ),
        (
            ["hydra.launcher.devices=[4096]"],
            "hydra.launcher.devices=[4096]: not allowed; expected CPU cores this process may run on",
        ),
        (
            ["hydra.launcher.cores_per_job=0"],
            "hydra.launcher.cores_per_job=0: not allowed; expected an integer >= 1",
        ),
        (
            ["hydra.launcher.accelerator=GPU"],
            "hydra/launcher=pool: nvidia-smi is not on the PATH to list the GPU devices; expected "
            "hydra.launcher.devices=[0,1,...]",
        ),
        (
            [
                "hydra.launcher.accelerator=GPU",
                "hydra.launcher.devices=[0]",
                "parallel=data",
                "parallel.device_num=2",
            ],
            "parallel.device_num=2: job #0 needs 2 GPU devices; expected at most the pool's 1 GPU "
            "devices (0)",
        ),
    ],
)
def test_a_pool_that_cannot_run_the_sweep_is_refused_first(tmp_path, overrides, message):
    result = main_in_process(
        "ms_exp.run",
        ["-m", "hydra/launcher=pool", *overrides, "optimizer.lr=0.1,0.2"],
        tmp_path,
        env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": None},
    )
    assert result.rc == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"ms_exp: error: {message}")
    assert not (tmp_path / "multirun").exists() and not (tmp_path / "mlflow.db").exists()


def test_fail_fast_sends_the_pool_every_job_at_once_but_batches_for_others():
    from ms_exp.preflight.compose import compose_config
    from ms_exp.search.checks import fail_fast_overrides

    pool = compose_config(["hydra/launcher=pool", "sweep.fail_fast=true"], return_hydra_config=True)
    assert pool.hydra.launcher.cores_per_job == 1 and pool.hydra.launcher.devices is None
    assert fail_fast_overrides(pool, []) == []
    joblib = compose_config(
        ["hydra/launcher=concurrent", "sweep.fail_fast=true"], return_hydra_config=True
    )
    assert fail_fast_overrides(joblib, []) == ["hydra.sweeper.max_batch_size=2"]
