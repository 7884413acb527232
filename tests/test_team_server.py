"""A team's MLflow server for real: ``mlflow server`` with its runs in PostgreSQL, artifacts
proxied by the server (``--artifacts-destination``), and MLflow's basic-auth app, so every
job signs in with the credentials in ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``.

A four-job sweep runs four jobs at a time against it; everything is then read back through
the server as a teammate would: every run, every metric's history, every artifact (byte for
byte where the job's folder has the file), and the rows in PostgreSQL itself. The password
is found in no param, tag, artifact or line the sweep printed.
"""
import secrets
from pathlib import Path

import mlflow
import psycopg
import pytest
from conftest import FAST, mlflow_server, postgres_server, run_cli
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus
from omegaconf import OmegaConf

from ms_exp.tracking.params import flatten, param_value

SWEPT = ("optimizer.lr=0.01,0.02,0.05,0.1",)
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
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
        artifacts = root / "artifacts"
        # The database password reaches the server as it reaches any libpq client.
        with mlflow_server(root, "--app-name", "basic-auth", "--backend-store-uri", database,
                           "--artifacts-destination", str(artifacts), "--workers", "2",
                           env={"PGPASSWORD": db_password,
                                "MLFLOW_AUTH_CONFIG_PATH": str(auth_config),
                                # Signs the auth app's CSRF tokens: one per server.
                                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16)}
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
        tmp_path, team_server, as_team_member):
    url, database, db_password, artifacts, password = team_server
    credentials = {"MLFLOW_TRACKING_USERNAME": TEAM_USER, "MLFLOW_TRACKING_PASSWORD": password}
    result = run_cli("ms_exp.run", ["-m", *FAST, "trainer.epochs=1", "hydra/launcher=concurrent",
                                    "hydra.launcher.n_jobs=4", f"tracking.uri={url}",
                                    "tracking.register_model=team_mlp", *SWEPT],
                     tmp_path, env=credentials, timeout=600)
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    client = as_team_member
    experiment = client.get_experiment_by_name("ms_exp")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    assert len(parents) == 1 and len(runs) == 5
    children = [r for r in runs if r is not parents[0]]
    assert sorted(c.info.run_name for c in children) == \
        ["lr=0.01", "lr=0.02", "lr=0.05", "lr=0.1"]
    assert {c.info.status for c in runs} == {"FINISHED"}
    # Four at a time, really: every job started before the first one ended.
    assert max(c.info.start_time for c in children) < min(c.info.end_time for c in children)
    # Artifacts went through the server into its destination, none into the jobs' folder.
    assert all(r.info.artifact_uri.startswith("mlflow-artifacts:") for r in runs)
    assert not list(tmp_path.rglob("mlartifacts")) and not list(tmp_path.rglob("mlruns"))

    for child in children:
        _read_back_job(client, child, tmp_path / "read_back" / child.info.run_id, artifacts)
    _read_back_models(client, experiment.experiment_id, children, tmp_path / "models")
    _in_postgresql(database, db_password, [r.info.run_id for r in runs])

    # The password is in nothing the sweep recorded or printed.
    assert password not in result.stdout + result.stderr
    for run in runs:
        recorded = [*run.data.params.values(), *run.data.tags.values()]
        assert not [value for value in recorded if password in value], run.info.run_name
    assert not [path for path in artifacts.rglob("*")
                if path.is_file() and password.encode() in path.read_bytes()]


def _read_back_job(client, run, local, artifacts) -> None:
    """One job's run, read through the server: its params are its config's, every metric's
    history is there (train/loss at every step), and every artifact downloads, the config
    and checkpoints equal to the job's own files."""
    run_dir = Path(run.data.tags["ms_exp.run_dir"])
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    assert run.data.params == {key: param_value(value) for key, value in flatten(config).items()}
    for key in run.data.metrics:
        assert client.get_metric_history(run.info.run_id, key), key
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 10
    assert "eval/accuracy" in run.data.metrics
    files = _artifact_files(client, run.info.run_id)
    assert {"config/config.yaml", "logs/console.log"} <= set(files), files
    checkpoints = [f for f in files if f.startswith("checkpoints/") and f.endswith(".ckpt")]
    assert checkpoints, files
    downloaded = client.download_artifacts(run.info.run_id, "", str(local))
    for name in files:
        assert (Path(downloaded) / name).is_file(), name
    assert (local / "config" / "config.yaml").read_bytes() == \
        (run_dir / "config.yaml").read_bytes()
    for name in checkpoints:
        mine = run_dir / "checkpoints" / name.split("/", 1)[1]
        assert (local / name).read_bytes() == mine.read_bytes(), name
    # Where the server keeps them: under its own destination, by experiment and run.
    assert list(artifacts.rglob(f"{run.info.run_id}/artifacts/config/config.yaml"))


def _read_back_models(client, experiment_id, children, local) -> None:
    """Every job's best and last checkpoints are models in the server, their files there;
    the sweep registered one version: the best job's best model."""
    models = client.search_logged_models([experiment_id])
    by_run = {}
    for model in models:
        assert model.status == LoggedModelStatus.READY, model
        by_run.setdefault(model.source_run_id, set()).add(model.name)
        path = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=model.artifact_location, dst_path=str(local / model.model_id),
            tracking_uri=client.tracking_uri))
        files = {p.name for p in path.rglob("*") if p.is_file()}
        assert {"MLmodel", "model.mindir", "checkpoint.ckpt", "config.yaml"} <= files, files
    assert by_run == {c.info.run_id: {"best", "last"} for c in children}
    versions = client.search_model_versions("name = 'team_mlp'")
    assert [v.version for v in versions] == ["1"]
    best = max(children, key=lambda c: c.data.metrics["eval/accuracy"])
    assert versions[0].run_id == best.info.run_id


def _artifact_files(client, run_id, path=None):
    found = []
    for entry in client.list_artifacts(run_id, path):
        found += _artifact_files(client, run_id, entry.path) if entry.is_dir else [entry.path]
    return found


def _in_postgresql(database, password, run_ids) -> None:
    """The runs are rows of the PostgreSQL database, not of some local file."""
    with psycopg.connect(database, password=password) as connection:
        stored = {row[0]: row[1] for row in connection.execute(
            "select run_uuid, status from runs")}
        metrics = connection.execute(
            "select count(*) from metrics where key = 'train/loss'").fetchone()[0]
    assert stored == {run_id: "FINISHED" for run_id in run_ids}
    assert metrics > 40


@pytest.mark.server
@pytest.mark.e2e
@pytest.mark.parametrize("username, password, status, hint", [
    ("", "", 401, "MLFLOW_TRACKING_USERNAME is not set"),
    (TEAM_USER, "not-her-password", 401, "check them"),
])
def test_a_job_the_server_does_not_let_in_stops_before_training_in_one_line(
        tmp_path, team_server, username, password, status, hint):
    url = team_server[0]
    result = run_cli("ms_exp.run", [*FAST, "trainer.epochs=1", f"tracking.uri={url}"], tmp_path,
                     env={"MLFLOW_TRACKING_USERNAME": username,
                          "MLFLOW_TRACKING_PASSWORD": password})
    assert result.rc == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"ms_exp: error: tracking.uri={url}: no MLflow run could be created: the server "
        f"refused the job's credentials (HTTP {status}): it reads them from "
        f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD ({hint})")
    assert "Traceback" not in result.stderr and "epoch: 1" not in result.stdout
    if password:
        assert password not in result.stdout + result.stderr
