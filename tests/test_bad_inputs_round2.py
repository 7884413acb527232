"""Bad input that once passed the checks and failed later, refused in one line before
anything is created: the config a rank reads (``python -m ms_exp.worker``), a checkpoint of
another network given to ``python -m ms_exp.eval``, a checkpoint outside a run directory, a
text file as the MLflow store; and the limits ms_exp's checks name, compared with MindSpore's
and MLflow's own.

The ``python -m ms_exp.run`` cases are in the corpus of tests/test_bad_inputs.py."""

import multiprocessing
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from conftest import main_in_process, migrated_store
from omegaconf import OmegaConf

from ms_exp.config.errors import InvalidConfig
from ms_exp.config.numbers import SEED_MAX
from ms_exp.config.run_config import load_run_config
from ms_exp.preflight.compose import compose_config, hydra_config_of
from ms_exp.preflight.tracking import MAX_EXPERIMENT_NAME_LENGTH
from ms_exp.tracking.store import StoreError, existing_store

SAVED = "expected the config.yaml that python -m ms_exp.run saves into the run directory"


def saved_config(run_dir: Path, *overrides: str) -> Path:
    """``<run dir>/config.yaml`` as the launching process saves it: composed, resolved,
    without Hydra's record."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.yaml"
    cfg = compose_config(list(overrides), return_hydra_config=True)
    with hydra_config_of(cfg, str(run_dir)):
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        OmegaConf.save(job, path, resolve=True)
    return path


def store_with_one_run(folder: Path) -> Path:
    from mlflow import MlflowClient

    path = folder / "mlflow.db"
    shutil.copyfile(migrated_store(), path)  # a fresh store's migrations: not tested here
    client = MlflowClient(f"sqlite:///{path}")
    experiment = client.create_experiment("ms_exp", artifact_location=folder.as_uri())
    client.set_terminated(client.create_run(experiment, run_name="earlier").info.run_id)
    return path


def run_count(database: Path) -> int:
    with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as connection:
        return connection.execute("SELECT count(*) FROM runs").fetchone()[0]


# --- the worker validates the config it reads -----------------------------------------


def _missing(path: Path) -> None:
    path.unlink()


def _empty(path: Path) -> None:
    path.write_text("")


def _broken(path: Path) -> None:
    path.write_text("trainer:\n  epochs: [1\n")


def _replace(old: str, new: str):
    def edit(path: Path) -> None:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))

    return edit


WORKER_CASES = {
    "missing": (_missing, "<file>: no such file; " + SAVED),
    "empty": (_empty, "<file>: empty; " + SAVED),
    "not YAML": (
        _broken,
        "<file>: not YAML (expected ',' or ']', but got '<stream end>' at "
        "line 3, column 1); " + SAVED,
    ),
    "unknown key": (
        _replace("  epochs: 10\n", "  epoch: 10\n"),
        "<file>: trainer.epoch=10: unknown key; expected one of callbacks, "
        "dataset_sink_mode, device_id, device_target, epochs, loop, "
        "loss_print_interval, metrics, mode, progress_bar, resume, seed, "
        "sink_size",
    ),
    "unknown key of a group": (
        _replace("  hidden_size: 512\n", "  hiden_size: 512\n"),
        "<file>: model.hiden_size=512: unknown key; expected one of "
        "_target_, hidden_size, name, weight_init",
    ),
    "learning rate -1": (
        _replace("  lr: 0.05\n", "  lr: -1\n"),
        "<file>: optimizer.lr=-1.0: not allowed; expected a number > 0",
    ),
    "learning rate inf": (
        _replace("  lr: 0.05\n", "  lr: .inf\n"),
        "<file>: optimizer.lr=inf: not allowed; expected a finite number (a "
        "literal beyond 1.8e308, such as 1e400, reads as inf)",
    ),
}


@pytest.mark.parametrize("case", list(WORKER_CASES))
def test_a_worker_refuses_a_bad_config_in_one_line_before_mindspore(case, tmp_path):
    edit, message = WORKER_CASES[case]
    run_dir = tmp_path / "run"
    config = saved_config(run_dir)
    edit(config)
    before = sorted(p.name for p in run_dir.iterdir())
    result = main_in_process("ms_exp.worker", ["--run-dir", str(run_dir)], tmp_path)
    assert (result.rc, result.stderr.strip().splitlines()) == (
        2,
        ["ms_exp.worker: error: " + message.replace("<file>", str(config))],
    )
    assert sorted(p.name for p in run_dir.iterdir()) == before  # no log_output/, no pid file


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_the_worker_accepts_the_config_the_launcher_saves(tmp_path):
    """What a rank runs before MindSpore: the config every job saves passes it (the rank's
    checks are the launcher's, but for the master port that msrun holds by then)."""
    from ms_exp.worker import read_checked_config

    for overrides in ((), ("parallel=data",), ("parallel=semi_auto", "checkpoint=sliced")):
        run_dir = tmp_path / "_".join(overrides or ("default",)).replace("=", "-")
        saved_config(run_dir, *overrides)
        cfg = read_checked_config(run_dir)
        assert cfg.parallel.mode == (overrides[0].split("=")[1] if overrides else "stand_alone")


def test_a_value_typed_wrong_in_a_run_config_names_its_key(tmp_path):
    """``ms_exp.eval``'s overrides and a saved config are typed by the same schemas: the
    line names the key (not only the file)."""
    config = saved_config(tmp_path / "run")
    with pytest.raises(InvalidConfig) as refused:
        load_run_config(config, ["optimizer.lr=("])
    assert str(refused.value) == "optimizer.lr='(': not allowed; expected a number"
    with pytest.raises(InvalidConfig) as refused:
        load_run_config(config, ["dataset.std=0"])
    assert str(refused.value) == (
        "dataset.std=0: not allowed; expected a list in brackets, e.g. [1, 2]"
    )


# --- ms_exp.eval: the checkpoint's network, its run directory, the store -----------------


@pytest.fixture(scope="module")
def run_with_checkpoint(tmp_path_factory) -> Path:
    """A run directory as the default job leaves it, as far as evaluation reads it: its
    config.yaml and an (untrained) checkpoint of its network."""
    run_dir = tmp_path_factory.mktemp("outputs") / "run"
    saved_config(run_dir)
    checkpoint = run_dir / "checkpoints/rank_0/checkpoint-1_44.ckpt"
    checkpoint.parent.mkdir(parents=True)
    import mindspore as ms

    from ms_exp.data.build import declared_spec
    from ms_exp.models import create_network

    cfg = compose_config([])
    ms.save_checkpoint(create_network(cfg.model, declared_spec(cfg.dataset)), str(checkpoint))
    return checkpoint


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_eval_refuses_a_checkpoint_of_another_shape_before_an_mlflow_run(
    run_with_checkpoint, tmp_path
):
    store = store_with_one_run(tmp_path)
    before = store.read_bytes()
    result = main_in_process(
        "ms_exp.eval", ["--checkpoint", str(run_with_checkpoint), "model.hidden_size=64"], tmp_path
    )
    assert result.rc == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"ms_exp.eval: error: --checkpoint='{run_with_checkpoint}': not allowed; expected a "
        "checkpoint of the network the config builds (layer1.weight is [64, 512] in the "
        "checkpoint, [64, 64] in the network: is an override such as model.* other than the "
        "run's?)"
    )
    assert "Traceback" not in result.stderr
    assert run_count(store) == 1 and store.read_bytes() == before  # no FAILED eval run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


@pytest.mark.e2e
def test_eval_of_the_same_network_still_evaluates(run_with_checkpoint, tmp_path):
    """The shape check refuses only another network: the run's own evaluates and is
    recorded."""
    store = store_with_one_run(tmp_path)
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(run_with_checkpoint)], tmp_path)
    assert result.rc == 0, result.stderr[-3000:]
    assert "result: {" in result.stdout
    assert run_count(store) == 2


def test_eval_of_a_checkpoint_outside_a_run_says_what_to_pass(tmp_path, run_with_checkpoint):
    loose = tmp_path / "weights.ckpt"
    shutil.copy(run_with_checkpoint, loose)
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(loose)], tmp_path)
    assert (result.rc, result.stderr.strip().splitlines()) == (
        2,
        [
            f"ms_exp.eval: error: --checkpoint='{loose}': not in a run directory (<run "
            "dir>/checkpoints/rank_<r>/ or <run dir>/checkpoints/merged/rank_<r>/), so no "
            "config.yaml says which network it holds; expected --run-id <run id> or --config "
            "<the run's config.yaml> with it"
        ],
    )
    assert "/config.yaml'" not in result.stderr  # no path the user never typed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.ckpt"]


def test_eval_refuses_a_text_file_as_its_store(tmp_path, run_with_checkpoint):
    text = tmp_path / "notes.db"
    text.write_text("meeting notes\n")
    result = main_in_process(
        "ms_exp.eval",
        ["--checkpoint", str(run_with_checkpoint), "--tracking-uri", f"sqlite:///{text}"],
        tmp_path,
    )
    assert (result.rc, result.stderr.strip().splitlines()) == (
        2,
        [
            f"ms_exp.eval: error: --tracking-uri='sqlite:///{text}': {text} is not a SQLite "
            "database; expected an MLflow store to record the evaluation in"
        ],
    )
    assert text.read_text() == "meeting notes\n"


def another_programs_database(path: Path) -> bytes:
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE notes (x)")
        connection.commit()
    return path.read_bytes()


def test_a_read_command_refuses_a_text_file_as_its_store(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("meeting notes\n")
    with pytest.raises(StoreError) as refused:
        existing_store(f"sqlite:///{text}")
    assert refused.value.problem == (
        f"no MLflow store at sqlite:///{text} ({text} is not a SQLite database)"
    )


def test_eval_of_a_run_folder_leaves_another_programs_database_its_config_names_alone(
    tmp_path, run_with_checkpoint
):
    """MLflow would add its tables to any SQLite file named as a store: a run folder's
    config (or a read command's --tracking-uri) naming another program's is refused."""
    app = tmp_path / "app.db"
    before = another_programs_database(app)
    run_dir = tmp_path / "run"
    shutil.copytree(run_with_checkpoint.parents[2], run_dir)
    config = OmegaConf.load(run_dir / "config.yaml")
    config.tracking.uri = f"sqlite:///{app}"
    OmegaConf.save(config, run_dir / "config.yaml")
    checkpoint = run_dir / run_with_checkpoint.relative_to(run_with_checkpoint.parents[2])
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(checkpoint)], tmp_path)
    problem = f"{app} is another program's SQLite database (tables notes), not MLflow's"
    assert (result.rc, result.stderr.strip().splitlines()) == (
        2,
        [
            f"ms_exp.eval: error: tracking.uri='sqlite:///{app}': {problem}; expected an "
            "MLflow store to record the evaluation in"
        ],
    )
    with pytest.raises(StoreError, match=re.escape(problem)):
        existing_store(f"sqlite:///{app}")
    assert app.read_bytes() == before


@pytest.fixture(scope="module")
def whole_store(tmp_path_factory) -> Path:
    return store_with_one_run(tmp_path_factory.mktemp("whole"))


def _zeros(data: bytes, start: int, end: int) -> bytes:
    return data[:start] + bytes(end - start) + data[end:]


PAGE = 4096  # MLflow's SQLite stores: SQLite's default page size
DAMAGES = {
    "its first 1000 bytes": (
        lambda data: data[:1000],
        "is cut short: 1000 bytes, where its header says ",
    ),
    "half of it, on a page boundary": (
        lambda data: data[: len(data) // 2 // PAGE * PAGE],
        "is cut short: ",
    ),
    # A writer that keeps no page count in the header (SQLite before 3.7.0, other tools): the
    # size is a whole number of pages, and only SQLite can tell.
    "half of it, by a writer that keeps no page count": (
        lambda data: _zeros(data, 92, 96)[: len(data) // 2 // PAGE * PAGE],
        "is damaged: ",
    ),
    # A disk error: the page of SQLite's schema (after the file's header), or one in the
    # middle, reads back as zeros; the header is whole.
    "its schema page zeroed": (lambda data: _zeros(data, 100, PAGE), "is damaged: "),
    "a page in the middle zeroed": (
        lambda data: _zeros(
            data, len(data) // 2 // PAGE * PAGE, len(data) // 2 // PAGE * PAGE + PAGE
        ),
        "is damaged: SQLite",
    ),
}


def damaged_copy(whole: Path, damage: str, to: Path) -> bytes:
    """``to``: a copy of the store ``whole`` as ``damage`` leaves it; its bytes."""
    to.parent.mkdir(parents=True, exist_ok=True)
    to.write_bytes(DAMAGES[damage][0](whole.read_bytes()))
    return to.read_bytes()


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_read_command_refuses_a_store_cut_short_and_leaves_it_as_it_was(
    damage, whole_store, tmp_path
):
    """A real MLflow store cut short or damaged: named before MLflow opens it, from its
    header where it tells, else by SQLite's quick_check, read-only."""
    cut = tmp_path / "mlflow.db"
    before = damaged_copy(whole_store, damage, cut)
    with pytest.raises(StoreError) as refused:
        existing_store(f"sqlite:///{cut}")
    assert refused.value.problem.startswith(
        f"no MLflow store at sqlite:///{cut} ({cut} {DAMAGES[damage][1]}"
    )
    assert cut.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no -journal, -wal


SCHEMA_ZEROED = (
    "is damaged: SQLite says 'database disk image is malformed': restore the whole file from a copy"
)
RUN_ID = "<run id>"
COMMANDS = {
    "ms_exp.runs": ["list"],
    "ms_exp.report": [RUN_ID],
    "ms_exp.eval": ["--run-id", RUN_ID],
    "ms_exp.ckpt": ["merge", RUN_ID],
    "ms_exp.run --from-run": ["--from-run", RUN_ID],
    "ms_exp.run": ["trainer.epochs=1"],
}


@pytest.mark.parametrize(
    "command, damage, blind",
    [
        # blind: the checks before MLflow opens the store made blind; MLflow's own error, caught
        # by the command, gives the same line. Not for ms_exp.run: its job would train first
        # (the store it names: tests/test_bad_inputs.py's corpus).
        *[
            (command, "its schema page zeroed", blind)
            for blind in (False, True)
            for command in COMMANDS
            if command != "ms_exp.run"
        ],
        ("ms_exp.run", "half of it, on a page boundary", False),
        ("ms_exp.report", "half of it, on a page boundary", False),
    ],
)
def test_the_commands_refuse_a_damaged_store_in_one_line_and_leave_it_as_it_was(
    command, damage, blind, whole_store, tmp_path, monkeypatch
):
    """The default store of the working directory, damaged: one line naming the file and
    what is wrong with it, exit status 2, nothing written (the file byte for byte)."""
    from mlflow import MlflowClient

    import ms_exp.tracking.store

    if blind:
        monkeypatch.setattr(ms_exp.tracking.store, "_quick_check", lambda *file_state: None)
    run_id = MlflowClient(f"sqlite:///{whole_store}").search_runs(["1"])[0].info.run_id
    store = tmp_path / "mlflow.db"
    before = damaged_copy(whole_store, damage, store)
    module = command.split()[0]
    result = main_in_process(
        module, [a.replace(RUN_ID, run_id) for a in COMMANDS[command]], tmp_path
    )
    assert result.rc == 2, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(("ms_exp" if module == "ms_exp.run" else module) + ": error: ")
    expected = (
        SCHEMA_ZEROED
        if damage == "its schema page zeroed"
        else f"is cut short: {len(before)} bytes, where its header says {len(whole_store.read_bytes())}"
    )
    assert f"{store} {expected}" in line
    assert store.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


# --- the limits named are MindSpore's and MLflow's own -----------------------------------


def test_the_experiment_name_limit_is_mlflows():
    from mlflow.utils.validation import MAX_EXPERIMENT_NAME_LENGTH as MLFLOW_LIMIT

    assert MAX_EXPERIMENT_NAME_LENGTH == MLFLOW_LIMIT


def test_the_seed_limit_is_what_mindspore_set_seed_takes():
    import mindspore as ms

    ms.set_seed(SEED_MAX)
    with pytest.raises(ValueError):
        ms.set_seed(SEED_MAX + 1)
    ms.set_seed(1)


def test_the_worker_limit_is_mindspore_datasets():
    from mindspore.dataset.core.validator_helpers import check_num_parallel_workers

    check_num_parallel_workers(multiprocessing.cpu_count())
    with pytest.raises(ValueError):
        check_num_parallel_workers(multiprocessing.cpu_count() + 1)


@pytest.mark.parametrize(
    "uri, shown",
    [
        ("http://alice:s3cret@127.0.0.1:5000", "http://alice:***@127.0.0.1:5000"),
        ("http://127.0.0.1:5000/?x=1&Token=s3cret", "http://127.0.0.1:5000/?x=1&Token=***"),
    ],
)
@pytest.mark.parametrize(
    "module, args, key",
    [
        ("ms_exp.eval", ["--run-id", "0123456789abcdef0123456789abcdef"], "--tracking-uri"),
        ("ms_exp.ckpt", ["merge", "0123456789abcdef0123456789abcdef"], "--tracking-uri"),
        ("ms_exp.report", ["0123456789abcdef0123456789abcdef"], "--tracking-uri"),
        ("ms_exp.report", ["0123456789abcdef0123456789abcdef"], "--optuna-storage"),
        ("ms_exp.runs", ["list"], "--tracking-uri"),
        ("ms_exp.tracking.upload", ["run"], "--tracking-uri"),
    ],
)
def test_the_commands_refuse_a_password_in_a_store_uri(tmp_path, module, args, key, uri, shown):
    """Also the commands that read a run: the password belongs in MLflow's variables."""
    result = main_in_process(module, [*args, key, uri], tmp_path)
    assert result.rc == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith(
        f"{key}={shown!r}: a password in {key} would be written into the run's records and "
        "printed; expected a URI without a password, the credentials in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, which MLflow sends to the "
        "server"
    ), line
    assert "s3cret" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []
