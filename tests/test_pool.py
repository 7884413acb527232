"""``hydra/launcher=pool``: a sweep's jobs side by side, each on its own devices for its whole
life. Read back from each job's own environment (a callback of the test's, a module in the
working folder that the pool's worker processes import as a user's) and from MLflow: never
two running jobs on one device, a failed job's device goes to the next job, the Optuna
sweeper through the pool, and Ctrl-C or a killed launcher ending every job."""

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FAST, migrated_store, run_cli
from mlflow import MlflowClient

# A user's callback: what the job's process was given, written where the test reads it; it
# fails the job whose learning rate is fail_at_lr, and tells a waiting test through the
# named pipe ``announce`` that the job has started training.
PROBE = """
import json, os
from mindspore.train import Callback


class Probe(Callback):
    def __init__(self, folder, lr, fail_at_lr=-1.0, announce=None):
        self.folder, self.lr, self.fail_at_lr = folder, float(lr), float(fail_at_lr)
        self.announce = announce

    def on_train_begin(self, run_context):
        seen = {"pid": os.getpid(), "lr": self.lr, "cores": sorted(os.sched_getaffinity(0)),
                **{k: os.environ.get(k) for k in ("MS_EXP_DEVICES", "CUDA_VISIBLE_DEVICES",
                                                  "ASCEND_RT_VISIBLE_DEVICES",
                                                  "OMP_NUM_THREADS")}}
        path = os.path.join(self.folder, f"{os.getpid()}-{self.lr}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(seen, f)
        os.replace(path + ".tmp", path)
        if self.announce:
            with open(self.announce, "w") as fifo:
                fifo.write(f"{os.getpid()}\\n")
        if self.lr == self.fail_at_lr:
            raise RuntimeError(f"probe: job with lr={self.lr} fails on purpose")
"""
PROBE_ARGS = (
    "+trainer.callbacks.probe._target_=probe.Probe",
    "+trainer.callbacks.probe.lr=${optimizer.lr}",
)


def project(folder: Path) -> Path:
    """A working folder with the probe module and a migrated store."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.py").write_text(PROBE)
    (folder / "seen").mkdir()
    shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return folder


def probes(folder: Path) -> list:
    return [json.loads(p.read_text()) for p in sorted((folder / "seen").glob("*.json"))]


def job_runs(folder: Path) -> list:
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs(["1"], max_results=100)
    return [r for r in runs if "ms_exp.sweep.id" in r.data.tags]


def assert_one_job_at_a_time_per_device(runs) -> None:
    by_device: dict = {}
    for run in runs:
        by_device.setdefault(run.data.tags["ms_exp.devices"], []).append(run)
    for device, on_it in by_device.items():
        on_it.sort(key=lambda r: r.info.start_time)
        for earlier, later in zip(on_it, on_it[1:]):
            assert earlier.info.end_time <= later.info.start_time, (
                f"device {device}: {earlier.info.run_name} and {later.info.run_name} overlap"
            )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Four jobs on a pool of two (fake) GPUs, 3 and 5, on this CPU machine; the job with
    lr=0.02 fails in its first callback."""
    folder = project(tmp_path_factory.mktemp("pool"))
    result = run_cli(
        "ms_exp.run",
        [
            "-m",
            *FAST,
            "hydra/launcher=pool",
            "hydra.launcher.accelerator=GPU",
            "hydra.launcher.devices=[3,5]",
            "trainer.device_target=CPU",
            "trainer.epochs=1",
            *PROBE_ARGS,
            f"+trainer.callbacks.probe.folder={folder / 'seen'}",
            "+trainer.callbacks.probe.fail_at_lr=0.02",
            "optimizer.lr=0.01,0.02,0.03,0.04",
        ],
        folder,
    )
    return result, folder


@pytest.mark.e2e
def test_each_job_sees_only_its_own_device_and_records_it(sweep):
    result, folder = sweep
    seen = probes(folder)
    assert sorted(s["lr"] for s in seen) == [0.01, 0.02, 0.03, 0.04]
    runs = {float(r.data.params["optimizer.lr"]): r for r in job_runs(folder)}
    for job in seen:
        assert job["MS_EXP_DEVICES"] == job["CUDA_VISIBLE_DEVICES"] in ("3", "5")
        assert runs[job["lr"]].data.tags["ms_exp.devices"] == job["MS_EXP_DEVICES"]
    assert {s["CUDA_VISIBLE_DEVICES"] for s in seen} == {"3", "5"}
    # One worker process per device, kept from job to job (MindSpore imported twice, not 4
    # times), a failed job's included.
    assert len({s["pid"] for s in seen}) == 2
    assert (
        "hydra/launcher=pool: GPU devices 3, 5, one per rank: up to 2 single-device "
        "jobs at once" in result.stdout
    )
    assert "job #0 (lr=0.01) on GPU devices 3 (process " in result.stdout
    # Each job's lines are marked with it (the jobs run side by side); the runs' own
    # console.log is not.
    for number, lr in enumerate(["0.01", "0.02", "0.03", "0.04"]):
        mark = f"[#{number} lr={lr}] "
        assert f"\n{mark}dataset=digits: 1437 training" in result.stdout, result.stdout[-3000:]
        run_dir = Path(runs[float(lr)].data.tags["ms_exp.run_dir"])
        if lr != "0.02":  # the job that fails
            assert f"\n{mark}outputs: {run_dir}\n" in result.stdout
        assert "[#" not in (run_dir / "console.log").read_text()
    assert not re.search(r"^(epoch|dataset=|outputs:)", result.stdout, re.MULTILINE)


def test_a_pool_workers_lines_are_marked_with_the_job_that_printed_them():
    from ms_exp.pool.output import LineMarker, mark_record

    # Written by a job, MindSpore's C++ side or a progress bar, read in any pieces.
    written = (
        b"before any job\n"
        + mark_record("[#0 lr=0.1] ")
        + b"epoch: 1 step: 44, loss is 0.41\n10%|#   |\r20%|##  |\r\n[WARNING] ME(1:2,"
        + b" python):x] y\n"
        + mark_record("[#2] ")
        + b"no end yet"
    )
    for size in (1, 5, len(written)):
        marker = LineMarker()
        shown = b"".join(marker.feed(written[i : i + size]) for i in range(0, len(written), size))
        assert (shown + marker.flush()).decode().split("\n") == [
            "before any job",
            "[#0 lr=0.1] epoch: 1 step: 44, loss is 0.41",
            "[#0 lr=0.1] 10%|#   |\r[#0 lr=0.1] 20%|##  |\r[#0 lr=0.1] ",
            "[#0 lr=0.1] [WARNING] ME(1:2, python):x] y",
            "[#2] no end yet",
        ]
    # A line without its end is shown at once, and so is a NUL that starts no record.
    marker = LineMarker()
    assert marker.feed(mark_record("[#3] ") + b"50%") == b"[#3] 50%"
    assert marker.feed(b" \0 done\n") == b" \0 done\n"


def test_a_pool_workers_copier_writes_whole_lines_that_no_other_copier_cuts(monkeypatch):
    from ms_exp.pool import output

    # Two workers' copiers write to one console: a line is written whole, in a write the
    # pipe keeps whole, unless its writer pauses with the line unended (a prompt).
    writes = []
    monkeypatch.setattr(output, "_write_all", lambda fd, data: writes.append(data))
    monkeypatch.setattr(output, "PAUSE_S", 600)
    fed = threading.Event()  # the copier has read what was written so far
    feed = output.LineMarker.feed
    monkeypatch.setattr(output.LineMarker, "feed", lambda m, data: (fed.set(), feed(m, data))[1])
    source, sink = os.pipe()
    copier = threading.Thread(target=output._copy, args=(source, 1))
    copier.start()
    os.write(sink, output.mark_record("[#1] ") + b"dataset=dig")
    assert fed.wait(30)
    os.write(sink, b"its: 1437 training\n" + b"epoch: 1 step: 44\n" * 400 + b"no end")
    os.close(sink)
    copier.join()
    os.close(source)
    assert all(len(w) <= select.PIPE_BUF and w.endswith(b"\n") for w in writes[:-1])
    assert b"".join(writes) == (
        b"[#1] dataset=digits: 1437 training\n" + b"[#1] epoch: 1 step: 44\n" * 400 + b"[#1] no end"
    )


@pytest.mark.e2e
def test_never_two_running_jobs_on_one_device(sweep):
    _, folder = sweep
    runs = job_runs(folder)
    assert len(runs) == 4
    assert_one_job_at_a_time_per_device(runs)
    # Two at once: the pool was used, not one job after another.
    runs.sort(key=lambda r: r.info.start_time)
    assert any(a.info.end_time > b.info.start_time for a, b in zip(runs, runs[1:]))


@pytest.mark.e2e
def test_a_failed_job_gives_its_device_to_the_next_and_the_sweep_says_so(sweep):
    result, folder = sweep
    assert result.rc != 0
    runs = job_runs(folder)
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert [r.data.params["optimizer.lr"] for r in failed] == ["0.02"]
    assert "probe: job with lr=0.02 fails on purpose" in failed[0].data.tags["ms_exp.error"]
    device = failed[0].data.tags["ms_exp.devices"]
    later = [
        r
        for r in runs
        if r.data.tags["ms_exp.devices"] == device and r.info.start_time >= failed[0].info.end_time
    ]
    assert later and all(r.info.status == "FINISHED" for r in later)
    assert sum(r.info.status == "FINISHED" for r in runs) == 3
    assert "FAILED, 3 of 4 jobs finished" in result.stdout
    per_device = result.field("jobs per device:")
    for share in ("3", "5"):
        names = [
            r.info.run_name
            for r in sorted(runs, key=lambda r: r.info.start_time)
            if r.data.tags["ms_exp.devices"] == share
        ]
        assert f"{share}: {len(names)} ({', '.join(names)})" in per_device


@pytest.mark.e2e
def test_an_optuna_sweep_through_the_pool_starts_a_trial_when_a_core_is_free(tmp_path):
    folder = project(tmp_path)
    result = run_cli(
        "ms_exp.run",
        [
            "-m",
            *FAST,
            "hydra/sweeper=optuna",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.n_jobs=2",
            "hydra/launcher=pool",
            "trainer.epochs=1",
            *PROBE_ARGS,
            f"+trainer.callbacks.probe.folder={folder / 'seen'}",
            "optimizer.lr=interval(0.01,0.1)",
        ],
        folder,
    )
    assert result.rc == 0, result.stderr[-3000:]
    runs = job_runs(folder)
    assert len(runs) == 3 and all(r.info.status == "FINISHED" for r in runs)
    assert_one_job_at_a_time_per_device(runs)
    cores = sorted(os.sched_getaffinity(0))
    for job in probes(folder):
        # Pinned to one core, MindSpore's and OpenMP's threads sized to it.
        assert len(job["cores"]) == 1 and job["cores"][0] in cores
        assert job["MS_EXP_DEVICES"] == str(job["cores"][0])
        assert job["OMP_NUM_THREADS"] == "1" and job["CUDA_VISIBLE_DEVICES"] is None
    assert {r.data.tags["ms_exp.devices"] for r in runs} == {str(c) for c in cores[:2]}
    assert "jobs per device:" in result.stdout


def start_long_sweep(folder: Path, announce: Path) -> subprocess.Popen:
    """Two jobs long enough to be stopped while both train; in a session of its own, as a
    terminal's foreground job is a process group of its own."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ms_exp.run",
            "-m",
            *FAST,
            "hydra/launcher=pool",
            "trainer.epochs=200",
            *PROBE_ARGS,
            f"+trainer.callbacks.probe.folder={folder / 'seen'}",
            f"+trainer.callbacks.probe.announce={announce}",
            "optimizer.lr=0.01,0.02",
        ],
        cwd=folder,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
        stdout=(folder / "console.txt").open("w"),
        stderr=subprocess.STDOUT,
    )


@contextlib.contextmanager
def announcements(folder: Path):
    """A named pipe the jobs' probes write to as they start training, open for reading (and
    held open for writing too, so that reading it blocks until a job writes)."""
    fifo = folder / "started"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keeper = os.open(fifo, os.O_WRONLY)
    try:
        yield fifo, reader
    finally:
        os.close(keeper)
        os.close(reader)


def wait_for_both_jobs(reader: int, sweep: subprocess.Popen, folder: Path) -> None:
    """Until two jobs said they train, or the sweep ended first."""
    gone = os.pidfd_open(sweep.pid)
    started = b""
    try:
        while started.count(b"\n") < 2:
            ready, _, _ = select.select([reader, gone], [], [], 240)
            assert ready and gone not in ready, (folder / "console.txt").read_text()[-3000:]
            started += os.read(reader, 4096)
    finally:
        os.close(gone)


def wait_until_gone(folder: Path, timeout: float = 240) -> None:
    """Until no process works in ``folder``: each one seen is waited for through its pidfd
    (readable once it has exited), then the folder is looked at again."""
    deadline = time.monotonic() + timeout
    while True:
        fds = []
        for pid in processes_in(folder):
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue
        if not fds:
            return
        try:
            for fd in fds:
                left = deadline - time.monotonic()
                assert left > 0 and select.select([fd], [], [], left)[0], (
                    f"{processes_in(folder)} outlived the sweep"
                )
        finally:
            for fd in fds:
                os.close(fd)


def processes_in(folder: Path) -> list:
    """Live processes working in ``folder``: the sweep's own, its workers, their sidecars
    (a zombie only waits for its parent to read its status)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and Path(os.readlink(proc / "cwd")) == folder
                and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["ctrl_c", "launcher_killed"])
def test_ctrl_c_or_a_killed_launcher_ends_every_job(tmp_path, how):
    folder = project(tmp_path)
    with announcements(folder) as (fifo, reader):
        sweep = start_long_sweep(folder, fifo)
        wait_for_both_jobs(reader, sweep, folder)
    if how == "ctrl_c":
        os.killpg(sweep.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        assert sweep.wait(timeout=240) == 130, (folder / "console.txt").read_text()[-3000:]
    else:
        sweep.kill()  # SIGKILL to the launching process alone
        sweep.wait(timeout=60)
    wait_until_gone(folder)
    runs = job_runs(folder)
    assert len(runs) == 2
    # Each job was stopped as SIGTERM stops one: after its step, its run ended KILLED.
    assert {r.info.status for r in runs} == {"KILLED"}, [r.data.tags for r in runs]
