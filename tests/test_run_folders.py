"""A run owns its folder: a command that meets another run's folder, or a folder a process
works in, is refused in one line (exit 2) and changes nothing there; default folders of
commands started together never coincide; a damaged record is named, not taken as absent.

The rules run in this process on fabricated records and tiny in-process jobs; what needs
two live processes (a resume while the run trains, two resumes at once, commands started in
the same second) runs them in the end-to-end lane."""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import main_in_process, migrated_store, stop_process_group
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ms_exp.preflight.compose import compose_config
from ms_exp.tracking.run_folder import (
    LOCK_FILE,
    RUN_RECORD,
    FolderRefused,
    check_owner,
    folder_in_use,
    hold_folder,
    read_run_record,
    release_folder,
)

TINY = (
    "trainer.progress_bar=never",
    "tracking.log_models=false",
    "trainer.epochs=2",
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
    "checkpoint.strategy.save_file=strategy.ckpt",
)
ERROR = "ms_exp: error: "


def files_of(folder: Path) -> dict:
    """Every file of a folder and its bytes, but the lock file (a refused command may take
    the lock of a folder nobody holds before it reads whose folder it is)."""
    return {
        p.relative_to(folder): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != LOCK_FILE
    }


def one_error_line(result) -> str:
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR), result.stderr
    assert "Traceback" not in result.stdout
    return lines[0][len(ERROR) :]


# -- the rules, on fabricated folders ------------------------------------------------------


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        ('{"digest": "abc", "sta', "not JSON: "),
        ("[1, 2]", "not a run record"),
        ('{"started": 1}', "not a run record"),
    ],
)
def test_a_damaged_record_is_refused_by_name_not_taken_as_absent(tmp_path, text, why):
    (tmp_path / RUN_RECORD).write_text(text)
    with pytest.raises(FolderRefused) as refused:
        read_run_record(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / RUN_RECORD}: damaged ({why}")
    assert str(refused.value).endswith(
        "choose another folder, or move the file away to start a new run there"
    )
    assert read_run_record(tmp_path / "none") == {}


@pytest.mark.parametrize(
    "status, digest, resume, refused",
    [
        (None, None, None, None),  # a folder no run owns
        ("FINISHED", "mine", None, ""),
        ("KILLED", "mine", None, ""),  # a new run is not a resume
        ("KILLED", "mine", "auto", None),  # the run resume=auto continues
        ("RUNNING", "mine", "auto", None),  # killed outright: it still says RUNNING
        ("FINISHED", "mine", "auto", "continues only an unfinished run of this config"),
        ("KILLED", "other", "auto", "continues only an unfinished run of this config"),
        ("FINISHED", "other", "0123456789abcdef0123456789abcdef", None),  # a run named
    ],
)
def test_who_may_work_in_a_folder_that_holds_a_run(tmp_path, status, digest, resume, refused):
    if status:
        (tmp_path / RUN_RECORD).write_text(
            json.dumps({"digest": digest, "status": status, "run_id": "r1"})
        )
    check = lambda: check_owner(tmp_path, "hydra.run.dir=x", resume, lambda: "mine")  # noqa
    if refused is None:
        check()
        return
    with pytest.raises(FolderRefused) as error:
        check()
    assert str(error.value).startswith(
        f"hydra.run.dir=x: {tmp_path} belongs to run r1 ({status}) of an earlier command"
    )
    assert refused in str(error.value)
    assert str(error.value).endswith(f"or continue that run with trainer.resume={tmp_path}")


HOLD = """
import sys
from ms_exp.tracking.run_folder import hold_folder
hold_folder(sys.argv[1], "k")
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_folder_another_process_holds_is_refused_naming_it_until_it_ends(tmp_path):
    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(FolderRefused) as refused:
            hold_folder(folder, "hydra.run.dir=run")
        assert re.fullmatch(
            rf"hydra.run.dir=run: {folder} is in use by another ms_exp process \(pid "
            rf"{holder.pid} on [^,]+, since [-0-9: ]+, command: .+\); wait for it to end, "
            r"or choose another folder",
            str(refused.value),
        ), str(refused.value)
    finally:
        holder.communicate("\n", timeout=30)
    # The kernel let go of the lock with the process: the folder is free again.
    hold_folder(folder, "hydra.run.dir=run")
    release_folder(folder)


CLAIM = """
import sys
from ms_exp.tracking.run_folder import FolderRefused, folder_in_use, hold_folder
print(folder_in_use(sys.argv[1]), flush=True)
try:
    hold_folder(sys.argv[1], "hydra.run.dir=run")
except FolderRefused as refused:
    sys.exit(str(refused))
print("held", flush=True)
"""


def claim_elsewhere(folder: Path) -> subprocess.CompletedProcess:
    """Another process asks whether the folder is in use, then claims it."""
    return subprocess.run(
        [sys.executable, "-c", CLAIM, str(folder)], capture_output=True, text=True, timeout=60
    )


def test_a_folder_stays_held_when_its_lock_file_is_deleted(tmp_path):
    """The lock is the folder's own: with ``run.lock`` deleted (or replaced) another
    process still finds the folder in use, and its refusal names this process (from the
    kernel's table of locks, the note being gone)."""
    folder = tmp_path / "run"
    hold_folder(folder, "hydra.run.dir=run")
    try:
        (folder / LOCK_FILE).unlink()
        other = claim_elsewhere(folder)
        assert other.returncode == 1 and other.stdout == "True\n", other.stderr
        assert re.fullmatch(
            rf"hydra.run.dir=run: {folder} is in use by another ms_exp process \(pid "
            rf"{os.getpid()} on [^,)]+\); wait for it to end, or choose another folder\n",
            other.stderr,
        ), other.stderr
        assert not (folder / LOCK_FILE).exists()  # the refused claim made none
    finally:
        release_folder(folder)
    other = claim_elsewhere(folder)
    assert (other.returncode, other.stdout) == (0, "False\nheld\n"), other.stderr


def test_where_a_directory_cannot_be_flocked_the_lock_file_is_locked(tmp_path, monkeypatch):
    """NFS emulates flock with POSIX locks, refused (EBADF) on a directory opened read
    only: the lock falls back to ``run.lock``, and folder_in_use asks the same lock."""
    import errno
    import fcntl
    import stat

    flock = fcntl.flock

    def no_directory_locks(descriptor, operation):
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        flock(descriptor, operation)

    monkeypatch.setattr(fcntl, "flock", no_directory_locks)
    folder = tmp_path / "run"
    hold_folder(folder, "hydra.run.dir=run")
    try:
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
        with open(folder / LOCK_FILE) as lock_file, pytest.raises(BlockingIOError):
            flock(lock_file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # another holder's
    finally:
        release_folder(folder)
    assert folder_in_use(folder) is False
    with open(folder / LOCK_FILE) as lock_file:
        flock(lock_file.fileno(), fcntl.LOCK_EX)  # as another process holding it
        assert folder_in_use(folder) is True
        with pytest.raises(FolderRefused):
            hold_folder(folder, "hydra.run.dir=run")
    assert folder_in_use(tmp_path / "gone") is None


def test_default_folders_of_commands_started_together_differ_and_sort_by_time():
    folders = [compose_config([], return_hydra_config=True).hydra for _ in range(3)]
    runs = [str(f.run.dir) for f in folders]
    assert len(set(runs)) == 3
    assert all(
        re.fullmatch(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-\d{6}-[0-9a-f]{4}", r) for r in runs
    ), runs
    assert [r.rsplit("-", 1)[0] for r in runs] == sorted(r.rsplit("-", 1)[0] for r in runs)
    sweeps = [str(f.sweep.dir) for f in folders]
    assert len(set(sweeps)) == 3 and all(s.startswith("multirun/") for s in sweeps)


# -- a finished run's folder, met again by in-process commands ------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny FINISHED run in ``hydra.run.dir=run`` (lr 0.1)."""
    cwd = tmp_path_factory.mktemp("finished")
    (cwd / "mlflow.db").write_bytes(migrated_store().read_bytes())
    result = main_in_process("ms_exp.run", [*TINY, "hydra.run.dir=run", "optimizer.lr=0.1"], cwd)
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_id = re.search(r"^MLflow run (\w+)", result.stdout, re.M).group(1)
    return SimpleNamespace(
        cwd=cwd,
        run_dir=(cwd / "run").resolve(),
        run_id=run_id,
        store=MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}"),
    )


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_a_relative_strategy_file_is_the_runs_own(finished):
    """MindSpore writes a relative strategy file from the working directory, where every
    run would share it: the run's config names it inside the run folder."""
    saved = OmegaConf.load(finished.run_dir / "config.yaml")
    assert saved.checkpoint.strategy.save_file == str(finished.run_dir / "strategy.ckpt")


@pytest.mark.e2e  # in process, but a second whole job: docs/developing.md#lanes
@pytest.mark.parametrize(
    "extra, why",
    [
        ((), ""),
        (
            ("trainer.resume=auto",),
            " (trainer.resume=auto continues only an unfinished run of this config)",
        ),
    ],
)
def test_another_command_in_a_finished_runs_folder_is_refused_and_changes_nothing(
    finished, extra, why
):
    """Cases 1 and 2 of the reused folder: another lr in the same ``hydra.run.dir``, also
    with ``trainer.resume=auto``, would have reported the first run's checkpoint and
    accuracy as its own."""
    before = files_of(finished.run_dir)
    result = main_in_process(
        "ms_exp.run", [*TINY, "hydra.run.dir=run", "optimizer.lr=0.001", *extra], finished.cwd
    )
    assert one_error_line(result) == (
        f"hydra.run.dir=run: {finished.run_dir} belongs to run {finished.run_id} (FINISHED) "
        f"of an earlier command{why}; choose a new folder, or continue that run with "
        f"trainer.resume={finished.run_dir}"
    )
    assert files_of(finished.run_dir) == before
    assert [r.info.run_id for r in finished.store.search_runs(["1"])] == [finished.run_id]


def test_a_damaged_record_in_the_folder_is_named_and_nothing_starts(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "checkpoints").mkdir()
    (folder / RUN_RECORD).write_text('{"digest": "4f1')  # a write cut short
    before = files_of(folder)
    for extra in ((), ("trainer.resume=auto",)):
        result = main_in_process("ms_exp.run", [*TINY, f"hydra.run.dir={folder}", *extra], tmp_path)
        assert one_error_line(result).startswith(f"{folder / RUN_RECORD}: damaged (not JSON:")
        assert files_of(folder) == before
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.e2e  # in process, but a second whole job: docs/developing.md#lanes
def test_a_sweep_into_a_folder_of_an_earlier_sweeps_runs_is_refused(finished):
    """The finished run's folder stands for a job folder ``<sweep dir>/<n>`` of an earlier
    sweep: a sweep in its parent is refused before any job starts."""
    before = files_of(finished.run_dir)
    result = main_in_process(
        "ms_exp.run", ["-m", *TINY, "hydra.sweep.dir=.", "optimizer.lr=0.01,0.02"], finished.cwd
    )
    line = one_error_line(result)
    assert line.startswith(
        f"hydra.sweep.dir=.: {finished.run_dir} belongs to run "
        f"{finished.run_id} (FINISHED) of an earlier command (a job of an "
        f"earlier sweep in .)"
    )
    assert files_of(finished.run_dir) == before
    assert len(finished.store.search_runs(["1"])) == 1


# -- two live processes ---------------------------------------------------------------------

LONG = (
    "trainer.progress_bar=never",
    "tracking.log_models=false",
    "dataset=synthetic",
    "dataset.num_samples=512",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
    "trainer.epochs=1000",
    "checkpoint.save_checkpoint_steps=4",
    "trainer.resume=auto",
    "trainer.loss_print_interval=1",
)
# Printed after step 5: the checkpoint of step 4 is written, the run's record names its run.
AFTER_FIRST_CHECKPOINT = "epoch: 1 step: 5,"


def start(cwd: Path, ended: "queue.Queue", args=LONG) -> SimpleNamespace:
    """``python -m ms_exp.run args`` in a session of its own; a thread reads its output
    (``lines``, ``seen(text)`` blocks until a line holds ``text``) and puts the job into
    ``ended`` when its output ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ms_exp.run", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    job = SimpleNamespace(process=process, lines=[], changed=threading.Condition())

    def read() -> None:
        for line in process.stdout:
            with job.changed:
                job.lines.append(line)
                job.changed.notify_all()
        process.wait()
        ended.put(job)

    def seen(text: str, timeout_s: float = 240) -> None:
        with job.changed:
            found = job.changed.wait_for(lambda: any(text in line for line in job.lines), timeout_s)
        assert found, f"no line with {text!r}:\n" + "".join(job.lines[-50:])

    job.seen = seen
    threading.Thread(target=read, daemon=True).start()
    return job


@pytest.mark.e2e
def test_a_resume_while_the_run_trains_and_two_resumes_at_once_are_refused_naming_the_holder(
    tmp_path,
):
    """Case 5: the same ``trainer.resume=auto`` command while the first still trains is
    refused, naming it, and the running run is left as it was (before, it picked a
    checkpoint the first deleted and failed the shared run). Case 6: two resumes of the
    killed run started together: one continues it, the other is refused naming it."""
    (tmp_path / "mlflow.db").write_bytes(migrated_store().read_bytes())
    ended: "queue.Queue" = queue.Queue()
    first = start(tmp_path, ended)
    try:
        first.seen(AFTER_FIRST_CHECKPOINT)
        (record,) = tmp_path.glob(f"outputs/*/*/{RUN_RECORD}")
        run_dir = record.parent
        second = subprocess.run(
            [sys.executable, "-m", "ms_exp.run", *LONG],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        assert (
            second.stderr.strip()
            .splitlines()[-1]
            .startswith(
                f"{ERROR}trainer.resume=auto: {run_dir} is in use by another ms_exp process "
                f"(pid {first.process.pid} on "
            )
        ), second.stderr
        assert "Traceback" not in second.stderr
        assert first.process.poll() is None
        record = read_run_record(run_dir)
        assert record["status"] == "RUNNING"
        store = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        assert store.get_run(record["run_id"]).info.status == "RUNNING"
    finally:
        os.killpg(first.process.pid, signal.SIGKILL)
    assert ended.get(timeout=60) is first

    both = [start(tmp_path, ended), start(tmp_path, ended)]
    try:
        refused = ended.get(timeout=240)  # the first of the two to end
        other = next(j for j in both if j is not refused)
        text = "".join(refused.lines)
        assert refused.process.returncode == 2, text[-3000:]
        assert (
            text.strip()
            .splitlines()[-1]
            .startswith(
                f"{ERROR}trainer.resume=auto: {run_dir} is in use by another ms_exp process "
                f"(pid {other.process.pid} on "
            )
        ), text[-3000:]
        other.seen(f"resuming the run in {run_dir} from ")
        assert other.process.poll() is None
    finally:
        for job in both:
            stop_process_group(job.process)


@pytest.mark.e2e
def test_a_run_whose_lock_file_is_deleted_keeps_its_folder_and_ends_finished(tmp_path):
    """Case 7: ``run.lock`` deleted while the job trains. The same ``trainer.resume=auto``
    command is refused naming the job (before, it created and locked a new lock file,
    resumed from a checkpoint the job then rotated away, crashed, and could leave the run
    FAILED); the job trains on and ends FINISHED in MLflow and run.json."""
    (tmp_path / "mlflow.db").write_bytes(migrated_store().read_bytes())
    command = (
        *[o for o in LONG if not o.startswith("trainer.epochs=")],
        "trainer.epochs=2",
        "hydra.run.dir=outputs/run",
    )
    ended: "queue.Queue" = queue.Queue()
    first = start(tmp_path, ended, command)
    run_dir = tmp_path / "outputs" / "run"
    try:
        first.seen(AFTER_FIRST_CHECKPOINT)
        # Paused, so that it still trains when the second command comes, however fast
        # this machine is; the kernel keeps its lock.
        os.kill(first.process.pid, signal.SIGSTOP)
        try:
            (run_dir / LOCK_FILE).unlink()
            second = subprocess.run(
                [sys.executable, "-m", "ms_exp.run", *command],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=240,
            )
        finally:
            os.kill(first.process.pid, signal.SIGCONT)
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith(
            f"{ERROR}hydra.run.dir=outputs/run: {run_dir} is in use by "
            f"another ms_exp process (pid {first.process.pid} on "
        ), line
        assert ended.get(timeout=240) is first
    finally:
        stop_process_group(first.process)
    assert first.process.returncode == 0, "".join(first.lines[-50:])
    record = read_run_record(run_dir)
    assert (record["status"], record["attempts"]) == ("FINISHED", 1)
    store = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [(r.info.run_id, r.info.status) for r in store.search_runs(["1"])] == [
        (record["run_id"], "FINISHED")
    ]


SAME_SECOND = """
import json, subprocess, sys
lrs, shared = json.loads(sys.argv[1]), sys.argv[2]
extra = [f"hydra.run.dir={shared}"] if shared else []
jobs = [subprocess.Popen([sys.executable, "-m", "ms_exp.run", *sys.argv[3:], *extra,
                          f"optimizer.lr={lr}"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True) for lr in lrs]
print(json.dumps([[lr, job.wait(), *job.communicate()] for lr, job in zip(lrs, jobs)]))
"""
LRS = ["0.1", "0.05", "0.02", "0.01"]


def started_together(cwd: Path, shared: str) -> list:
    """The same job with four learning rates started at once (``shared``: one
    ``hydra.run.dir`` for all): ``[(lr, exit status, stdout, stderr)]``."""
    cwd.mkdir()
    (cwd / "mlflow.db").write_bytes(migrated_store().read_bytes())
    done = subprocess.run(
        [sys.executable, "-c", SAME_SECOND, json.dumps(LRS), shared, *TINY],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def assert_runs_are_their_own(cwd: Path, finished: list) -> None:
    """Each finished command's MLflow run holds its own lr: params, config artifact and
    the checkpoints of its own folder, which no other run names."""
    store = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    runs = {r.data.params["optimizer.lr"]: r for r in store.search_runs(["1"])}
    assert sorted(runs) == sorted(lr for lr, *_ in finished)
    folders = set()
    for lr, _, stdout, _ in finished:
        run = runs[lr]
        assert run.info.status == "FINISHED"
        assert f"MLflow run {run.info.run_id}" in stdout
        folder = Path(run.data.tags["ms_exp.run_dir"])
        folders.add(folder)
        config = store.download_artifacts(
            run.info.run_id, "config/config.yaml", str(cwd / f"artifacts_{lr}")
        )
        assert f"lr: {lr}" in Path(config).read_text()
        assert json.loads((folder / RUN_RECORD).read_text())["run_id"] == run.info.run_id
        assert str(folder / "checkpoints") in stdout
    assert len(folders) == len(finished)


@pytest.mark.e2e
def test_commands_started_in_the_same_second_each_keep_their_own_records(tmp_path):
    """Case 4: four commands of different configs started at once in one folder, with
    the default run folders and then with one ``hydra.run.dir`` for all: every run that
    finished holds only its own params, config, checkpoints and metrics; the refused ones
    say who holds the folder, in one line. (docs/guides/resilience.md: eight of each.)"""
    apart = started_together(tmp_path / "default", "")
    assert [rc for _, rc, _, _ in apart] == [0] * len(LRS), apart
    assert_runs_are_their_own(tmp_path / "default", apart)

    shared = started_together(tmp_path / "shared", "run")
    finished = [job for job in shared if job[1] == 0]
    assert len(finished) >= 1
    assert_runs_are_their_own(tmp_path / "shared", finished)
    for lr, rc, _, stderr in shared:
        if rc == 0:
            continue
        assert rc == 2, stderr[-2000:]
        (line,) = stderr.strip().splitlines()
        assert re.match(
            rf"{ERROR}hydra.run.dir=run: \S+/shared/run (is in use by another "
            r"ms_exp process \(pid \d+ |belongs to run \w+ \(FINISHED\))",
            line,
        ), line


# -- what a killed sweep left RUNNING -------------------------------------------------------


def test_runs_left_running_by_a_process_that_is_gone_are_ended_killed(tmp_path):
    """The runs of a sweep killed with its process group: the next sweep ends those whose
    folder is here and free; one whose folder a live process holds, or that is not on
    this machine, is left RUNNING."""
    from ms_exp.tracking.abandoned import ABANDONED, end_abandoned_runs

    (tmp_path / "mlflow.db").write_bytes(migrated_store().read_bytes())
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    folders = {name: tmp_path / name for name in ("gone", "held", "sweep_gone")}
    for name in ("gone", "sweep_gone"):
        hold_folder(folders[name], "k")  # leaves its lock file, as a job does
        release_folder(folders[name])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folders["held"])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        runs = {
            name: client.create_run("0", tags={tag: str(folder)}).info.run_id
            for (name, folder), tag in zip(
                folders.items(), ("ms_exp.run_dir", "ms_exp.run_dir", "ms_exp.sweep.dir")
            )
        }
        runs["elsewhere"] = client.create_run(
            "0", tags={"ms_exp.run_dir": "/nowhere/on/this/machine"}
        ).info.run_id
        finished = client.create_run("0", tags={"ms_exp.run_dir": str(folders["gone"])})
        client.set_terminated(finished.info.run_id, "FINISHED")
        assert sorted(end_abandoned_runs(client, "0")) == sorted([runs["gone"], runs["sweep_gone"]])
    finally:
        holder.communicate("\n", timeout=30)
    status = {name: client.get_run(run_id).info.status for name, run_id in runs.items()}
    assert status == {
        "gone": "KILLED",
        "sweep_gone": "KILLED",
        "held": "RUNNING",
        "elsewhere": "RUNNING",
    }
    assert client.get_run(runs["gone"]).data.tags["ms_exp.ended_by"] == ABANDONED
    assert client.get_run(finished.info.run_id).info.status == "FINISHED"


def test_a_trial_whose_process_on_this_host_is_gone_fails_at_once(tmp_path):
    """Without waiting for its heartbeat to grow old: a sweep killed and run again at once
    would otherwise leave the trial RUNNING after the study completed."""
    import socket

    import optuna

    from ms_exp.search.study import WORKER_ATTR, fail_dead_trials, open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval=60)
    study = optuna.create_study(storage=storage, study_name="s")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead, alive = study.ask(), study.ask()
    dead.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{gone.stdout.strip()}")
    alive.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
    assert fail_dead_trials(study, storage) == [dead.number]
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {dead.number: "FAIL", alive.number: "RUNNING"}
