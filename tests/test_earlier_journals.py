"""A journal an earlier attempt left (its store stopped answering, then it was killed) is
never stranded: the resumed run delivers it before it goes on, and delivering it never
turns a run that a later attempt ended back to how the earlier attempt ended. Journals
are fabricated in the journal's own format, for a run in a real store."""

import json
import re
from pathlib import Path
from typing import Tuple

import pytest
from conftest import main_in_process, migrated_store
from mlflow import MlflowClient
from mlflow.entities import Metric

from ms_exp.tracking.journal import OFFLINE_DIR
from ms_exp.tracking.run_folder import RUN_RECORD

# One epoch: the resumed attempt finds the run's last epoch done, as after two.
TINY = (
    "trainer.progress_bar=never",
    "tracking.log_models=true",
    "trainer.epochs=1",
    "dataset=synthetic",
    "dataset.num_samples=64",
    "dataset.num_eval_samples=32",
    "model.hidden_size=8",
    "hydra.run.dir=run",
    "trainer.resume=auto",
)


def write_journal(run_dir: Path, uri: str, run_id: str, key: str, steps) -> Path:
    """What an attempt that went offline and was then killed leaves: a start line naming
    its run, metric rows, no finish."""
    path = run_dir / OFFLINE_DIR / "20261125-120000-4242.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        {
            "call": "start",
            "tracking_uri": uri,
            "experiment_name": "Default",
            "run_name": "r",
            "tags": {},
            "run_id": run_id,
        },
        {
            "call": "log_metric_rows",
            "rows": [[key, 0.5, 1_700_000_000_000 + step, step] for step in steps],
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def store_with_a_run(folder: Path) -> Tuple[str, MlflowClient, str]:
    """A store in ``folder`` holding one RUNNING run: its URI, a client, the run's id."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    (folder / "mlflow.db").write_bytes(migrated_store().read_bytes())
    client = MlflowClient(uri)
    return uri, client, client.create_run("0").info.run_id


@pytest.mark.parametrize("ended, expected", [("FINISHED", "FINISHED"), (None, "KILLED")])
def test_an_upload_adds_the_steps_and_keeps_how_a_later_attempt_ended_the_run(
    tmp_path, ended, expected
):
    uri, client, run_id = store_with_a_run(tmp_path)
    client.log_batch(run_id, [Metric("train/loss", 1.0, 0, step) for step in range(1, 41)])
    if ended:  # the resumed attempt finished the run before the journal was uploaded
        client.set_terminated(run_id, ended)
    journal = write_journal(tmp_path / "run", uri, run_id, "train/loss", range(41, 111))
    result = main_in_process("ms_exp.tracking.upload", [str(tmp_path / "run")], tmp_path)
    assert result.rc == 0, result.stderr
    assert f"metric values: 70, ended {expected}" in result.stdout
    run = client.get_run(run_id)
    assert run.info.status == expected
    assert ("ms_exp.ended_by" in run.data.tags) == (ended is None)
    assert sorted(m.step for m in client.get_metric_history(run_id, "train/loss")) == list(
        range(1, 111)
    )
    assert not journal.exists()


def test_an_earlier_journal_with_a_damaged_line_is_delivered_past_it(tmp_path, capsys):
    """What a resumed job does first (deliver_earlier_journals): the torn line is named on
    stderr and kept, the lines after it reach the run."""
    from ms_exp.tracking.recorder import deliver_earlier_journals

    uri, client, run_id = store_with_a_run(tmp_path)
    journal = write_journal(tmp_path / "run", uri, run_id, "train/loss", range(1, 11))
    with journal.open("a") as lines:
        lines.write('{"call": "log_metric_rows", "rows": [["train/loss", 0.5, 17\n')
        lines.write(
            json.dumps(
                {"call": "log_metric_rows", "rows": [["train/loss", 0.25, 1_700_000_000_012, 12]]}
            )
            + "\n"
        )
    deliver_earlier_journals(tmp_path / "run")
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"ms_exp: warning: journal of run {run_id}: line 3 is damaged and was skipped "
        f"(log_metric_rows, 1 metric value); kept in {journal}.damaged"
    ]
    assert "metric values: 11, ended KILLED" in out
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")] == [
        (step, 0.5) for step in range(1, 11)
    ] + [(12, 0.25)]
    assert not journal.exists() and Path(f"{journal}.damaged").is_file()


def test_a_torn_finish_line_that_still_names_its_status_ends_the_run_so(tmp_path, capsys):
    """The job wrote its finish line and the line was torn: the status it spells out is how
    the run ends, not KILLED as for a job that never got there."""
    from ms_exp.tracking.recorder import deliver_earlier_journals

    uri, client, run_id = store_with_a_run(tmp_path)
    journal = write_journal(tmp_path / "run", uri, run_id, "train/loss", range(1, 4))
    with journal.open("a") as lines:
        lines.write('{"call": "finish", "status": "FINISHED"\x00\n')
    deliver_earlier_journals(tmp_path / "run")
    out, err = capsys.readouterr()
    assert "line 3 is damaged and was skipped (finish, status FINISHED)" in err
    assert "metric values: 3, ended FINISHED" in out
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and "ms_exp.ended_by" not in run.data.tags


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_a_resumed_run_first_delivers_the_journal_its_earlier_attempt_left(tmp_path):
    """Resumed after its models were logged (as if killed before its record said
    FINISHED): the run still has one ``best`` and one ``last`` model."""
    (tmp_path / "mlflow.db").write_bytes(migrated_store().read_bytes())
    first = main_in_process("ms_exp.run", list(TINY), tmp_path)
    assert first.rc == 0, first.stderr[-3000:]
    run_id = re.search(r"^MLflow run (\w+)", first.stdout, re.M).group(1)
    run_dir = tmp_path / "run"
    # As if its relay to the store had been cut and the job killed before its record said
    # FINISHED: the journal holds what the store lacks.
    record = json.loads((run_dir / RUN_RECORD).read_text())
    (run_dir / RUN_RECORD).write_text(json.dumps({**record, "status": "RUNNING"}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    journal = write_journal(run_dir, uri, run_id, "probe/offline", [1, 2, 3])

    resumed = main_in_process("ms_exp.run", list(TINY), tmp_path)
    assert resumed.rc == 0, resumed.stderr[-3000:]
    delivered = [
        line
        for line in resumed.stdout.splitlines()
        if line.startswith("delivered an earlier attempt's journal: ")
    ]
    assert delivered == [
        f"delivered an earlier attempt's journal: run {run_id} (experiment "
        f"1) in {uri}: metric values: 3, ended FINISHED (from {journal})"
    ]
    assert resumed.stdout.index(delivered[0]) < resumed.stdout.index("resuming the run in")
    client = MlflowClient(uri)
    assert sorted(m.step for m in client.get_metric_history(run_id, "probe/offline")) == [1, 2, 3]
    assert client.get_run(run_id).info.status == "FINISHED"
    assert not journal.exists()
    assert len(client.search_runs(["0", "1"])) == 1
    models = client.search_logged_models(["1"], filter_string=f"source_run_id = '{run_id}'")
    assert sorted(m.name for m in models) == ["best", "last"]
