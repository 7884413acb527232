"""``python -m ms_exp.runs list`` fits the terminal: on a fabricated store holding what a new
user's held (a dimension-reduction sweep's four jobs beside a semi-auto run, which differ in
dozens of keys only some runs set), the default table shows the keys that differ among the
runs setting them and that most runs set, within the width, and says what it left out;
--columns and --all-params show what they name."""

import json
import shutil

import pytest
from conftest import main_in_process, migrated_store
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from ms_exp.tracking.store import ensure_experiment

COMMON = {f"trainer.key_{i}": "1" for i in range(20)} | {"model.name": "mlp"}
BOOST = {f"boost.option_{i}": "on" for i in range(9)}
LAUNCHER = {f"parallel.launcher.key_{i}": "x" for i in range(12)}
METRICS = {"eval/accuracy": 0.9, "eval/loss": 0.3, "eval/top_5_accuracy": 1.0, "train/loss": 0.2}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Read, never written, by every test here."""
    tmp_path = tmp_path_factory.mktemp("runs")
    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = ensure_experiment(client, "ms_exp")

    def run(name: str, params: dict, overrides: str) -> str:
        made = client.create_run(experiment, run_name=name, tags={"ms_exp.overrides": overrides})
        run_id = made.info.run_id
        client.log_batch(
            run_id,
            metrics=[Metric(key, value, 0, 0) for key, value in METRICS.items()],
            params=[Param(key, value) for key, value in params.items()],
        )
        client.set_terminated(run_id)
        return run_id

    for rho in ("0.35", "0.4", "0.45", "0.5"):
        params = {**COMMON, **BOOST, "boost.rho": rho, "parallel.mode": "stand_alone"}
        run(f"rho={rho}", params, f"boost=dim_reduce boost.rho={rho}")
    run(
        "mlp-digits-semi_auto",
        {**COMMON, **LAUNCHER, "parallel.mode": "semi_auto"},
        "parallel=semi_auto",
    )
    return tmp_path


def listed(store, *args: str, columns: str = "80"):
    result = main_in_process("ms_exp.runs", ["list", *args], store, env={"COLUMNS": columns})
    assert result.rc == 0 and result.stderr == "", result.stdout + result.stderr
    return result.stdout.splitlines()


def test_the_default_table_fits_80_columns_and_says_what_it_left_out(store):
    header, rule, *rows, note = listed(store)
    assert len(rows) == 5
    assert max(len(line) for line in (header, rule, *rows)) <= 80
    # The swept key, differing among the four runs that set it; the metric that ranks them.
    assert header.split() == ["run_id", "status", "boost.rho", "eval/accuracy"]
    assert [row.split()[2] for row in rows[1:]] == ["0.5", "0.45", "0.4", "0.35"]
    # 9 boost options set alike in the sweep's jobs, 12 launcher keys set by one run, and
    # parallel.mode, which differs but did not fit.
    assert note == (
        "(22 more params: --all-params or --columns to show them; "
        "6 more columns in a wider terminal)"
    )
    # A wider terminal shows the other columns and every key most runs set that differs.
    header, rule, *rows, note = listed(store, columns="200")
    assert header.split() == [
        "run_id",
        "name",
        "status",
        "start",
        "duration_s",
        "boost.rho",
        "parallel.mode",
        *METRICS,
    ]
    assert max(len(line) for line in (header, rule, *rows)) <= 200
    assert note == "(21 more params: --all-params or --columns to show them)"


def test_columns_and_all_params_show_what_they_name(store):
    header, *_ = listed(store, "--columns", "parallel.mode,boost.option_3", columns="300")
    assert header.split()[5:7] == ["parallel.mode", "boost.option_3"]
    header, rule, *rows, note = listed(store, "--columns", "parallel.mode")
    assert header.split() == ["run_id", "status", "parallel.mode", "eval/accuracy"]
    assert note == "(6 more columns in a wider terminal)"
    header, *rows = listed(store, "--all-params", columns="2000")
    assert len(header.split()) == 5 + len({**COMMON, **BOOST, **LAUNCHER}) + 2 + len(METRICS)
    # The machine formats hold every key that differs, whatever the terminal.
    rows = json.loads("\n".join(listed(store, "--format", "json")))
    assert len(rows[0]) == 5 + len(BOOST) + 1 + len(LAUNCHER) + 1 + len(METRICS)


def test_an_unknown_column_is_refused_naming_a_close_key(store):
    result = main_in_process("ms_exp.runs", ["list", "--columns", "boost.roh"], store)
    assert result.rc == 2 and result.stdout == ""
    assert result.stderr == (
        "ms_exp.runs: error: --columns: boost.roh: no listed run has this config key (did you "
        "mean boost.rho?); expected keys of their config (--all-params shows them all)\n"
    )
