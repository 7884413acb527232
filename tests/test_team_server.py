"""A team's MLflow server for real: ``mlflow server`` with its runs in PostgreSQL, artifacts
proxied by the server (``--artifacts-destination``), and MLflow's basic-auth app, so every
job signs in with the credentials in ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``.

A two-job sweep runs both jobs at the same time against it; everything is then read back
through the server as a teammate would: every run, every metric's history, every artifact
(byte for byte, against the job's folder and the server's own destination folder), every
model, and the rows in PostgreSQL itself. The password is found in no param, tag, artifact
or line the sweep printed. Each request the server answers checks alice's password (a slow
hash by design): the read-back asks for each thing once.
"""

import contextlib
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import mlflow
import psycopg
import pytest
import requests
from conftest import (
    FAST,
    free_port,
    main_in_process,
    migrated_store,
    mlflow_server,
    postgres_server,
    run_cli,
)
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus
from omegaconf import OmegaConf

from ms_exp.tracking.params import flatten, param_value, relative_to_run

SWEPT = ("optimizer.lr=0.01,0.1",)
# Twelve training steps a job, on a small network; models logged (FAST turns them off).
JOB = (
    *FAST,
    "tracking.log_models=true",
    "trainer.epochs=1",
    "dataset=synthetic",
    "dataset.num_samples=96",
    "dataset.batch_size=8",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)
TEAM_USER = "alice"


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    """(URL, PostgreSQL URL, PostgreSQL password, artifacts folder, alice's password) of
    an MLflow server with basic auth, its store in a PostgreSQL server of its own."""
    root = tmp_path_factory.mktemp("team")
    with postgres_server() as (database, db_password):
        admin_password = secrets.token_hex(12)
        auth_config = root / "basic_auth.ini"
        auth_config.write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{root / 'basic_auth.db'}\n"
            f"admin_username = admin\nadmin_password = {admin_password}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            # As a busy team server runs: a user's password is checked against its slow
            # hash once per five minutes, not on every one of a job's requests.
            "auth_cache_ttl_seconds = 300\n"
        )
        artifacts = root / "artifacts"
        # The database password reaches the server as it reaches any libpq client.
        with mlflow_server(
            root,
            "--app-name",
            "basic-auth",
            "--backend-store-uri",
            database,
            "--artifacts-destination",
            str(artifacts),
            "--workers",
            "2",
            env={
                "PGPASSWORD": db_password,
                "MLFLOW_AUTH_CONFIG_PATH": str(auth_config),
                # Signs the auth app's CSRF tokens: one per server.
                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
            },
        ) as url:
            user_password = _add_user(url, admin_password)
            yield url, database, db_password, artifacts, user_password


def _add_user(url: str, admin_password: str) -> str:
    """A team member, as the admin adds one (MLflow's auth client)."""
    from mlflow.server import get_app_client

    password = secrets.token_hex(12)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        env.setenv("MLFLOW_TRACKING_PASSWORD", admin_password)
        get_app_client("basic-auth", tracking_uri=url).create_user(TEAM_USER, password)
    return password


@pytest.fixture
def as_team_member(team_server, monkeypatch):
    """This process signed in as alice: what the test reads back, it reads as she would."""
    url, _, _, _, password = team_server
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", TEAM_USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    return MlflowClient(url)


@pytest.mark.server
@pytest.mark.e2e
def test_a_concurrent_sweep_against_the_team_server_is_read_back_whole(
    tmp_path, team_server, as_team_member
):
    url, database, db_password, artifacts, password = team_server
    credentials = {"MLFLOW_TRACKING_USERNAME": TEAM_USER, "MLFLOW_TRACKING_PASSWORD": password}
    result = run_cli(
        "ms_exp.run",
        [
            "-m",
            *JOB,
            "hydra/launcher=concurrent",
            "hydra.launcher.n_jobs=2",
            f"tracking.uri={url}",
            "tracking.register_model=team_mlp",
            *SWEPT,
        ],
        tmp_path,
        env=credentials,
        timeout=600,
    )
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    client = as_team_member
    experiment = client.get_experiment_by_name("ms_exp")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    assert len(parents) == 1 and len(runs) == 3
    children = [r for r in runs if r is not parents[0]]
    assert sorted(c.info.run_name for c in children) == ["lr=0.01", "lr=0.1"]
    assert {c.info.status for c in runs} == {"FINISHED"}
    # Both at a time, really: every job started before the first one ended.
    assert max(c.info.start_time for c in children) < min(c.info.end_time for c in children)
    # Artifacts went through the server into its destination, none into the jobs' folder.
    assert all(r.info.artifact_uri.startswith("mlflow-artifacts:") for r in runs)
    assert not list(tmp_path.rglob("mlartifacts")) and not list(tmp_path.rglob("mlruns"))

    histories = _metric_histories(url, (TEAM_USER, password), children)
    for child in children:
        _read_back_job(
            client,
            child,
            histories[child.info.run_id],
            tmp_path / "read_back" / child.info.run_id,
            artifacts,
        )
    _read_back_models(client, experiment.experiment_id, children, tmp_path / "models")
    steps = sum(len(histories[c.info.run_id]["train/loss"]) for c in children)
    _in_postgresql(database, db_password, [r.info.run_id for r in runs], steps)

    # The password is in nothing the sweep recorded or printed.
    assert password not in result.stdout + result.stderr
    for run in runs:
        recorded = [*run.data.params.values(), *run.data.tags.values()]
        assert not [value for value in recorded if password in value], run.info.run_name
    assert not [
        path
        for path in artifacts.rglob("*")
        if path.is_file() and password.encode() in path.read_bytes()
    ]
    # Nor the database's, and neither is in any file: the jobs' folders, all that was
    # downloaded from the server and the server's own artifact folder, and every row of the
    # database (params, tags and inputs of runs and models included).
    assert db_password not in result.stdout + result.stderr
    _nowhere_on_disk([password, db_password], tmp_path, artifacts)
    _in_no_row([password, db_password], database, db_password)
    job = children[0].data.tags["ms_exp.run_dir"]
    assert f"uri: {url}\n" in Path(job, "config.yaml").read_text()  # where it would be


# Every place a job, Hydra or the read-back writes a file (relative to the sweep's working
# folder): each must hold a file the scan reads.
WRITTEN = (
    "multirun/*/*/multirun.yaml",
    "multirun/*/*/*/.hydra/config.yaml",
    "multirun/*/*/*/.hydra/hydra.yaml",
    "multirun/*/*/*/.hydra/overrides.yaml",
    "multirun/*/*/*/config.yaml",
    "multirun/*/*/*/console.log",
    "read_back/*/config/config.yaml",
    "read_back/*/hydra/hydra.yaml",
    "read_back/*/hydra/config.yaml",
    "read_back/*/hydra/overrides.yaml",
    "read_back/*/logs/console.log",
    "models/*/**/config.yaml",
)


def _nowhere_on_disk(secrets_, folder: Path, artifacts: Path) -> None:
    """None of ``secrets_`` is in any file under ``folder`` or ``artifacts``, and the files
    read include one of each of WRITTEN."""
    files = [p for root in (folder, artifacts) for p in root.rglob("*") if p.is_file()]
    missing = [pattern for pattern in WRITTEN if not any(folder.glob(pattern))]
    assert not missing, missing
    leaked = [
        (str(path), n)
        for path in files
        for n, secret in enumerate(secrets_)
        if secret.encode() in path.read_bytes()
    ]
    assert not leaked


def _in_no_row(secrets_, database: str, password: str) -> None:
    """None of ``secrets_`` is in any row of any table of the database."""
    with psycopg.connect(database, password=password) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "select table_name from information_schema.tables where table_schema = 'public'"
            )
        ]
        for table in tables:
            rows = "\n".join(
                row[0] for row in connection.execute(f'select t::text from "{table}" t')
            )
            assert not [n for n, secret in enumerate(secrets_) if secret in rows], table


def _metric_histories(url, auth, runs) -> dict:
    """Run id -> metric -> its history, read as the MLflow UI reads it: every run's history
    of one metric in one request (get-history-bulk), a request per metric."""
    keys = sorted({key for run in runs for key in run.data.metrics})
    found = {run.info.run_id: {} for run in runs}
    for key in keys:
        response = requests.get(
            f"{url}/ajax-api/2.0/mlflow/metrics/get-history-bulk",
            params={"run_id": list(found), "metric_key": key},
            auth=auth,
            timeout=60,
        )
        assert response.status_code == 200, response.text[:500]
        for metric in response.json().get("metrics", []):
            found[metric["run_id"]].setdefault(key, []).append(metric)
    return found


def _read_back_job(client, run, histories, local, artifacts) -> None:
    """One job's run, read through the server: its params are its config's, every metric's
    history is there (train/loss at every step), and every artifact downloads, equal to the
    file in the server's destination (by experiment and run) and the config and checkpoints
    equal to the job's own files."""
    run_dir = Path(run.data.tags["ms_exp.run_dir"])
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    # The config's paths inside the run's folder are recorded relative to it.
    assert run.data.params == {
        key: param_value(value) for key, value in relative_to_run(flatten(config), run_dir).items()
    }
    assert set(histories) == set(run.data.metrics)  # none without its history
    steps = sorted(m["step"] for m in histories["train/loss"])
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 10
    assert "eval/accuracy" in run.data.metrics
    # Every artifact the server lists, downloaded (download_artifacts lists the whole tree).
    downloaded = Path(client.download_artifacts(run.info.run_id, "", str(local)))
    files = {str(p.relative_to(downloaded)) for p in downloaded.rglob("*") if p.is_file()}
    assert {"config/config.yaml", "logs/console.log"} <= files, files
    checkpoints = [f for f in files if f.startswith("checkpoints/") and f.endswith(".ckpt")]
    assert checkpoints, files
    # Where the server keeps them: under its own destination, by experiment and run.
    (kept,) = artifacts.glob(f"*/{run.info.run_id}/artifacts")
    assert files == {str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()}
    for name in files:
        assert (downloaded / name).read_bytes() == (kept / name).read_bytes(), name
    assert (downloaded / "config" / "config.yaml").read_bytes() == (
        run_dir / "config.yaml"
    ).read_bytes()
    for name in checkpoints:
        mine = run_dir / "checkpoints" / name.split("/", 1)[1]
        assert (downloaded / name).read_bytes() == mine.read_bytes(), name


def _read_back_models(client, experiment_id, children, local) -> None:
    """Every job's best and last checkpoints are models in the server, their files there;
    the sweep registered one version: the best job's best model."""
    models = client.search_logged_models([experiment_id])
    by_run = {}
    for model in models:
        assert model.status == LoggedModelStatus.READY, model
        by_run.setdefault(model.source_run_id, set()).add(model.name)
        path = Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri=model.artifact_location,
                dst_path=str(local / model.model_id),
                tracking_uri=client.tracking_uri,
            )
        )
        files = {p.name for p in path.rglob("*") if p.is_file()}
        assert {"MLmodel", "model.mindir", "checkpoint.ckpt", "config.yaml"} <= files, files
    assert by_run == {c.info.run_id: {"best", "last"} for c in children}
    versions = client.search_model_versions("name = 'team_mlp'")
    assert [v.version for v in versions] == ["1"]
    best = max(c.data.metrics["eval/accuracy"] for c in children)
    assert versions[0].run_id in {
        c.info.run_id for c in children if c.data.metrics["eval/accuracy"] == best
    }


def _in_postgresql(database, password, run_ids, steps) -> None:
    """The runs are rows of the PostgreSQL database, not of some local file: every
    train/loss value the jobs logged is a row."""
    with psycopg.connect(database, password=password) as connection:
        stored = {row[0]: row[1] for row in connection.execute("select run_uuid, status from runs")}
        metrics = connection.execute(
            "select count(*) from metrics where key = 'train/loss'"
        ).fetchone()[0]
    assert stored == {run_id: "FINISHED" for run_id in run_ids}
    assert metrics == steps


# Jobs the server turns away, one after the other in one process (``main()`` as ``python -m
# ms_exp.run`` calls it), each in a folder of its own with its own credentials.
REFUSED = """
import json, os, sys
from ms_exp.run import main

cases, args = json.loads(sys.argv[1]), sys.argv[2:]
for folder, username, password in cases:
    os.chdir(folder)
    os.environ.update(MLFLOW_TRACKING_USERNAME=username, MLFLOW_TRACKING_PASSWORD=password)
    for stream in (sys.stdout, sys.stderr):
        print(f"=== job in {folder}", file=stream, flush=True)
    try:
        code = main(list(args))
    except SystemExit as exit:
        code = exit.code
    print(f"=== exit {code}", flush=True)
"""
REFUSALS = [
    ("", "", 401, "MLFLOW_TRACKING_USERNAME is not set"),
    (TEAM_USER, "not-her-password", 401, "check them"),
]


@pytest.fixture(scope="module")
def refused_jobs(team_server, tmp_path_factory):
    """(username, password) -> (exit status, stdout, stderr) of a job with them."""
    root = tmp_path_factory.mktemp("refused")
    cases = [
        (str(root / str(n)), username, password)
        for n, (username, password, _, _) in enumerate(REFUSALS)
    ]
    for folder, _, _ in cases:
        Path(folder).mkdir()
    done = subprocess.run(
        [sys.executable, "-c", REFUSED, json.dumps(cases), *JOB, f"tracking.uri={team_server[0]}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stdouts = done.stdout.split("=== job in ")[1:]
    stderrs = done.stderr.split("=== job in ")[1:]
    assert len(stdouts) == len(stderrs) == len(cases), done.stdout[-3000:] + done.stderr[-3000:]
    found = {}
    for (folder, username, password), out, err in zip(cases, stdouts, stderrs):
        assert out.startswith(f"{folder}\n") and err.startswith(f"{folder}\n")
        out, exit_line = out[len(folder) + 1 :].rsplit("=== exit ", 1)
        found[username, password] = (int(exit_line.split()[0]), out, err[len(folder) + 1 :])
    return found


@pytest.mark.server
@pytest.mark.e2e
@pytest.mark.parametrize("username, password, status, hint", REFUSALS)
def test_a_job_the_server_does_not_let_in_stops_at_its_first_step_in_one_line(
    refused_jobs, team_server, username, password, status, hint
):
    url = team_server[0]
    rc, stdout, stderr = refused_jobs[username, password]
    assert rc == 1
    assert stderr.strip().splitlines()[-1] == (
        f"ms_exp: error: tracking.uri={url}: no MLflow run could be created: the server "
        f"refused the job's credentials (HTTP {status}): it reads them from "
        f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD ({hint})"
    )
    assert "Traceback" not in stderr and "epoch: 1" not in stdout
    if password:
        assert password not in stdout + stderr


# ---------------------------------------------------------------------------------------------
# A password written into a store's URI: refused before anything starts, in one line that
# shows it as ***, on the live server, on a port nobody answers and on the team's PostgreSQL
# itself; nothing reaches the server, the database or the working folder (docs/guides/
# team-server.md). Each command is ``main()`` in this process: the refusal comes before any
# job, so a process of its own would add nothing but its start.

REFUSED_LINE = (
    "{key}='{shown}': a password in {key} would be written into the run's records "
    "and printed; expected a URI without a password, {where}"
)
TO_MLFLOW = (
    "the credentials in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, which "
    "MLflow sends to the server"
)
TO_LIBPQ = (
    "the password in PGPASSWORD or ~/.pgpass (PostgreSQL; MySQL: ~/.my.cnf), which the "
    "database client reads"
)
# A user who wrote the password into the URI has none in MLflow's variables.
NO_CREDENTIALS = {"MLFLOW_TRACKING_USERNAME": None, "MLFLOW_TRACKING_PASSWORD": None}
NO_RUN = "0123456789abcdef0123456789abcdef"


def _tree(folder: Path) -> set:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _recorded(client) -> tuple:
    """Every experiment and run on the server (deleted ones too), as alice reads them."""
    from mlflow.entities import ViewType

    experiments = client.search_experiments(view_type=ViewType.ALL)
    runs = client.search_runs([e.experiment_id for e in experiments], run_view_type=ViewType.ALL)
    return (
        sorted((e.experiment_id, e.name) for e in experiments),
        sorted(r.info.run_id for r in runs),
    )


def _stored(database: str, password: str) -> tuple:
    """What ``_recorded`` reads through the server, read from its database itself (each
    request to the server checks alice's password, a slow hash), and the row count of every
    table in the database's public schema."""
    with psycopg.connect(database, password=password) as connection:
        names = [
            row[0]
            for row in connection.execute(
                "select table_name from information_schema.tables where table_schema = 'public'"
            )
        ]
        counts = {
            name: connection.execute(f'select count(*) from "{name}"').fetchone()[0]
            for name in names
        }
        if "runs" not in counts:
            return None, counts
        experiments = connection.execute("select experiment_id, name from experiments")
        runs = connection.execute("select run_uuid from runs")
        return (
            sorted((str(i), name) for i, name in experiments),
            sorted(row[0] for row in runs),
        ), counts


def _with_password(url: str, user: str, password: str) -> str:
    """``url`` with ``user:password@`` written into it, as a hurried user would."""
    scheme, rest = url.split("://", 1)
    rest = rest.split("@", 1)[-1]
    return f"{scheme}://{user}:{password}@{rest}"


def _assert_refused(result, secret: str, line: str, before: set) -> None:
    """Exit 2, ``line`` alone on stderr, the secret printed nowhere, nothing in the folder."""
    assert result.rc == 2, result.stdout[-3000:] + result.stderr[-3000:]
    (printed,) = result.stderr.strip().splitlines()
    assert printed.endswith(f": error: {line}"), printed
    assert "***@" in printed and secret not in result.stdout + result.stderr
    assert result.stdout == ""
    assert _tree(result.cwd) == before


@pytest.mark.server
@pytest.mark.e2e
@pytest.mark.parametrize("where", ["server up", "server down", "postgresql"])
def test_a_password_in_tracking_uri_is_refused_before_anything_reaches_the_store(
    tmp_path, team_server, as_team_member, where
):
    url, database, db_password, _, password = team_server
    if where == "postgresql":  # the server's own store, which a job could open itself
        uri, secret, hint = _with_password(database, "ms_exp", db_password), db_password, TO_LIBPQ
    else:
        port = url.rsplit(":", 1)[1] if where == "server up" else free_port()
        uri, secret, hint = f"http://{TEAM_USER}:{password}@127.0.0.1:{port}", password, TO_MLFLOW
    stored, rows = _stored(database, db_password)
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "notes.txt").write_text("the user's own file\n")
    before = _tree(folder)
    result = main_in_process(
        "ms_exp.run",
        [*JOB, f"tracking.uri={uri}", "tracking.experiment_name=refused"],
        folder,
        env=NO_CREDENTIALS,
    )
    _assert_refused(
        result,
        secret,
        REFUSED_LINE.format(key="tracking.uri", shown=uri.replace(secret, "***"), where=hint),
        before,
    )
    assert _recorded(as_team_member) == stored
    assert _stored(database, db_password) == (stored, rows)


@pytest.fixture(scope="module")
def optuna_database(team_server):
    """A database of its own for Optuna's tables in the team's PostgreSQL (the server's
    database holds MLflow's, and both keep an ``alembic_version``): its URL, no password."""
    database, db_password = team_server[1], team_server[2]
    with psycopg.connect(database, password=db_password, autocommit=True) as connection:
        connection.execute("create database optuna")
    return database.rsplit("/", 1)[0] + "/optuna"


@pytest.mark.server
@pytest.mark.e2e
def test_a_password_in_the_sweeps_optuna_storage_is_refused_before_any_job(
    tmp_path, team_server, as_team_member, optuna_database
):
    url, database, db_password, _, password = team_server
    storage = _with_password(optuna_database, "ms_exp", db_password)
    stored, rows = _stored(database, db_password)
    folder = tmp_path / "sweep"
    folder.mkdir()
    before = _tree(folder)
    result = main_in_process(
        "ms_exp.run",
        [
            "-m",
            "hydra/sweeper=optuna",
            "hydra.sweeper.study_name=leak",
            f"hydra.sweeper.storage={storage}",
            "hydra.sweeper.n_trials=1",
            "optimizer.lr=interval(0.01,0.2)",
            *JOB,
            f"tracking.uri={url}",
            "tracking.experiment_name=refused",
        ],
        folder,
        env={"MLFLOW_TRACKING_USERNAME": TEAM_USER, "MLFLOW_TRACKING_PASSWORD": password},
    )
    _assert_refused(
        result,
        db_password,
        (
            f"hydra.sweeper.storage='{storage.replace(db_password, '***')}': a password in the "
            "URL would be written into the sweep's Hydra records and MLflow artifacts; expected a "
            "database URL without a password, the password in PGPASSWORD or ~/.pgpass (libpq "
            "reads them)"
        ),
        before,
    )
    assert not (folder / "multirun").exists()
    # No study, not even Optuna's tables: the storage was never opened.
    assert _stored(optuna_database, db_password) == (None, {})
    assert _recorded(as_team_member) == stored
    assert _stored(database, db_password) == (stored, rows)


@pytest.mark.server
@pytest.mark.e2e
@pytest.mark.parametrize(
    "module, args, key",
    [
        ("ms_exp.eval", ["--run-id", NO_RUN], "--tracking-uri"),
        ("ms_exp.report", [NO_RUN], "--tracking-uri"),
        ("ms_exp.ckpt", ["merge", NO_RUN], "--tracking-uri"),
        ("ms_exp.tracking.upload", ["."], "--tracking-uri"),
        ("ms_exp.report", [NO_RUN, "--tracking-uri", "<server>"], "--optuna-storage"),
    ],
)
def test_the_read_commands_refuse_a_password_in_a_store_uri_of_the_live_server(
    tmp_path, team_server, as_team_member, optuna_database, module, args, key
):
    url, database, db_password, _, password = team_server
    args = [url if arg == "<server>" else arg for arg in args]
    if key == "--tracking-uri":
        uri, secret, hint = _with_password(url, TEAM_USER, password), password, TO_MLFLOW
    else:
        uri = _with_password(optuna_database, "ms_exp", db_password)
        secret, hint = db_password, TO_LIBPQ
    stored, rows = _stored(database, db_password)
    folder = tmp_path / "reader"
    folder.mkdir()
    before = _tree(folder)
    result = main_in_process(module, [*args, key, uri], folder, env=NO_CREDENTIALS)
    _assert_refused(
        result,
        secret,
        REFUSED_LINE.format(key=key, shown=uri.replace(secret, "***"), where=hint),
        before,
    )
    assert _recorded(as_team_member) == stored
    assert _stored(database, db_password) == (stored, rows)
    assert _stored(optuna_database, db_password) == (None, {})


# ---------------------------------------------------------------------------------------------
# Train offline, push later: runs recorded in a cluster's local store (fabricated here with
# MlflowClient as ms_exp.run records them: training jobs would add minutes and nothing the push
# reads) pushed to the team server by ``python -m ms_exp.runs push``.

OFFLINE = "offline"  # the experiment: the sweep test above reads every run of "ms_exp"
STEPS = 6  # train/loss values an epoch


def _epochs(client, run_id: str, folder: Path, first: int, last: int, files: int = 1) -> None:
    """What a job records for epochs ``first``..``last``: train/loss at every step, the
    evaluation at each epoch's end, ``files`` checkpoint files an epoch, and its "last"
    model (the one of an earlier attempt replaced, as a resumed job replaces it)."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus, Metric

    run = client.get_run(run_id)
    experiment = run.info.experiment_id
    stamp = run.info.start_time
    metrics = []
    for epoch in range(first, last + 1):
        for step in range((epoch - 1) * STEPS + 1, epoch * STEPS + 1):
            metrics.append(Metric("train/loss", 2.0 / step, stamp + step, step))
        metrics += [
            Metric("eval/accuracy", 1 - 0.5 / epoch, stamp + step, step),
            Metric("train/epoch", epoch, stamp + step, step),
        ]
        kept = folder / run_id / "checkpoints" / "rank_0"
        kept.mkdir(parents=True, exist_ok=True)
        for n in range(files):
            (kept / f"checkpoint-{epoch}_{n}.ckpt").write_bytes(os.urandom(256 * 1024))
    client.log_batch(run_id, metrics=metrics)
    client.log_artifacts(run_id, str(kept.parent), "checkpoints")
    for earlier in client.search_logged_models(
        [experiment], filter_string=f"source_run_id = '{run_id}'"
    ):
        client.delete_logged_model(earlier.model_id)
    model = client.create_logged_model(
        experiment,
        name="last",
        source_run_id=run_id,
        params={"epochs": str(last)},
        tags={"ms_exp.checkpoint": "last"},
        model_type="mindspore",
    )
    files_of_model = folder / model.model_id
    files_of_model.mkdir()
    (files_of_model / "MLmodel").write_text(f"model_id: {model.model_id}\n")
    (files_of_model / "checkpoint.ckpt").write_bytes(os.urandom(4096))
    client.log_model_artifacts(model.model_id, str(files_of_model))
    point = metrics[-2]  # the last evaluation, linked to the model too
    client.log_metric(
        run_id, point.key, point.value, point.timestamp, point.step, model_id=model.model_id
    )
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])
    client.set_tag(run_id, "ms_exp.model.last", model.model_id)
    client.set_terminated(run_id, end_time=stamp + step + 1)


def _offline_store(folder: Path) -> SimpleNamespace:
    """A local store as a cluster leaves it: a two-job sweep (its parent tagged with the
    best job and the version it registered), a plain run with a dataset input and 16
    checkpoint files (4 MB), and a run of one epoch, to be resumed after its push."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    from ms_exp.tracking.registry import register

    shutil.copyfile(migrated_store(), folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment(
        OFFLINE, artifact_location=(folder / "mlartifacts").as_uri()
    )

    def run(name: str, tags=None, **params) -> str:
        made = client.create_run(experiment, run_name=name, tags=tags or {}).info.run_id
        for key, value in {"optimizer.lr": "0.1", **params}.items():
            client.log_param(made, key, value)
        return made

    parent = client.create_run(
        experiment, run_name="sweep", tags={"ms_exp.sweep": "true"}
    ).info.run_id
    jobs = [
        run(
            f"lr={lr}",
            {"mlflow.parentRunId": parent, "ms_exp.sweep.id": parent},
            **{"optimizer.lr": lr},
        )
        for lr in ("0.01", "0.2")
    ]
    for job in jobs:
        _epochs(client, job, folder, 1, 2)
    client.set_tag(parent, "ms_exp.sweep.best_run", jobs[1])
    (best,) = client.search_logged_models([experiment], f"source_run_id = '{jobs[1]}'")
    client.set_tag(parent, "ms_exp.sweep.best_model", best.model_id)
    with contextlib.redirect_stdout(io.StringIO()):
        register(client, best, "offline_mlp", run_id=parent)
    client.set_terminated(parent)
    plain = run("plain", **{"model.hidden_size": "16"})
    digits = MetaDataset(source=HTTPDatasetSource("https://example.org/digits"), name="digits")
    context = [InputTag("mlflow.data.context", "training")]
    client.log_inputs(plain, datasets=[DatasetInput(digits._to_mlflow_entity(), context)])
    _epochs(client, plain, folder, 1, 2, files=8)
    resumed = run("resumed")
    _epochs(client, resumed, folder, 1, 1)
    return SimpleNamespace(
        uri=uri, client=client, parent=parent, jobs=jobs, plain=plain, resumed=resumed
    )


def _listing(client, run_id: str, folder=None) -> list:
    """(path, size) of every artifact file of the run."""
    found = []
    for entry in client.list_artifacts(run_id, folder):
        found += (
            _listing(client, run_id, entry.path)
            if entry.is_dir
            else [(entry.path, entry.file_size)]
        )
    return sorted(found)


def _pushed_as_recorded(source, target) -> dict:
    """Each run of the offline experiment has one copy on the server, which reads as the
    source run does, every run and model id in it the server's: params, tags, status and
    times, every value of every metric, the artifacts (path and size), the dataset inputs,
    the logged models (their params, tags, metrics and files) and the outputs. The source's
    ids -> the server's."""
    ours = source.search_runs([source.get_experiment_by_name(OFFLINE).experiment_id])
    experiment = target.get_experiment_by_name(OFFLINE).experiment_id
    theirs = target.search_runs([experiment])
    copies = {r.data.tags["ms_exp.pushed.from_run"]: r for r in theirs}
    assert len(theirs) == len(copies) == len(ours)
    assert {r.data.tags["ms_exp.pushed.from_store"] for r in theirs} == {source.tracking_uri}
    models = {
        m.tags["ms_exp.pushed.from_model"]: m for m in target.search_logged_models([experiment])
    }
    ids = {
        **{run_id: copy.info.run_id for run_id, copy in copies.items()},
        **{model_id: model.model_id for model_id, model in models.items()},
    }
    assert len(models) == len(source.search_logged_models([ours[0].info.experiment_id]))

    def swapped(tags) -> dict:
        # mlflow.modelVersions: the server's registry notes a version on its model itself.
        return {
            k: ids.get(v, v)
            for k, v in tags.items()
            if not k.startswith("ms_exp.pushed.") and k != "mlflow.modelVersions"
        }

    for run in ours:
        copy = copies[run.info.run_id]
        assert copy.data.params == run.data.params
        assert swapped(copy.data.tags) == swapped(run.data.tags)
        assert [
            getattr(copy.info, a) for a in ("run_name", "status", "start_time", "end_time")
        ] == [getattr(run.info, a) for a in ("run_name", "status", "start_time", "end_time")]
        for key in run.data.metrics:
            assert [
                (m.step, m.timestamp, m.value)
                for m in target.get_metric_history(copy.info.run_id, key)
            ] == [
                (m.step, m.timestamp, m.value)
                for m in source.get_metric_history(run.info.run_id, key)
            ]
        assert copy.data.metrics.keys() == run.data.metrics.keys()
        assert _listing(target, copy.info.run_id) == _listing(source, run.info.run_id)
        assert [
            (i.dataset.name, i.dataset.digest, i.dataset.source) for i in copy.inputs.dataset_inputs
        ] == [
            (i.dataset.name, i.dataset.digest, i.dataset.source) for i in run.inputs.dataset_inputs
        ]
        # A model a resumed run replaced stays among its outputs, deleted, on both sides.
        live = set(ids.values())
        assert sorted(
            (ids[o.model_id], o.step) for o in run.outputs.model_outputs if o.model_id in ids
        ) == sorted((o.model_id, o.step) for o in copy.outputs.model_outputs if o.model_id in live)
    for model in source.search_logged_models([ours[0].info.experiment_id]):
        copy = models[model.model_id]
        assert (copy.name, copy.params, copy.status, copy.source_run_id) == (
            model.name,
            model.params,
            model.status,
            ids[model.source_run_id],
        )
        assert swapped(copy.tags) == swapped(model.tags)
        assert [(m.key, m.value, m.step, m.timestamp, m.run_id) for m in copy.metrics] == [
            (m.key, m.value, m.step, m.timestamp, ids[m.run_id]) for m in model.metrics
        ]
        assert [
            (f.path, f.file_size) for f in target.list_logged_model_artifacts(copy.model_id)
        ] == [(f.path, f.file_size) for f in source.list_logged_model_artifacts(model.model_id)]
    return ids


@pytest.mark.server
@pytest.mark.e2e
def test_runs_trained_offline_are_pushed_once_also_through_a_killed_push_and_a_resume(
    tmp_path, team_server, as_team_member
):
    url, _, _, _, password = team_server
    credentials = {"MLFLOW_TRACKING_USERNAME": TEAM_USER, "MLFLOW_TRACKING_PASSWORD": password}
    offline = _offline_store(tmp_path)
    push = ["push", "--to", url, "--tracking-uri", offline.uri, "--register"]
    # Killed among the plain run's 16 checkpoints, at its first line of progress.
    killed = subprocess.Popen(
        [sys.executable, "-m", "ms_exp.runs", *push],
        cwd=tmp_path,
        env={**os.environ, **credentials, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said = []
    for line in killed.stdout:
        said.append(line)
        if "artifacts: 1/16 files" in line:
            killed.kill()
            break
    assert killed.wait(timeout=60) == -9, "".join(said)
    server = as_team_member
    (halfway,) = server.search_runs(
        [server.get_experiment_by_name(OFFLINE).experiment_id],
        f"tags.`ms_exp.pushed.from_run` = '{offline.plain}'",
    )
    assert 0 < len(_listing(server, halfway.info.run_id)) < 16

    again = run_cli("ms_exp.runs", push, tmp_path, env=credentials)
    assert again.rc == 0, again.stdout[-3000:] + again.stderr[-3000:]
    ids = _pushed_as_recorded(offline.client, server)
    assert ids[offline.plain] == halfway.info.run_id
    summary, *addresses = again.stdout[again.stdout.index("pushed 5 runs") :].splitlines()
    assert summary.startswith("pushed 5 runs: 3 new, 2 updated, 0 unchanged, ")
    experiment = server.get_experiment_by_name(OFFLINE).experiment_id
    assert addresses == [
        f"open it in a browser: {url}/#/experiments/{experiment}/runs/{ids[run]}"
        "?workflowType=machine_learning"
        for run in (offline.parent, offline.plain, offline.resumed)
    ]
    (version,) = server.search_model_versions("name = 'offline_mlp'")
    assert (version.run_id, version.source) == (
        ids[offline.jobs[1]],
        f"models:/{server.get_run(ids[offline.parent]).data.tags['ms_exp.sweep.best_model']}",
    )
    assert (
        server.get_run(ids[offline.parent]).data.tags["ms_exp.registered_model"] == "offline_mlp/1"
    )
    assert password not in again.stdout + again.stderr

    # A second push copies nothing.
    nothing = main_in_process("ms_exp.runs", push, tmp_path, env=credentials)
    assert "pushed 5 runs: 0 new, 0 updated, 5 unchanged, 0 bytes of artifacts\n" in nothing.stdout
    assert _pushed_as_recorded(offline.client, server) == ids

    # The resumed run goes on offline for two more epochs: the same copy gets only those
    # (their metric values, two checkpoints, the "last" model that replaced the first).
    _epochs(offline.client, offline.resumed, tmp_path, 2, 3)
    more = main_in_process(
        "ms_exp.runs", [*push, "--run", offline.resumed], tmp_path, env=credentials
    )
    assert more.rc == 0, more.stderr[-3000:]
    assert "pushed 1 run: 0 new, 1 updated, 0 unchanged, 524.3 kB of artifacts\n" in more.stdout
    continued = _pushed_as_recorded(offline.client, server)
    assert continued[offline.resumed] == ids[offline.resumed]
    assert continued.keys() - ids.keys() == {
        offline.client.get_run(offline.resumed).data.tags["ms_exp.model.last"]
    }


@pytest.mark.server
@pytest.mark.e2e
def test_a_push_that_cannot_be_done_is_refused_in_one_line(tmp_path):
    """Each refusal: exit 2, one line naming the key, the value and what is allowed; the
    source store as it was."""
    offline = _offline_store(tmp_path)
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("my notes\n")
    port = free_port()
    cases = [
        (
            ["--to", f"http://127.0.0.1:{port}"],
            f"--to: http://127.0.0.1:{port}: it does not answer (connection refused); expected "
            "a reachable MLflow tracking server or store",
        ),
        (
            ["--to", offline.uri],
            f"--to: {offline.uri}: it is the source store ({offline.uri}); expected another "
            "MLflow store, e.g. the team's server http://host:5000",
        ),
        (
            ["--to", "sqlite:///team.db", "--run", NO_RUN],
            f"--run: {NO_RUN}: no such run in {offline.uri}; expected the id of a run in that "
            "store (python -m ms_exp.runs list)",
        ),
        (
            ["--to", "sqlite:///team.db", "--tracking-uri", f"sqlite:///{not_a_store}"],
            f"--tracking-uri: sqlite:///{not_a_store}: no MLflow store at sqlite:///{not_a_store} "
            f"({not_a_store} is not a SQLite database); expected an existing MLflow store",
        ),
    ]
    before = (tmp_path / "mlflow.db").read_bytes()
    for args, said in cases:
        args = ["push", "--tracking-uri", offline.uri, *args]
        result = main_in_process("ms_exp.runs", args, tmp_path)
        assert result.rc == 2 and result.stdout == "", result.stdout + result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"ms_exp.runs: error: {said}"), line
    assert (tmp_path / "mlflow.db").read_bytes() == before
    assert not (tmp_path / "team.db").exists()
