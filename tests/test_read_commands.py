"""Commands that read a run (eval, report, ckpt merge, ``run --from-run``): a wrong id or a
missing store is one line naming what was wrong, the store searched and what is allowed,
exit 2, and nothing is created where they ran; merge says what it merged and writes a CRC;
eval names the checkpoint it evaluated as the user can find it, and evaluates a merged
checkpoint it is given as it is."""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import List

import numpy as np
import pytest
from conftest import main_in_process, migrated_store, train
from mlflow import MlflowClient
from omegaconf import DictConfig

from ms_exp.tracking.store import ensure_experiment, python_command


def one_line(result, prog: str) -> str:
    """The single error line of a refused command, after checking exit 2 and no stdout."""
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), result.stderr[-3000:]
    return lines[0][len(f"{prog}: error: ") :]


def nothing_created(cwd: Path) -> None:
    assert sorted(p.name for p in cwd.iterdir()) == []


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding a sweep's parent run, its two jobs and an evaluation of one job."""
    root = tmp_path_factory.mktemp("store")
    shutil.copyfile(migrated_store(), root / "mlflow.db")  # spares MLflow's migrations
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = ensure_experiment(client, "ms_exp")
    parent = client.create_run(experiment, tags={"ms_exp.sweep": "true"}, run_name="sweep")
    jobs = [
        client.create_run(
            experiment, run_name=f"job-{n}", tags={"mlflow.parentRunId": parent.info.run_id}
        )
        for n in range(2)
    ]
    evaluation = client.create_run(
        experiment,
        run_name="eval-mlp-checkpoint-1_45",
        tags={"mlflow.parentRunId": jobs[0].info.run_id, "ms_exp.evaluated_checkpoint": "x"},
    )
    return SimpleNamespace(
        uri=uri,
        experiment=experiment,
        parent=parent.info.run_id,
        jobs=[j.info.run_id for j in jobs],
        evaluation=evaluation.info.run_id,
    )


UNKNOWN = "0123456789abcdef0123456789abcdef"
JOB_RUN = "the id of a job's run (32 hex digits, printed as 'MLflow run <id>' by the job)"


def test_eval_of_a_run_without_a_store_names_the_store_and_creates_none(tmp_path):
    result = main_in_process("ms_exp.eval", ["--run-id", UNKNOWN], tmp_path)
    assert one_line(result, "ms_exp.eval") == (
        f"--run-id='{UNKNOWN}': no MLflow store at {tmp_path / 'mlflow.db'} (searched "
        f"sqlite:///{tmp_path / 'mlflow.db'}; nothing was created); expected the id of a run "
        "in an existing store (run this where the job ran, or pass --tracking-uri)"
    )
    nothing_created(tmp_path)


def test_eval_with_a_file_store_that_does_not_exist_creates_none(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    result = main_in_process("ms_exp.eval", ["--run-id", UNKNOWN, "--tracking-uri", uri], tmp_path)
    assert f"no MLflow store at {tmp_path / 'mlruns'} (searched {uri}" in one_line(
        result, "ms_exp.eval"
    )
    nothing_created(tmp_path)


def test_eval_of_a_sweeps_parent_run_names_its_jobs(store, tmp_path):
    result = main_in_process(
        "ms_exp.eval", ["--run-id", store.parent, "--tracking-uri", store.uri], tmp_path
    )
    assert one_line(result, "ms_exp.eval") == (
        f"--run-id='{store.parent}': this is the parent run of a sweep (2 jobs), not a job's "
        f"run; expected the run of one of its jobs: {', '.join(store.jobs)}"
    )
    nothing_created(tmp_path)


@pytest.mark.parametrize("kind", ["unknown", "experiment", "name", "garbage", "evaluation"])
def test_eval_of_an_id_of_the_wrong_kind_says_what_it_is(store, kind, workdir, capsys):
    """In-process, to spare an MLflow start per case; the command line is the same."""
    from ms_exp import eval as evaluation

    run_id, said = {
        "unknown": (UNKNOWN, f"no such run in {store.uri}; expected {JOB_RUN} in that store"),
        "experiment": (
            store.experiment,
            f"not a run id: it is the id of experiment 'ms_exp'; expected {JOB_RUN}",
        ),
        "name": (
            "job-1",
            f"not a run id: it is the name of run {store.jobs[1]}; expected {JOB_RUN}",
        ),
        "garbage": ("hello there", f"not a run id; expected {JOB_RUN}"),
        "evaluation": (
            store.evaluation,
            "this is an evaluation's run (ms_exp.eval), not a "
            f"job's run; expected the run it evaluated, "
            f"{store.jobs[0]}",
        ),
    }[kind]
    rc = evaluation.main(["--run-id", run_id, "--tracking-uri", store.uri])
    out, err = capsys.readouterr()
    result = SimpleNamespace(rc=rc, stdout=out, stderr=err)
    assert one_line(result, "ms_exp.eval") == f"--run-id={run_id!r}: {said}"
    nothing_created(workdir)


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["--run-id", UNKNOWN, "--checkpoint", "bets"],
            "--checkpoint='bets': no such file (did you mean best?); expected last or best (of "
            "--run-id), or a checkpoint file that exists",
        ),
        (
            ["--checkpoint", "lats"],
            "--checkpoint='lats': no such file (did you mean last?); expected a checkpoint file that "
            "exists, or last or best with --run-id",
        ),
        (
            ["--checkpoint", "best"],
            "--checkpoint='best': needs --run-id; expected a checkpoint file that exists (last and "
            "best name a checkpoint of --run-id)",
        ),
        ([], "--run-id=null: missing; expected --run-id <run id> or --checkpoint <file>"),
    ],
)
def test_eval_checkpoint_flag_is_checked_before_any_store(args, said, tmp_path):
    assert one_line(main_in_process("ms_exp.eval", args, tmp_path), "ms_exp.eval") == said
    nothing_created(tmp_path)


def test_merge_and_report_and_rerun_of_a_run_without_a_store_create_none(store, tmp_path):
    merge = main_in_process("ms_exp.ckpt", ["merge", UNKNOWN], tmp_path)
    assert one_line(merge, "ms_exp.ckpt").startswith(
        f"run {UNKNOWN}: no MLflow store at {tmp_path / 'mlflow.db'} (searched sqlite:///"
    )
    parent = main_in_process(
        "ms_exp.ckpt", ["merge", store.parent, "--tracking-uri", store.uri], tmp_path
    )
    assert one_line(parent, "ms_exp.ckpt") == (
        f"run {store.parent}: this is the parent run of a sweep (2 jobs), not a job's run; "
        f"expected the run of one of its jobs: {', '.join(store.jobs)}"
    )
    report = main_in_process("ms_exp.report", [store.parent], tmp_path)
    assert one_line(report, "ms_exp.report") == (
        f"no MLflow store at {tmp_path / 'mlflow.db'} (searched sqlite:///"
        f"{tmp_path / 'mlflow.db'}; nothing was created): run this where the sweep ran, or "
        "pass --tracking-uri"
    )
    missing = (tmp_path / "mlruns").as_uri()
    rerun = main_in_process(
        "ms_exp.run", ["--from-run", UNKNOWN, f"tracking.uri={missing}"], tmp_path
    )
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
    written = write_sliced_checkpoints(
        state,
        operator_layouts(network, tutorial, 8),
        8,
        root / "checkpoints",
        "checkpoint",
        "checkpoint-1_10.ckpt",
    )
    strategy = write_strategy_file(
        root / "strategy.ckpt", written, op_strategies=operator_strategies(network, tutorial, 8)
    )
    return root, Path(strategy), state


def load_with_crc_check(path: Path) -> subprocess.CompletedProcess:
    """Load ``path`` as a user would, with MindSpore's CRC check, in a fresh process so that
    MindSpore's warnings reach its stderr."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, mindspore as ms; "
            "ms.load_checkpoint(sys.argv[1], crc_check=True); print('loaded')",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_merge_says_what_it_merged_and_writes_a_crc(slices, tmp_path):
    from ms_exp.checkpoint.files import DamagedCheckpoint, load_verified

    root, strategy, state = slices
    result = main_in_process(
        "ms_exp.ckpt",
        [
            "merge",
            str(root / "checkpoints"),
            "--strategy",
            str(strategy),
            "--output",
            str(tmp_path / "merged"),
        ],
        tmp_path,
    )
    assert result.rc == 0, result.stderr[-3000:]
    merged = tmp_path / "merged" / "rank_0" / "checkpoint0.ckpt"
    assert result.stdout.strip().splitlines() == [
        f"merged checkpoint-1_10.ckpt (epoch 1, step 10 of the epoch) of ranks 0-7 "
        f"({root / 'checkpoints'}) with the strategy file {strategy}",
        str(merged),
    ]
    loaded = load_with_crc_check(merged)
    assert loaded.stdout.strip() == "loaded" and "crc" not in loaded.stderr.lower(), loaded.stderr[
        -2000:
    ]
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
    result = main_in_process(
        "ms_exp.eval", ["--run-id", job.run_id, "--tracking-uri", uri], elsewhere
    )
    assert result.rc == 0, result.stderr[-3000:]
    shown = re.search(r"^result: .* ckpt= (.*)$", result.stdout, re.M).group(1)
    last = job.store.get_run(job.run_id).data.tags["ms_exp.checkpoint.last"]
    assert shown == f"{last} of MLflow run {job.run_id}"
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# A sliced run's merged checkpoint, evaluated as it is


def sliced_run_directory(run_dir: Path, fmt: str = "ckpt") -> DictConfig:
    """A run directory as ``parallel=semi_auto checkpoint=sliced checkpoint.format=<fmt>``
    leaves it, as far as merge and eval read it: its config.yaml, every rank's slice of the
    default MLP (untrained) and the strategy file, written directly (no training). Returns
    its config."""
    import mindspore as ms
    from omegaconf import OmegaConf

    from ms_exp.data.build import declared_spec
    from ms_exp.models import create_network
    from ms_exp.parallel.layout import (
        operator_layouts,
        operator_strategies,
        write_sliced_checkpoints,
        write_strategy_file,
    )
    from ms_exp.preflight.compose import compose_config, hydra_config_of

    run_dir.mkdir(parents=True)
    cfg = compose_config(
        ["parallel=semi_auto", "checkpoint=sliced", f"checkpoint.format={fmt}"],
        return_hydra_config=True,
    )
    with hydra_config_of(cfg, str(run_dir)):
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        OmegaConf.save(job, run_dir / "config.yaml", resolve=True)
    strategies = OmegaConf.to_container(job.parallel.strategies)
    ms.set_seed(1)
    network = create_network(job.model, declared_spec(job.dataset))
    state = {p.name: p.asnumpy() for p in network.trainable_params()}
    written = write_sliced_checkpoints(
        state,
        operator_layouts(network, strategies, 8),
        8,
        run_dir / "checkpoints",
        "checkpoint",
        f"checkpoint-1_10.{fmt}",
    )
    write_strategy_file(
        run_dir / "strategy.ckpt",
        written,
        op_strategies=operator_strategies(network, strategies, 8),
    )
    return OmegaConf.load(run_dir / "config.yaml")


def shared_run_directory(run_dir: Path) -> dict:
    """A run directory as ``parallel=data checkpoint.remove_redundancy=true`` leaves it on 2
    ranks: each rank's file holds its share of the entries (MindSpore 2.10 gives rank 0 the
    biases, rank 1 the weights, both the epoch and step). Returns the whole state."""
    import mindspore as ms
    from omegaconf import OmegaConf

    from ms_exp.checkpoint.files import save_weights
    from ms_exp.data.build import declared_spec
    from ms_exp.models import create_network
    from ms_exp.preflight.compose import compose_config, hydra_config_of

    run_dir.mkdir(parents=True)
    cfg = compose_config(
        ["parallel=data", "checkpoint.remove_redundancy=true"], return_hydra_config=True
    )
    with hydra_config_of(cfg, str(run_dir)):
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        OmegaConf.save(job, run_dir / "config.yaml", resolve=True)
    ms.set_seed(1)
    network = create_network(job.model, declared_spec(job.dataset))
    state = {p.name: p.asnumpy() for p in network.trainable_params()}
    for rank, kind in enumerate(("bias", "weight")):
        share = {n: a for n, a in state.items() if n.endswith(kind)}
        entries = [{"name": n, "data": ms.Tensor(a)} for n, a in share.items()]
        folder = run_dir / "checkpoints" / f"rank_{rank}"
        folder.mkdir(parents=True)
        save_weights(entries, folder / "checkpoint-1_10.ckpt")
    return state


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_a_redundancy_free_run_is_merged_from_its_shares_then_evaluated(tmp_path):
    """checkpoint.remove_redundancy: one rank's file is refused with the merge command; the
    merge joins the ranks' shares into the whole state, which evaluates."""
    from ms_exp.checkpoint.files import load_verified

    run_dir = tmp_path / "outputs" / "run"
    state = shared_run_directory(run_dir)
    share = run_dir / "checkpoints" / "rank_0" / "checkpoint-1_10.ckpt"
    work = tmp_path / "work"
    refused = main_in_process("ms_exp.eval", ["--checkpoint", str(share)], work)
    merged_file = run_dir / "checkpoints" / "merged" / "rank_0" / "checkpoint0.ckpt"
    assert one_line(refused, "ms_exp.eval") == (
        f"--checkpoint='{share}': one rank's share of a run saved with "
        "checkpoint.remove_redundancy=true; expected a whole checkpoint: merge the shares with "
        f"{python_command()} -m ms_exp.ckpt merge {run_dir}, then pass --checkpoint "
        f"{merged_file} (or --run-id <run id> without --checkpoint: its last step, merged)"
    )
    merged = main_in_process("ms_exp.ckpt", ["merge", str(run_dir)], work)
    assert merged.rc == 0, merged.stderr[-3000:]
    said, shown = merged.stdout.strip().splitlines()[-2:]
    assert said == (
        f"merged checkpoint-1_10.ckpt (epoch 1, step 10 of the epoch) of ranks 0-1 "
        f"({run_dir / 'checkpoints'}), each rank's share (checkpoint.remove_redundancy)"
    )
    assert shown == str(merged_file)
    whole = {n: p.asnumpy() for n, p in load_verified(merged_file).items()}
    assert set(whole) == set(state)
    assert all(np.array_equal(whole[n], a) for n, a in state.items())
    shutil.copyfile(migrated_store(), work / "mlflow.db")
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(merged_file)], work)
    assert result.rc == 0, result.stderr[-3000:]
    assert re.search(r"^result: \{.*'accuracy'.*\} ckpt= (.*)$", result.stdout, re.M).group(
        1
    ) == str(merged_file)


def evaluated_files(monkeypatch) -> List[Path]:
    """The checkpoint files ms_exp.eval loads into the network, as they are loaded."""
    from ms_exp import eval as evaluation

    loaded: List[Path] = []
    real = evaluation.prepare
    monkeypatch.setattr(
        evaluation,
        "prepare",
        lambda cfg, checkpoint: loaded.append(Path(checkpoint)) or real(cfg, checkpoint),
    )
    return loaded


def command_of(line: str, module: str) -> List[str]:
    """The arguments of the ``python -m module ...`` command a printed hint line ends with."""
    words = shlex.split(line.split(": ", 1)[1])
    assert words[1:3] == ["-m", module], line
    return words[3:]


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_the_printed_merge_then_eval_commands_evaluate_the_merged_file_itself(
    tmp_path, monkeypatch
):
    """As a sliced run's last lines say: merge (its default output), then eval that file;
    the file is evaluated as it is, found in its run directory, and named by ``ckpt=``. The
    run saved safetensors (tests/test_semi_auto.py: .ckpt): merged by unified_safetensors
    into one .safetensors file with its digest."""
    from ms_exp.job.outputs import sliced_checkpoint_lines

    run_dir = tmp_path / "outputs" / "run"
    cfg = sliced_run_directory(run_dir, "safetensors")
    lines = sliced_checkpoint_lines(run_dir, cfg)
    merged_file = run_dir / "checkpoints" / "merged" / "rank_0" / "checkpoint0.safetensors"
    assert lines[2:] == [
        f"merge them into one checkpoint: {python_command()} -m ms_exp.ckpt merge {run_dir}",
        f"then evaluate it: {python_command()} -m ms_exp.eval --checkpoint {merged_file}",
    ]
    work = tmp_path / "work"
    merged = main_in_process("ms_exp.ckpt", command_of(lines[2], "ms_exp.ckpt"), work)
    assert merged.rc == 0, merged.stderr[-3000:]
    assert merged.stdout.strip().splitlines()[-1] == str(merged_file)
    assert merged_file.with_name("checkpoint0.safetensors.sha256").is_file()
    # The store the run recorded in (its config's: ./mlflow.db), holding the run.
    shutil.copyfile(migrated_store(), work / "mlflow.db")
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiment = ensure_experiment(client, "ms_exp")
    run = client.create_run(experiment, tags={"ms_exp.run_dir": str(run_dir.resolve())})
    run = run.info.run_id
    client.set_terminated(run)
    loaded = evaluated_files(monkeypatch)
    result = main_in_process("ms_exp.eval", command_of(lines[3], "ms_exp.eval"), work)
    assert result.rc == 0, result.stderr[-3000:]
    assert loaded == [merged_file]
    assert "for this evaluation" not in result.stdout  # not merged again
    assert re.search(r"^result: \{.*'accuracy'.*\} ckpt= (.*)$", result.stdout, re.M).group(
        1
    ) == str(merged_file)
    # Recorded as an evaluation of the run the merged file came from.
    evaluation = re.search(r"^MLflow run (\w+) \(child of (\w+)\)", result.stdout, re.M)
    assert evaluation.group(2) == run
    assert client.get_run(evaluation.group(1)).data.tags["mlflow.parentRunId"] == run


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_a_merge_by_run_id_is_evaluated_as_it_is_with_that_run_id(tmp_path, monkeypatch):
    """``ms_exp.ckpt merge <run id>`` writes ./merged/<run id>/rank_0/: with ``--run-id``
    eval evaluates that file, not a fresh merge of the run's slices; alone, it names the
    flag that says the file's network."""
    run_dir = tmp_path / "outputs" / "run"
    sliced_run_directory(run_dir)
    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")  # spares MLflow's migrations
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(
        ensure_experiment(client, "ms_exp"), tags={"ms_exp.run_dir": str(run_dir)}
    ).info.run_id
    client.log_artifact(run, str(run_dir / "config.yaml"), "config")
    client.set_terminated(run)
    work = tmp_path / "work"
    merged = main_in_process("ms_exp.ckpt", ["merge", run, "--tracking-uri", uri], work)
    assert merged.rc == 0, merged.stderr[-3000:]
    merged_file = work / "merged" / run / "rank_0" / "checkpoint0.ckpt"
    assert merged.stdout.strip().splitlines()[-1] == str(merged_file)
    relative = f"merged/{run}/rank_0/checkpoint0.ckpt"  # as the user types it, in work/

    loaded = evaluated_files(monkeypatch)
    result = main_in_process(
        "ms_exp.eval", ["--run-id", run, "--checkpoint", relative, "--tracking-uri", uri], work
    )
    assert result.rc == 0, result.stderr[-3000:]
    assert loaded == [Path(relative)]
    assert "for this evaluation" not in result.stdout
    assert re.search(r"^result: .* ckpt= (.*)$", result.stdout, re.M).group(1) == str(merged_file)
    assert f"(child of {run})" in result.stdout

    alone = main_in_process("ms_exp.eval", ["--checkpoint", relative], work)
    assert one_line(alone, "ms_exp.eval") == (
        f"--checkpoint='{relative}': not in a run directory (<run dir>/checkpoints/rank_<r>/ "
        "or <run dir>/checkpoints/merged/rank_<r>/), so no config.yaml says which network it "
        f"holds; expected --run-id {run} with it (the run it was merged from), or --config "
        "<the run's config.yaml>"
    )


def test_eval_of_one_ranks_slice_says_how_to_merge_it_and_evaluates_nothing(tmp_path):
    run_dir = tmp_path / "outputs" / "run"
    sliced_run_directory(run_dir)
    work = tmp_path / "work"
    work.mkdir()
    piece = run_dir / "checkpoints" / "rank_3" / "checkpoint-1_10.ckpt"
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(piece)], work)
    merged = run_dir / "checkpoints" / "merged" / "rank_0" / "checkpoint0.ckpt"
    assert one_line(result, "ms_exp.eval") == (
        f"--checkpoint='{piece}': one rank's slice of a sliced run (checkpoint=sliced); "
        f"expected a whole checkpoint: merge the slices with {python_command()} -m "
        f"ms_exp.ckpt merge {run_dir}, then pass --checkpoint {merged} (or --run-id <run id> "
        "without --checkpoint: its last step, merged)"
    )
    nothing_created(work)
    assert not (run_dir / "checkpoints" / "merged").exists()
