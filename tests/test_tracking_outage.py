"""A tracking server that is down at start or dies mid-run: training finishes, the user sees
one warning, and the metrics reach the run when the server answers again (when the run ends,
or with ``python -m ms_exp.tracking.upload``). Also: a job reopening an earlier run.

One real ``mlflow server`` serves the module; the tests reach it through a TCP relay on a
port of their own, and stopping the relay is the server dying for the client (its
connections dropped, new ones refused) without paying the server's 10-20 s start again.
"""

import secrets
import select
import shutil
import socket
import socketserver
import threading
import time
from pathlib import Path

import pytest
from conftest import FAST, free_port, main_in_process, migrated_store, mlflow_server, run_cli
from mlflow import MlflowClient

from ms_exp.tracking.journal import journals_in
from ms_exp.tracking.sidecar import SidecarTracker

WARNING = "ms_exp: warning: "


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The port of a real MLflow server with its own SQLite store (a copy of conftest's
    migrated empty one), one worker process: its start costs a fraction of four workers'
    migrating a new store."""
    root = tmp_path_factory.mktemp("server")
    shutil.copyfile(migrated_store(), root / "server.db")
    with mlflow_server(
        root,
        "--backend-store-uri",
        f"sqlite:///{root / 'server.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--workers",
        "1",
    ) as url:
        # Its first request opens the store: paid here, not by the first test.
        MlflowClient(url).search_experiments()
        yield int(url.rsplit(":", 1)[1])


class Relay:
    """A TCP relay to the server on a port of its own: up or down at will."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self._server = None
        self._sockets = set()

    def start(self) -> None:
        relay = self

        class Pipe(socketserver.BaseRequestHandler):
            def handle(self):
                upstream = socket.create_connection(relay.target)
                relay._sockets.update((self.request, upstream))
                try:
                    ends = [self.request, upstream]
                    while True:
                        readable, _, _ = select.select(ends, [], [], 0.2)
                        if relay._server is None:
                            return
                        for end in readable:
                            data = end.recv(65536)
                            if not data:
                                return
                            (upstream if end is self.request else self.request).sendall(data)
                except OSError:
                    return
                finally:
                    upstream.close()

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Pipe)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        server, self._server = self._server, None
        server.shutdown()
        server.server_close()
        for end in list(self._sockets):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._sockets.clear()


@pytest.fixture
def relay(server):
    relay = Relay(server)
    yield relay
    if relay._server is not None:
        relay.stop()


@pytest.fixture(autouse=True)
def own_sidecar(monkeypatch):
    """A sidecar of each test's own: one kept from an earlier test writes its warnings into
    that test's captured stderr."""
    monkeypatch.setattr("ms_exp.tracking.sidecar._IDLE", [])


def warnings_in(text: str):
    return [line for line in text.splitlines() if line.startswith(WARNING)]


def _files_holding(text: str, folder: Path) -> list:
    return [p for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def upload(run_dir: Path, cwd: Path, env=None):
    return run_cli("ms_exp.tracking.upload", [str(run_dir)], cwd, env=env, timeout=120)


@pytest.mark.server
@pytest.mark.e2e
def test_a_server_down_at_start_keeps_the_run_for_the_upload_command(relay, tmp_path):
    # A team member's credentials, as a server with basic auth asks for (this one ignores
    # them): they are in neither the journal nor any other file of the run, nor printed.
    credentials = {
        "MLFLOW_TRACKING_USERNAME": "alice",
        "MLFLOW_TRACKING_PASSWORD": secrets.token_hex(12),
    }
    password = credentials["MLFLOW_TRACKING_PASSWORD"]
    job = run_cli(
        "ms_exp.run",
        [
            *FAST,
            "trainer.epochs=1",
            "tracking.log_models=true",
            f"tracking.uri={relay.uri}",
            "tracking.experiment_name=outage",
        ],
        tmp_path,
        env=credentials,
    )
    assert job.rc == 0, job.stderr[-3000:]
    (warning,) = warnings_in(job.stderr)
    assert f"tracking.uri={relay.uri} is unreachable" in warning
    assert "training goes on" in warning
    run_dir = job.run_dir
    command = f"python -m ms_exp.tracking.upload {run_dir}"
    assert warning.endswith(command)
    (journal,) = journals_in(run_dir)
    assert str(journal) in warning
    assert (
        f"MLflow run not recorded yet: {relay.uri} was unreachable; kept in {journal}; "
        f"upload with: {command}"
    ) in job.stdout

    # The models wait in the run directory, their MLmodel file written when they are logged.
    best = run_dir / "models" / "best"
    assert (best / "example.npz").is_file() and not (best / "MLmodel").exists()
    assert password not in job.stdout + job.stderr
    assert relay.uri in journal.read_text()
    assert not _files_holding(password, tmp_path)

    relay.start()
    uploaded = upload(run_dir, tmp_path, env=credentials)
    assert password not in uploaded.stdout + uploaded.stderr
    assert uploaded.rc == 0, uploaded.stderr
    (delivered,) = [
        line for line in uploaded.stdout.splitlines() if line.startswith("delivered to run ")
    ]
    assert "ended FINISHED" in delivered and str(journal) in delivered
    assert "models: 2" in delivered
    run_id = delivered.split()[3]
    client = MlflowClient(relay.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert password not in repr([run.data.params, run.data.tags])
    assert run.data.params["trainer.epochs"] == "1"
    assert "eval/accuracy" in run.data.metrics and "train/loss" in run.data.metrics
    assert run.data.tags["ms_exp.command"].endswith(
        f"tracking.uri={relay.uri} tracking.experiment_name=outage"
    )
    assert [a.path for a in client.list_artifacts(run_id, "config")] == ["config/config.yaml"]
    assert client.get_experiment(run.info.experiment_id).name == "outage"
    assert not journals_in(run_dir)
    models = client.search_logged_models([run.info.experiment_id])
    assert sorted(m.name for m in models) == ["best", "last"]
    assert all(m.source_run_id == run_id and m.status.to_int() == 2 for m in models)
    for model in models:
        files = {f.path for f in client.list_logged_model_artifacts(model.model_id)}
        assert {"MLmodel", "model.mindir", "input_example.json"} <= files, files
        assert "example.npz" not in files
    assert (best / "MLmodel").is_file() and not (best / "example.npz").exists()
    assert not _files_holding(password, tmp_path)

    again = upload(run_dir, tmp_path)
    assert again.rc == 2 and "nothing to upload" in again.stderr
    assert len(client.search_runs([run.info.experiment_id])) == 1


@pytest.mark.server
@pytest.mark.e2e
def test_a_server_dying_mid_run_gets_every_step_once_when_it_returns(relay, tmp_path, capfd):
    relay.start()
    tracker = SidecarTracker(relay.uri, "outage-mid-run", "dies", {}, offline_dir=tmp_path)
    tracker.log_params({"optimizer.lr": 0.1})
    for step in range(1, 11):
        tracker.log_metrics({"train/loss": 1 / step}, step=step)
    tracker.flush()
    run_id = tracker.run_id

    relay.stop()
    started = time.monotonic()
    for step in range(11, 31):
        tracker.log_metrics({"train/loss": 1 / step}, step=step)
    tracker.set_tags({"ms_exp.placement": "device"})
    tracker.flush()
    assert time.monotonic() - started < 10  # noticed in seconds, not MLflow's minutes
    assert tracker.run_id == run_id
    journal = tracker.offline_journal
    assert journal is not None and journal.parent.parent == tmp_path
    (warning,) = warnings_in(capfd.readouterr().err)
    assert "is unreachable (connection refused)" in warning and str(journal) in warning

    relay.start()
    tracker.finish("FINISHED")
    assert tracker.kept_journal is None and not journals_in(tmp_path)
    client = MlflowClient(relay.uri)
    steps = [m.step for m in client.get_metric_history(run_id, "train/loss")]
    assert sorted(steps) == list(range(1, 31))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ms_exp.placement"] == "device"
    err = capfd.readouterr().err
    assert not warnings_in(err) and f"{relay.uri} answers again: run {run_id}" in err


@pytest.mark.server
@pytest.mark.e2e
def test_a_journal_kept_at_the_end_is_uploaded_once(relay, tmp_path, capfd):
    relay.start()
    tracker = SidecarTracker(relay.uri, "outage-upload", "kept", {}, offline_dir=tmp_path)
    tracker.log_metrics({"train/loss": 1.0}, step=1)
    tracker.flush()
    relay.stop()
    tracker.log_metrics({"train/loss": 0.5}, step=2)
    tracker.finish("FINISHED")  # still down: the journal stays, nothing raised
    assert tracker.kept_journal is not None and tracker.kept_journal.is_file()
    assert len(warnings_in(capfd.readouterr().err)) == 1
    run_id = tracker.run_id
    client = MlflowClient(relay.uri.replace(str(relay.port), str(relay.target[1])))
    assert client.get_run(run_id).info.status == "RUNNING"

    relay.start()
    uploaded = upload(tmp_path, tmp_path)
    assert uploaded.rc == 0, uploaded.stderr
    assert f"delivered to run {run_id} " in uploaded.stdout
    assert "metric values: 1," in uploaded.stdout and "ended FINISHED" in uploaded.stdout
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [1, 2]
    assert client.get_run(run_id).info.status == "FINISHED"


@pytest.mark.server
@pytest.mark.e2e
def test_rank_zero_of_a_distributed_job_shares_the_jobs_journal(relay, tmp_path, capfd):
    # Rank 0 adds to the job's run from a sidecar of its own (ms_exp/worker.py) and leaves
    # ending it to the job; what it could not deliver, the job delivers at its end.
    relay.start()
    job = SidecarTracker(relay.uri, "outage-ranks", "data", {}, offline_dir=tmp_path)
    run_id = job.run_id
    rank0 = SidecarTracker(
        relay.uri, None, None, {}, run_id=run_id, journal=job.journal, ends_run=False
    )
    for step in range(1, 6):
        rank0.log_metrics({"train/loss": 1 / step}, step=step)
    rank0.flush()
    relay.stop()
    for step in range(6, 11):
        rank0.log_metrics({"train/loss": 1 / step}, step=step)
    rank0.flush()
    rank0.finish(None)
    job.set_tags({"ms_exp.parallel_mode": "data"})
    assert job.offline_journal == job.journal
    assert len(warnings_in(capfd.readouterr().err)) == 1  # rank 0's; the job joins quietly

    relay.start()
    job.finish("FINISHED")
    client = MlflowClient(relay.uri)
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == list(range(1, 11))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ms_exp.parallel_mode"] == "data"
    assert not journals_in(tmp_path)


def finished_journal(tmp_path: Path, steps: int) -> Path:
    """The journal of a finished run whose server never answered: line 1 starts the run,
    line s + 1 holds step s's loss (1 / s), the last line finishes it."""
    from ms_exp.tracking.journal import Journal

    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    journal = Journal(
        tmp_path / "mlflow-offline" / "job.jsonl",
        {
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "experiment_name": "exp",
            "run_name": "cut",
            "tags": {},
            "parent_run_id": None,
            "run_id": None,
        },
    )
    for step in range(1, steps + 1):
        journal.write("log_metric_rows", rows=[["train/loss", 1 / step, 1000 + step, step]])
    journal.write("finish", status="FINISHED")
    journal.close()
    return journal.path


def damage_line(journal: Path, number: int, text=None, last: bool = False) -> bytes:
    """Line ``number`` of ``journal`` replaced by ``text``, by default by its first half (a
    write torn by a full disk); with ``last``, the lines after it dropped, and its newline
    too (a job killed while writing it). Returns the line's new text."""
    lines = journal.read_bytes().split(b"\n")
    line = lines[number - 1]
    lines[number - 1] = line[: len(line) // 2] if text is None else text
    journal.write_bytes(b"\n".join(lines[:number] if last else lines))
    return lines[number - 1]


def dying_store(monkeypatch, at_step: int):
    """The store stops answering when the upload delivers step ``at_step``; returns the
    call that undoes it."""
    import requests

    from ms_exp.tracking.tracker import Tracker

    deliver = Tracker.log_metric_rows

    def store_dies(tracker, rows):
        if rows[0][3] == at_step:
            raise requests.ConnectionError("Connection refused")
        deliver(tracker, rows)

    monkeypatch.setattr(Tracker, "log_metric_rows", store_dies)
    for key in (
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
    ):
        monkeypatch.setenv(key, "1")  # what the upload sets stays in this test
    return lambda: monkeypatch.setattr(Tracker, "log_metric_rows", deliver)


def the_run(tmp_path: Path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss")]
    return run, history


def test_an_upload_cut_short_goes_on_where_it_stopped(tmp_path, monkeypatch, capsys):
    from ms_exp.tracking import upload

    finished_journal(tmp_path, 4)
    store_is_back = dying_store(monkeypatch, at_step=3)
    assert upload.main([str(tmp_path)]) == 1
    assert "still unreachable" in capsys.readouterr().err
    store_is_back()
    assert upload.main([str(tmp_path)]) == 0
    assert "metric values: 2, ended FINISHED" in capsys.readouterr().out
    run, history = the_run(tmp_path)
    assert run.info.status == "FINISHED"
    assert [step for step, _ in history] == [1, 2, 3, 4]
    assert not list((tmp_path / "mlflow-offline").iterdir())


@pytest.mark.parametrize(
    "damaged, held",
    [
        (None, "log_metric_rows, 1 metric value"),
        (b'["train/loss", 0.5, 1011, 11]', "what it held cannot be told from its text"),
    ],
)
def test_a_damaged_line_costs_that_line_only(tmp_path, damaged, held):
    """One line of a finished run's journal is torn, or JSON but not a call: the run gets
    every other step and ends FINISHED, the line is named and kept, the journal goes."""
    journal = finished_journal(tmp_path, 88)
    text = damage_line(journal, 12, damaged)  # step 11's
    result = main_in_process("ms_exp.tracking.upload", [str(tmp_path)], tmp_path)
    assert result.rc == 0, result.stderr
    run, history = the_run(tmp_path)
    assert history == [(step, 1 / step) for step in range(1, 89) if step != 11]
    assert run.info.status == "FINISHED" and "ms_exp.ended_by" not in run.data.tags
    assert "metric values: 87, ended FINISHED" in result.stdout
    kept = Path(f"{journal}.damaged")
    assert result.stderr.splitlines() == [
        f"{WARNING}journal of run {run.info.run_id}: line 12 is damaged and was skipped "
        f"({held}); kept in {kept}"
    ]
    assert not journal.exists() and not Path(f"{journal}.delivered").exists()
    assert kept.read_bytes() == b"line 12: " + text + b"\n"
    assert not journals_in(tmp_path)


def test_an_upload_cut_short_after_a_damaged_line_delivers_each_step_once(
    tmp_path, monkeypatch, capsys
):
    from ms_exp.tracking import upload

    journal = finished_journal(tmp_path, 88)
    damage_line(journal, 12)
    store_is_back = dying_store(monkeypatch, at_step=40)
    assert upload.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "line 12 is damaged and was skipped" in err and "still unreachable" in err
    assert journal.exists() and Path(f"{journal}.damaged").exists()
    store_is_back()
    assert upload.main([str(tmp_path)]) == 0
    assert "metric values: 49, ended FINISHED" in capsys.readouterr().out
    run, history = the_run(tmp_path)
    assert history == [(step, 1 / step) for step in range(1, 89) if step != 11]
    assert run.info.status == "FINISHED"
    assert not journals_in(tmp_path)


def test_a_journal_whose_start_line_is_damaged_creates_no_run(tmp_path):
    journal = finished_journal(tmp_path, 4)
    damage_line(journal, 1)
    result = main_in_process("ms_exp.tracking.upload", [str(tmp_path)], tmp_path)
    assert result.rc == 2
    assert result.stderr.splitlines() == [
        f"ms_exp: error: {journal}: its start line (line 1) is damaged, so which run it is "
        "for cannot be told; nothing delivered"
    ]
    assert MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_experiment_by_name("exp") is None
    assert journal.exists()


def test_a_last_line_cut_off_by_a_killed_job_is_named_and_left_out(tmp_path):
    journal = finished_journal(tmp_path, 4)
    damage_line(journal, 5, last=True)  # step 4's, while the job was killed
    result = main_in_process("ms_exp.tracking.upload", [str(tmp_path)], tmp_path)
    assert result.rc == 0, result.stderr
    run, history = the_run(tmp_path)
    assert [step for step, _ in history] == [1, 2, 3]
    assert run.info.status == "KILLED"
    assert result.stderr.splitlines() == [
        f"{WARNING}journal of run {run.info.run_id}: line 5, the last, is cut off (its job "
        "ended while writing it) and was left out (a log_metric_rows call)"
    ]
    assert not journal.exists() and not Path(f"{journal}.damaged").exists()


def test_upload_without_a_journal_is_a_one_line_error(tmp_path):
    result = main_in_process("ms_exp.tracking.upload", [str(tmp_path)], tmp_path)
    assert result.rc == 2
    assert result.stderr.strip().splitlines() == [
        f"ms_exp: error: RUN_DIR={tmp_path}: nothing to upload (no mlflow-offline/*.jsonl "
        "journal there)"
    ]


@pytest.mark.e2e
def test_a_job_reopens_an_earlier_run_and_appends_to_it(tmp_path):
    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = SidecarTracker(uri, "exp", "resumable", {})
    first.log_metrics({"train/loss": 1.0}, step=1)
    first.finish("KILLED")
    run_id = first.run_id

    second = SidecarTracker(uri, "exp", "ignored", {"ms_exp.resumed": "yes"}, run_id=run_id)
    second.wait_for_run()
    client = MlflowClient(uri)
    assert second.run_id == run_id
    assert client.get_run(run_id).info.status == "RUNNING"
    second.log_metrics({"train/loss": 0.5}, step=2)
    second.finish("FINISHED")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "resumable"
    assert run.data.tags["ms_exp.resumed"] == "yes"
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [1, 2]
    assert len(client.search_runs([run.info.experiment_id])) == 1
