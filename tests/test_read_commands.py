"""Commands that read a run (eval, report, ckpt merge, ``run --from-run``): a wrong id or a
missing store is one line naming what was wrong, the store searched and what is allowed,
exit 2, and nothing is created where they ran; merge says what it merged and writes a CRC;
eval names the checkpoint it evaluated as the user can find it."""
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import main_in_process, run_cli, train
from mlflow import MlflowClient

from ms_exp.tracking.store import ensure_experiment


def one_line(result, prog: str) -> str:
    """The single error line of a refused command, after checking exit 2 and no stdout."""
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), result.stderr[-3000:]
    return lines[0][len(f"{prog}: error: "):]


def nothing_created(cwd: Path) -> None:
    assert sorted(p.name for p in cwd.iterdir()) == []


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding a sweep's parent run, its two jobs and an evaluation of one job."""
    root = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = ensure_experiment(client, "ms_exp")
    parent = client.create_run(experiment, tags={"ms_exp.sweep": "true"}, run_name="sweep")
    jobs = [client.create_run(experiment, run_name=f"job-{n}",
                              tags={"mlflow.parentRunId": parent.info.run_id})
            for n in range(2)]
    evaluation = client.create_run(experiment, run_name="eval-mlp-checkpoint-1_45", tags={
        "mlflow.parentRunId": jobs[0].info.run_id, "ms_exp.evaluated_checkpoint": "x"})
    return SimpleNamespace(uri=uri, experiment=experiment, parent=parent.info.run_id,
                           jobs=[j.info.run_id for j in jobs], evaluation=evaluation.info.run_id)


UNKNOWN = "0123456789abcdef0123456789abcdef"
JOB_RUN = "the id of a job's run (32 hex digits, printed as 'MLflow run <id>' by the job)"


def test_eval_of_a_run_without_a_store_names_the_store_and_creates_none(tmp_path):
    result = main_in_process("ms_exp.eval", ["--run-id", UNKNOWN], tmp_path)
    assert one_line(result, "ms_exp.eval") == (
        f"--run-id='{UNKNOWN}': no MLflow store at {tmp_path / 'mlflow.db'} (searched "
        f"sqlite:///{tmp_path / 'mlflow.db'}; nothing was created); expected the id of a run "
        "in an existing store (run this where the job ran, or pass --tracking-uri)")
    nothing_created(tmp_path)


def test_eval_with_a_file_store_that_does_not_exist_creates_none(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    result = main_in_process("ms_exp.eval", ["--run-id", UNKNOWN, "--tracking-uri", uri],
                             tmp_path)
    assert f"no MLflow store at {tmp_path / 'mlruns'} (searched {uri}" in one_line(
        result, "ms_exp.eval")
    nothing_created(tmp_path)


def test_eval_of_a_sweeps_parent_run_names_its_jobs(store, tmp_path):
    result = main_in_process("ms_exp.eval", ["--run-id", store.parent, "--tracking-uri", store.uri],
                     tmp_path)
    assert one_line(result, "ms_exp.eval") == (
        f"--run-id='{store.parent}': this is the parent run of a sweep (2 jobs), not a job's "
        f"run; expected the run of one of its jobs: {', '.join(store.jobs)}")
    nothing_created(tmp_path)


@pytest.mark.parametrize("kind", ["unknown", "experiment", "name", "garbage", "evaluation"])
def test_eval_of_an_id_of_the_wrong_kind_says_what_it_is(store, kind, workdir, capsys):
    """In-process, to spare an MLflow start per case; the command line is the same."""
    from ms_exp import eval as evaluation

    run_id, said = {
        "unknown": (UNKNOWN, f"no such run in {store.uri}; expected {JOB_RUN} in that store"),
        "experiment": (store.experiment,
                       f"not a run id: it is the id of experiment 'ms_exp'; expected {JOB_RUN}"),
        "name": ("job-1", f"not a run id: it is the name of run {store.jobs[1]}; "
                          f"expected {JOB_RUN}"),
        "garbage": ("hello there", f"not a run id; expected {JOB_RUN}"),
        "evaluation": (store.evaluation, "this is an evaluation's run (ms_exp.eval), not a "
                                         f"job's run; expected the run it evaluated, "
                                         f"{store.jobs[0]}"),
    }[kind]
    rc = evaluation.main(["--run-id", run_id, "--tracking-uri", store.uri])
    out, err = capsys.readouterr()
    result = SimpleNamespace(rc=rc, stdout=out, stderr=err)
    assert one_line(result, "ms_exp.eval") == f"--run-id={run_id!r}: {said}"
    nothing_created(workdir)


@pytest.mark.parametrize("args, said", [
    (["--run-id", UNKNOWN, "--checkpoint", "bets"],
     "--checkpoint='bets': no such file (did you mean best?); expected last or best (of "
     "--run-id), or a checkpoint file that exists"),
    (["--checkpoint", "lats"],
     "--checkpoint='lats': no such file (did you mean last?); expected a checkpoint file that "
     "exists, or last or best with --run-id"),
    (["--checkpoint", "best"],
     "--checkpoint='best': needs --run-id; expected a checkpoint file that exists (last and "
     "best name a checkpoint of --run-id)"),
    ([], "--run-id=null: missing; expected --run-id <run id> or --checkpoint <file>"),
])
def test_eval_checkpoint_flag_is_checked_before_any_store(args, said, tmp_path):
    assert one_line(main_in_process("ms_exp.eval", args, tmp_path), "ms_exp.eval") == said
    nothing_created(tmp_path)


def test_merge_and_report_and_rerun_of_a_run_without_a_store_create_none(store, tmp_path):
    merge = main_in_process("ms_exp.ckpt", ["merge", UNKNOWN], tmp_path)
    assert one_line(merge, "ms_exp.ckpt").startswith(
        f"run {UNKNOWN}: no MLflow store at {tmp_path / 'mlflow.db'} (searched sqlite:///")
    parent = main_in_process("ms_exp.ckpt", ["merge", store.parent, "--tracking-uri", store.uri],
                     tmp_path)
    assert one_line(parent, "ms_exp.ckpt") == (
        f"run {store.parent}: this is the parent run of a sweep (2 jobs), not a job's run; "
        f"expected the run of one of its jobs: {', '.join(store.jobs)}")
    report = main_in_process("ms_exp.report", [store.parent], tmp_path)
    assert one_line(report, "ms_exp.report") == (
        f"no MLflow store at {tmp_path / 'mlflow.db'} (searched sqlite:///"
        f"{tmp_path / 'mlflow.db'}; nothing was created): run this where the sweep ran, or "
        "pass --tracking-uri")
    missing = (tmp_path / "mlruns").as_uri()
    rerun = main_in_process("ms_exp.run", ["--from-run", UNKNOWN, f"tracking.uri={missing}"],
                            tmp_path)
    assert f"no MLflow store at {tmp_path / 'mlruns'}" in one_line(rerun, "ms_exp")
    nothing_created(tmp_path)


# ---------------------------------------------------------------------------------------------
# Merge: what it merged, with a CRC


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    """8 ranks of the tutorial's sharded MLP checkpoints and their strategy file, written
    directly (no training)."""
    import mindspore as ms

    from ms_exp.models.mlp import Network
    from ms_exp.parallel.layout import (
        operator_layouts,
        operator_strategies,
        write_sliced_checkpoints,
        write_strategy_file,
    )

    tutorial = {"layer1.matmul": ((2, 1), (1, 2)), "layer3.matmul": ((2, 2), (2, 1))}
    ms.set_seed(1)
    network = Network()
    state = {p.name: p.asnumpy() for p in network.trainable_params()}
    state["global_step"] = np.array([10], np.int32)
    root = tmp_path_factory.mktemp("slices")
    written = write_sliced_checkpoints(state, operator_layouts(network, tutorial, 8), 8,
                                       root / "checkpoints", "checkpoint", "checkpoint-1_10.ckpt")
    strategy = write_strategy_file(root / "strategy.ckpt", written,
                                   op_strategies=operator_strategies(network, tutorial, 8))
    return root, Path(strategy), state


def load_with_crc_check(path: Path) -> subprocess.CompletedProcess:
    """Load ``path`` as a user would, with MindSpore's CRC check, in a fresh process so that
    MindSpore's warnings reach its stderr."""
    return subprocess.run([sys.executable, "-c", "import sys, mindspore as ms; "
                           "ms.load_checkpoint(sys.argv[1], crc_check=True); print('loaded')",
                           str(path)], capture_output=True, text=True, timeout=300)


def test_merge_says_what_it_merged_and_writes_a_crc(slices, tmp_path):
    from ms_exp.checkpoint.files import DamagedCheckpoint, load_verified

    root, strategy, state = slices
    result = main_in_process("ms_exp.ckpt", ["merge", str(root / "checkpoints"), "--strategy",
                                     str(strategy), "--output", str(tmp_path / "merged")],
                     tmp_path)
    assert result.rc == 0, result.stderr[-3000:]
    merged = tmp_path / "merged" / "rank_0" / "checkpoint0.ckpt"
    assert result.stdout.strip().splitlines() == [
        f"merged checkpoint-1_10.ckpt (epoch 1, step 10 of the epoch) of ranks 0-7 "
        f"({root / 'checkpoints'}) with the strategy file {strategy}",
        str(merged)]
    loaded = load_with_crc_check(merged)
    assert loaded.stdout.strip() == "loaded" and "crc" not in loaded.stderr.lower(), \
        loaded.stderr[-2000:]
    weights = {k: v.asnumpy() for k, v in load_verified(merged).items()}
    assert weights.keys() == state.keys()
    for name, full in state.items():
        assert np.array_equal(weights[name], full), name
    data = bytearray(merged.read_bytes())  # the CRC is checked: one flipped byte is refused
    data[len(data) // 2] ^= 0xFF
    merged.write_bytes(bytes(data))
    with pytest.raises(DamagedCheckpoint, match="is damaged"):
        load_verified(merged)


# ---------------------------------------------------------------------------------------------
# Eval names what it evaluated


@pytest.mark.e2e
def test_eval_of_a_run_names_its_checkpoint_not_a_deleted_download(tmp_path):
    job = train(tmp_path / "job", "trainer.epochs=1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    uri = f"sqlite:///{job.cwd / 'mlflow.db'}"
    result = run_cli("ms_exp.eval", ["--run-id", job.run_id, "--tracking-uri", uri], elsewhere)
    assert result.rc == 0, result.stderr[-3000:]
    shown = re.search(r"^result: .* ckpt= (.*)$", result.stdout, re.M).group(1)
    last = job.store.get_run(job.run_id).data.tags["ms_exp.checkpoint.last"]
    assert shown == f"{last} of MLflow run {job.run_id}"
    assert list(elsewhere.iterdir()) == []
