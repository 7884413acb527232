"""What makes runs comparable in the MLflow UI, in-process on real stores: the addresses ms_exp
prints (MLflow 3's training view, a sweep's compare page and runs table), the view a sweep
shares through its experiment, the experiment's kind, the swept keys as tags and params free
of each run's own folder. The browser test (tests/test_ui.py) opens these addresses."""

import json
import shutil
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from conftest import migrated_store
from mlflow import MlflowClient

from ms_exp.tracking import sweep
from ms_exp.tracking.params import relative_to_run
from ms_exp.tracking.store import EXPERIMENT_KIND_TAG, TRAINING_KIND, ensure_experiment
from ms_exp.tracking.ui_links import (
    COMPARED_AT_MOST,
    SHARED_VIEW_TAG,
    compare_url,
    share_sweep_view,
    sweep_lines,
    ui_lines,
)

VIEW = "workflowType=machine_learning"


@pytest.fixture
def client(tmp_path) -> MlflowClient:
    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def _route(url: str):
    """The UI's route and its parameters: what follows ``#`` in an address."""
    fragment = urlsplit(url).fragment
    route, _, query = fragment.partition("?")
    return route, {key: values[0] for key, values in parse_qs(query).items()}


def test_every_printed_address_opens_the_training_view(tmp_path):
    local = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command, address = ui_lines(local, "4", "abc")
    assert command.startswith("open it with: ") and "--host 127.0.0.1 --port 5000" in command
    assert address == f"  then browse to http://127.0.0.1:5000/#/experiments/4/runs/abc?{VIEW}"
    # A tracking server serves its own UI: its address, nothing to start.
    assert ui_lines("http://mlflow.example:5000/", "4", "abc") == [
        f"open it in a browser: http://mlflow.example:5000/#/experiments/4/runs/abc?{VIEW}"
    ]
    # A store with no UI of its own (a database server) only says how to open it.
    assert ui_lines("postgresql://db/mlflow", "4", "abc") == [
        "open it with: open postgresql://db/mlflow in a browser"
    ]


def test_the_compare_address_lists_the_runs_url_encoded():
    url = compare_url("http://127.0.0.1:5000", "7", ["a1", "b2"])
    assert " " not in url and '"' not in url and "[" not in url  # one word in a terminal
    route, query = _route(url)
    assert route == "/compare-runs"
    assert json.loads(unquote(query["runs"])) == ["a1", "b2"]
    assert json.loads(unquote(query["experiments"])) == ["7"]
    assert query["workflowType"] == "machine_learning"


def test_a_large_sweep_compares_its_best_jobs_and_shares_a_table_of_all(client):
    experiment = ensure_experiment(client, "big")
    ranked = [f"run{i:02d}" for i in range(25)]
    lines = sweep_lines(client.tracking_uri, experiment, "parent", ranked, "eval/loss", "key")
    assert lines[1].endswith(f"/runs/parent?{VIEW}")
    assert lines[2].startswith(f"  compare its best {COMPARED_AT_MOST} jobs of 25 by eval/loss: ")
    _, query = _route(lines[2].split(": ", 1)[1])
    assert json.loads(unquote(query["runs"])) == ranked[:COMPARED_AT_MOST]
    route, query = _route(lines[3].split(": ", 1)[1])
    assert (route, query) == (
        f"/experiments/{experiment}/runs",
        {"viewStateShareKey": "key", "workflowType": "machine_learning"},
    )


def test_a_sweeps_shared_view_shows_its_jobs_swept_keys_and_objective(client):
    experiment = ensure_experiment(client, "swept")
    key = share_sweep_view(
        client, experiment, "p1", ["boost.rho", "boost.gamma"], "eval/loss", lowest_first=True
    )
    view = json.loads(client.get_experiment(experiment).tags[SHARED_VIEW_TAG + key])
    assert view == {
        "searchFilter": "tags.`mlflow.parentRunId` = 'p1'",
        "orderByKey": "metrics.`eval/loss`",
        "orderByAsc": True,
        "selectedColumns": [
            "params.`boost.rho`",
            "params.`boost.gamma`",
            "metrics.`eval/loss`",
            "attributes.`Duration`",
        ],
    }
    # The filter is MLflow's own search syntax: it finds the sweep's jobs and nothing else.
    parent = client.create_run(experiment).info.run_id
    share_sweep_view(client, experiment, parent, [], "eval/loss", True)
    view = json.loads(client.get_experiment(experiment).tags[SHARED_VIEW_TAG + parent])
    jobs = {
        client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
        for _ in range(2)
    }
    client.create_run(experiment)
    found = client.search_runs([experiment], view["searchFilter"])
    assert {r.info.run_id for r in found} == jobs


def test_experiments_ms_exp_creates_are_of_the_training_kind_unless_the_user_chose(client):
    created = ensure_experiment(client, "new")
    assert client.get_experiment(created).tags[EXPERIMENT_KIND_TAG] == TRAINING_KIND
    # One made before (by MLflow, or an older ms_exp) gets the kind; a kind set stays.
    plain = client.create_experiment("plain")
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    assert ensure_experiment(client, "plain") == plain
    assert ensure_experiment(client, "chosen") == chosen
    assert client.get_experiment(plain).tags[EXPERIMENT_KIND_TAG] == TRAINING_KIND
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_a_jobs_swept_values_are_tags_the_ui_groups_by(monkeypatch):
    monkeypatch.setenv(sweep.SWEPT_KEYS, json.dumps(["boost.rho", "model.hidden_sizes"]))
    tags = sweep.swept_tags(["boost.rho=0.4", "model.hidden_sizes=[8, 16]", "trainer.epochs=2"])
    assert tags == {"ms_exp.swept.boost.rho": "0.4", "ms_exp.swept.model.hidden_sizes": "[8, 16]"}
    monkeypatch.delenv(sweep.SWEPT_KEYS)
    assert sweep.swept_tags(["boost.rho=0.4"]) == {}


def test_paths_inside_the_run_folder_are_recorded_relative_to_it(tmp_path):
    run = tmp_path / "multirun" / "3"
    run.mkdir(parents=True)
    params = {
        "strategy": f"{run}/strategy.ckpt",
        "folder": str(run),
        "deeper": f"{run}/a/b.csv",
        "beside": f"{run}x/y",
        "data": "/data/train.npy",
        "number": 3,
        "metric": "eval/accuracy",
        "climbing": f"{run}/../2/x",
    }
    # Another job's folder (through "..") and a folder that only begins alike stay whole.
    assert relative_to_run(params, run) == {
        **params,
        "strategy": "strategy.ckpt",
        "folder": ".",
        "deeper": "a/b.csv",
    }
    # A run folder reached through a symbolic link is the same folder.
    link = tmp_path / "link"
    link.symlink_to(run)
    assert relative_to_run({"s": f"{run}/s.ckpt"}, link) == {"s": "s.ckpt"}
