"""``python -m ms_exp.runs list|best|diff`` and ``ms_exp.runs.table`` on a real store: a
two-job sweep, two plain runs and a run resumed with more epochs, all trained in this
process (``main_in_process``), read back by the commands' main() and compared with what
MLflow holds; and each refusal, one line and exit 2 with nothing created."""

import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas
import pytest
from conftest import FAST, main_in_process, migrated_store
from mlflow import MlflowClient

import ms_exp.runs
from ms_exp.tracking.compare import RUN_COLUMNS, CompareError

TINY = (
    *FAST,
    "trainer.epochs=2",
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
)
METRICS = ["eval/accuracy", "eval/loss", "eval/top_5_accuracy", "train/loss"]
PROG = "ms_exp.runs"
# In-process, but five training jobs (about 40 s) are more than the fast lane's budget holds.
pytestmark = pytest.mark.e2e


def trained(cwd: Path, *args: str, flags=()) -> str:
    result = main_in_process("ms_exp.run", [*flags, *TINY, *args], cwd)
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return re.findall(r"^MLflow (?:parent )?run (\w+)", result.stdout, re.M)[-1]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The sweep (optimizer.lr=0.01,0.2), then two plain runs (model.hidden_size=16,
    optimizer.lr=0.3), then a run of one epoch resumed to three."""
    cwd = tmp_path_factory.mktemp("runs")
    (cwd / "mlflow.db").write_bytes(migrated_store().read_bytes())
    parent = trained(cwd, "optimizer.lr=0.01,0.2", flags=["-m"])
    wide = trained(cwd, "model.hidden_size=16")
    fast = trained(cwd, "optimizer.lr=0.3")
    resumed = trained(cwd, "trainer.epochs=1", "hydra.run.dir=resumed")
    assert trained(cwd, "trainer.epochs=3", "trainer.resume=resumed") == resumed
    uri = f"sqlite:///{cwd / 'mlflow.db'}"
    client = MlflowClient(uri)
    children = client.search_runs(
        ["1"], f"tags.mlflow.parentRunId = '{parent}'", order_by=["attributes.start_time ASC"]
    )
    return SimpleNamespace(
        cwd=cwd,
        uri=uri,
        client=client,
        parent=parent,
        sweep_dir=client.get_run(parent).data.tags["ms_exp.sweep.dir"],
        jobs=[c.info.run_id for c in children],
        wide=wide,
        fast=fast,
        resumed=resumed,
    )


def ran(store, *args: str, cwd=None):
    """The command run in the store's folder (its default store), or in ``cwd``."""
    return main_in_process("ms_exp.runs", list(args), cwd or store.cwd)


def ok(result) -> str:
    assert result.rc == 0 and result.stderr == "", result.stdout + result.stderr
    return result.stdout


def one_line(result) -> str:
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), result.stderr
    assert result.stdout == ""
    return lines[0][len(f"{PROG}: error: ") :]


def newest_first(store):
    runs = store.client.search_runs(["1"], order_by=["attributes.start_time DESC"])
    return [r for r in runs if r.info.run_id != store.parent]


# -- list -----------------------------------------------------------------------------------


def test_list_shows_every_job_newest_first_with_only_the_keys_that_differ(store):
    runs = newest_first(store)
    assert [r.info.run_id for r in runs] == [
        store.resumed,
        store.fast,
        store.wide,
        *reversed(store.jobs),
    ]
    rows = json.loads(ok(ran(store, "list", "--format", "json")))
    assert [row["run_id"] for row in rows] == [r.info.run_id for r in runs]
    assert list(rows[0]) == [
        *RUN_COLUMNS,
        "model.hidden_size",
        "optimizer.lr",
        "trainer.epochs",
        *METRICS,
    ]
    for row, run in zip(rows, runs):
        assert row["name"] == run.info.run_name and row["status"] == "FINISHED"
        assert {m: row[m] for m in METRICS} == {m: run.data.metrics[m] for m in METRICS}
        assert row["duration_s"] == (run.info.end_time - run.info.start_time) / 1000
        assert {k: row[k] for k in ("model.hidden_size", "optimizer.lr", "trainer.epochs")} == {
            k: run.data.params[k] for k in ("model.hidden_size", "optimizer.lr", "trainer.epochs")
        }
    assert [row["optimizer.lr"] for row in rows] == ["0.05", "0.3", "0.05", "0.2", "0.01"]
    # The resumed run keeps the params it started with (MLflow's params do not change).
    assert rows[0]["trainer.epochs"] == "1"


def test_the_resumed_run_is_one_row_holding_its_last_evaluation(store):
    frame = ms_exp.runs.table(tracking_uri=store.uri, filter="tags.`ms_exp.resumed_from` LIKE '%'")
    assert list(frame["run_id"]) == [store.resumed]
    history = store.client.get_metric_history(store.resumed, "eval/loss")
    assert [m.step for m in history] == [2, 4, 6]
    assert frame.loc[0, "eval/loss"] == history[-1].value


def test_the_table_for_a_notebook_is_the_listed_one(store):
    frame = ms_exp.runs.table(tracking_uri=store.uri)
    assert isinstance(frame, pandas.DataFrame)
    listed = pandas.read_csv(
        io.StringIO(ok(ran(store, "list", "--format", "csv"))),
        dtype={"model.hidden_size": str, "optimizer.lr": str, "trainer.epochs": str},
        float_precision="round_trip",
    )
    assert list(listed.columns) == list(frame.columns)
    assert list(listed["run_id"]) == list(frame["run_id"])
    for column in [*METRICS, "optimizer.lr"]:
        assert list(listed[column]) == list(frame[column])
    assert list(pandas.to_datetime(listed["start"], utc=True)) == list(frame["start"])


def test_list_of_a_sweep_shows_its_swept_key(store):
    for sweep in (store.parent, store.sweep_dir):
        args = ["list", "--sweep", sweep, "--metric", "eval/accuracy"]
        out = ok(main_in_process(PROG, args, store.cwd, env={"COLUMNS": "80"}))
        header, rule, *rows, note = out.splitlines()
        # Fitted to 80 columns: the id, the swept key and the metric first.
        assert header.split() == ["run_id", "status", "optimizer.lr", "eval/accuracy"]
        assert note == "(name, duration_s, start left out to fit 80 columns)"
        assert [row.split()[0] for row in rows] == list(reversed(store.jobs))
        for row, run_id in zip(rows, reversed(store.jobs)):
            run = store.client.get_run(run_id)
            assert row.split()[-2:] == [
                run.data.params["optimizer.lr"],
                f"{run.data.metrics['eval/accuracy']:.4f}",
            ]


def test_list_by_experiment_filter_and_markdown(store):
    out = ok(
        ran(
            store,
            "list",
            "--experiment",
            "ms_exp",
            "--filter",
            "params.optimizer.lr = '0.3'",
            "--format",
            "markdown",
        )
    )
    header, rule, row = out.splitlines()
    assert header.startswith("| run_id ") and rule.startswith("|:--")
    # One run: no key differs.
    assert [c.strip() for c in header.strip("|").split("|")] == [*RUN_COLUMNS, *METRICS]
    assert row.startswith(f"| {store.fast} ")
    empty = ok(ran(store, "list", "--filter", "params.optimizer.lr = '9'"))
    assert empty == f"no runs in the store ({store.uri})\n"


# -- best -----------------------------------------------------------------------------------


def expected_best(store, metric: str, lowest: bool, ids=None):
    """By MLflow's values; of equal values the run that started first."""
    runs = [r for r in reversed(newest_first(store)) if ids is None or r.info.run_id in ids]
    pick = min if lowest else max
    return pick(runs, key=lambda r: r.data.metrics[metric])


def best_of(store, *args: str) -> dict:
    lines = ok(ran(store, "best", *args)).splitlines()
    fields = dict(line.split(": ", 1) for line in lines)
    fields["run_id"] = fields["best run"].split()[0]
    return fields


@pytest.mark.parametrize(
    "args, metric, lowest",
    [
        ((), "eval/accuracy", False),
        (("--metric", "eval/loss"), "eval/loss", True),
        (("--metric", "eval/loss", "--max"), "eval/loss", False),
        (("--metric", "eval/accuracy", "--min"), "eval/accuracy", True),
    ],
)
def test_best_picks_the_best_run_by_the_metrics_direction(store, args, metric, lowest):
    best = expected_best(store, metric, lowest)
    fields = best_of(store, *args)
    assert fields["run_id"] == best.info.run_id
    value = best.data.metrics[metric]
    assert fields[metric].startswith(
        f"{value:.6g}, the {'lowest' if lowest else 'highest'} of 5 finished runs ("
    )
    assert fields["overrides"].split() == best.data.tags["ms_exp.overrides"].split()
    checkpoint = Path(fields["best checkpoint"])
    assert checkpoint == Path(best.data.tags["ms_exp.run_dir"]) / "checkpoints/rank_0/best.ckpt"
    assert checkpoint.is_file() and Path(fields["last checkpoint"]).is_file()


def test_best_of_a_sweep_is_one_of_its_jobs(store):
    fields = best_of(store, "--sweep", store.parent, "--metric", "train/loss")
    assert fields["run_id"] == expected_best(store, "train/loss", True, store.jobs).info.run_id
    assert "optimizer.lr=" in fields["overrides"]


# -- diff -----------------------------------------------------------------------------------


def markdown_rows(text: str, title: str):
    block = text.split(title, 1)[1].strip().split("\n\n")[0].splitlines()[2:]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in block]


def test_diff_shows_only_the_keys_that_differ_the_metrics_and_the_checkpoints(store):
    out = ok(ran(store, "diff", store.wide, store.fast))
    assert out.startswith(f"A: {store.wide} (")
    assert "config: 2 of " in out
    assert markdown_rows(out, "keys differ") == [
        ["model.hidden_size", "16", "8"],
        ["optimizer.lr", "0.05", "0.3"],
    ]
    a, b = (store.client.get_run(i).data.metrics for i in (store.wide, store.fast))
    assert markdown_rows(out, "final metrics:") == [
        [m, f"{a[m]:.4f}", f"{b[m]:.4f}", f"{b[m] - a[m]:+.4f}"] for m in METRICS
    ]
    checkpoints = markdown_rows(out, "checkpoints:")
    assert [row[0] for row in checkpoints] == ["best", "last"]
    for path in (p for row in checkpoints for p in row[1:]):
        assert Path(path).is_file()


def test_diff_of_two_jobs_of_a_sweep_is_their_swept_key(store):
    out = ok(ran(store, "diff", *store.jobs, "--metric", "eval/accuracy"))
    assert markdown_rows(out, "keys differ") == [["optimizer.lr", "0.01", "0.2"]]
    assert [row[0] for row in markdown_rows(out, "final metrics:")] == ["eval/accuracy"]


def test_diff_of_a_run_with_itself_says_the_config_is_the_same(store):
    out = ok(ran(store, "diff", store.fast, store.fast))
    assert re.search(r"^config: the same \d+ keys and values$", out, re.M)
    assert [row[3] for row in markdown_rows(out, "final metrics:")] == ["+0.0000"] * 4


# -- refusals -------------------------------------------------------------------------------

UNKNOWN = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ("list", "--experiment", "nope"),
            "--experiment: nope: no such experiment in {uri}; expected one of: Default, ms_exp",
        ),
        (
            ("list", "--sweep", UNKNOWN),
            f"--sweep: {UNKNOWN}: no run '{UNKNOWN}' in {{uri}}; "
            "expected the parent run id or the folder of a sweep: "
            "{parent} (sweep-run-",
        ),
        (
            ("best", "--sweep", "{fast}"),
            "--sweep: {fast}: run {fast} is not the parent run of a "
            "sweep; expected the parent run id or the folder of a "
            "sweep: {parent} (sweep-run-",
        ),
        (
            ("list", "--metric", "eval/acc"),
            "--metric: eval/acc: no run logged it (did you mean "
            "eval/accuracy?); expected one the runs logged: "
            "checkpoint/bytes_rank_0, ",
        ),
        (
            ("best", "--metric", "f1"),
            "--metric: f1: no run logged it; expected one the runs "
            "logged: checkpoint/bytes_rank_0, ",
        ),
        (("list", "--filter", "params.lr == '1'"), "--filter: params.lr == '1': "),
        (
            ("diff", UNKNOWN, "{fast}"),
            f"RUN_A: {UNKNOWN}: no such run in {{uri}}; expected the "
            "id of a job's run (32 hex digits, printed as 'MLflow run "
            "<id>' by the job) in that store (the newest: {resumed} (",
        ),
        (
            ("diff", "{fast}", "ms_exp"),
            "RUN_B: ms_exp: not a run id; expected the id of a job's "
            "run (32 hex digits, printed as 'MLflow run <id>' by the "
            "job) (the newest: {resumed} (",
        ),
        (
            ("diff", "{fast}", "{parent}"),
            "RUN_B: {parent}: this is the parent run of a sweep (2 "
            "jobs), not a job's run; expected the run of one of its "
            "jobs: ",
        ),
        (
            ("best", "--filter", "attributes.status = 'FAILED'"),
            "no finished run in the store ({uri}); expected runs that finished (statuses: no runs)",
        ),
    ],
)
def test_what_is_unknown_is_refused_in_one_line_naming_what_exists(store, args, said):
    names = {"uri": store.uri, "fast": store.fast, "parent": store.parent, "resumed": store.resumed}
    line = one_line(ran(store, *(a.format(**names) for a in args)))
    assert line.startswith(said.format(**names)), line


def test_a_missing_store_is_refused_and_not_created(tmp_path):
    for args in (
        ["list"],
        ["best"],
        ["diff", UNKNOWN, UNKNOWN],
        ["list", "--tracking-uri", f"sqlite:///{tmp_path / 'other.db'}"],
    ):
        line = one_line(main_in_process("ms_exp.runs", args, tmp_path))
        assert line.startswith("--tracking-uri: sqlite:///"), line
        assert "(searched sqlite:///" in line and "nothing was created" in line
        assert list(tmp_path.iterdir()) == []


def test_a_password_in_the_store_uri_is_refused(tmp_path):
    uri = "postgresql://me:secret@localhost/mlflow"
    line = one_line(main_in_process("ms_exp.runs", ["list", "--tracking-uri", uri], tmp_path))
    assert line.startswith("--tracking-uri='postgresql://me:***@localhost/mlflow': a password")
    assert "secret" not in line
    assert list(tmp_path.iterdir()) == []


def test_the_notebook_entry_raises_what_the_command_refuses(store):
    with pytest.raises(CompareError, match="^--experiment: nope: no such experiment"):
        ms_exp.runs.table(experiment="nope", tracking_uri=store.uri)


def test_best_of_an_optuna_sweep_goes_the_way_the_sweep_optimised(tmp_path):
    """A sweep that maximised eval/loss (as an Optuna sweep's parent states it): best is its
    highest, and its objective is the default metric; --min still turns it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "mlflow.db").write_bytes(migrated_store().read_bytes())
    client = MlflowClient(uri)
    experiment = client.create_experiment("study")
    parent = client.create_run(
        experiment,
        run_name="sweep",
        tags={
            "ms_exp.sweep": "true",
            "ms_exp.sweep.metric": "eval/loss",
            "ms_exp.optuna.direction": "maximize",
        },
    ).info.run_id
    ids = []
    for number, loss in enumerate((1.0, 2.0, 0.5)):
        run = client.create_run(
            experiment, run_name=f"trial-{number}", tags={"mlflow.parentRunId": parent}
        )
        client.log_metric(run.info.run_id, "eval/loss", loss)
        client.log_metric(run.info.run_id, "eval/accuracy", loss / 10)
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    fields = best_of(SimpleNamespace(cwd=tmp_path), "--sweep", parent)
    assert fields["run_id"] == ids[1]
    assert fields["eval/loss"] == "2, the highest of 3 finished runs (as the sweep maximizes it)"
    assert fields["overrides"] == "(none)" and fields["best checkpoint"] == "(none saved)"
    assert best_of(SimpleNamespace(cwd=tmp_path), "--sweep", parent, "--min")["run_id"] == ids[2]
