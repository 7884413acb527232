"""Dimension-reduction training: stage one's snapshots, stage two's DimReduce, the PCA
cache, sweeps, data parallel and the refusals (issue: boost=dim_reduce)."""

import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    FAST,
    CliResult,
    free_port,
    main_in_process,
    migrated_store,
    train,
)

from ms_exp.config.errors import InvalidConfig
from ms_exp.job.summary import stage_two_command
from ms_exp.preflight.compose import compose_config, preflight

# digits: 44 steps per epoch at batch 32. Snapshots from epoch 2, 6 per epoch: 12.
STAGE_ONE = (
    "+experiment=dim_reduce_stage_one",
    "trainer.epochs=3",
    "checkpoint.snapshots.start_epoch=2",
    "checkpoint.snapshots.per_epoch=6",
)
STAGE_TWO = "+experiment=dim_reduce_stage_two"
STEPS = 44


@pytest.fixture(scope="module")
def stage_one(tmp_path_factory):
    return train(tmp_path_factory.mktemp("dim_reduce"), *STAGE_ONE)


def test_the_stage_two_command_follows_how_stage_one_was_given():
    own = [
        "model=resnet",
        "dataset=synthetic",
        "checkpoint.snapshots.per_epoch=2",
        "tracking.uri=sqlite:///elsewhere.db",
    ]
    command = stage_two_command(compose_config(own), own, "abc")
    assert command.endswith(
        " -m ms_exp.run model=resnet dataset=synthetic "
        "checkpoint.snapshots.per_epoch=2 tracking.uri=sqlite:///elsewhere.db "
        "boost=dim_reduce boost.stage_one_run_id=abc"
    )
    preset = [
        "+experiment=dim_reduce_stage_one",
        "trainer.epochs=3",
        "tracking.uri=sqlite:///elsewhere.db",
    ]
    assert stage_two_command(compose_config(preset), preset, "abc").endswith(
        " -m ms_exp.run +experiment=dim_reduce_stage_two tracking.uri=sqlite:///elsewhere.db "
        "boost.stage_one_run_id=abc"
    )
    # A run that kept no snapshots, and stage two itself, have no stage two.
    assert stage_two_command(compose_config([]), [], "abc") is None


@pytest.mark.e2e
def test_stage_one_keeps_weight_snapshots_from_its_start_epoch_and_records_them(stage_one):
    import mindspore as ms

    assert "deprecated" not in stage_one.stdout + stage_one.stderr
    # It ends with the command of stage two, from its own snapshots.
    assert re.search(
        rf"^stage two, from its snapshots: \S+ -m ms_exp.run "
        rf"\+experiment=dim_reduce_stage_two boost.stage_one_run_id="
        rf"{stage_one.run_id}$",
        stage_one.stdout,
        re.M,
    ), stage_one.stdout[-1500:]

    snapshots = sorted((stage_one.run_dir / "snapshots").glob("*.ckpt"))
    names = sorted(p.name for p in snapshots)
    assert names == sorted(
        f"snapshot-{e}_{s}.ckpt" for e in (2, 3) for s in (7, 14, 21, 28, 35, 42)
    )
    # Weight-only (saved_network): the network's parameters, no optimizer state.
    assert set(ms.load_checkpoint(str(snapshots[0]))) == {
        f"layer{i}.{w}" for i in (1, 2, 3) for w in ("weight", "bias")
    }
    final = ms.load_checkpoint(str(stage_one.run_dir / "checkpoints/rank_0/checkpoint-3_44.ckpt"))
    assert any(name.startswith("moments.") for name in final)
    run = stage_one.store.get_run(stage_one.run_id)
    assert run.data.tags["ms_exp.snapshots.count"] == "12"
    assert run.data.tags["ms_exp.snapshots.dir"] == str(stage_one.run_dir / "snapshots")
    logged = {a.path for a in stage_one.store.list_artifacts(stage_one.run_id, "snapshots")}
    assert logged == {f"snapshots/{n}" for n in names}
    assert run.data.tags["ms_exp.checkpoint.last"] == "checkpoints/rank_0/checkpoint-3_44.ckpt"


# Stage two's jobs, started at the same time in stage one's folder, all with 8 components:
# a sweep of two jobs (2 epochs, every step's loss printed), the first computing or reusing
# the PCA matrix, the second given a matrix of the test's; and the Optuna search preset's
# two trials. Each process runs its jobs one after the other. One of the three jobs without
# a given matrix computes it under the cache's lock; the others reuse it.
STAGE_TWO_JOBS = (
    "-m",
    *FAST,
    STAGE_TWO,
    "boost.n_components=8",
    "trainer.loss_print_interval=1",
    "hydra.sweep.dir=multirun/stage_two",
)
SEARCH = (
    "-m",
    *FAST,
    "+experiment=dim_reduce_search",
    "hydra.sweeper.n_trials=2",
    "trainer.epochs=1",
    "boost.n_components=8",
    "hydra.sweep.dir=multirun/search",
)
# The MLP's trainable weights: layer1 64x512, layer2 512x512, layer3 512x10, and biases.
WEIGHTS = 64 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10


@dataclass
class StageTwo:
    jobs: CliResult
    search: CliResult
    given: Path


@pytest.fixture(scope="module")
def stage_two(stage_one) -> StageTwo:
    cwd = stage_one.cwd
    given = cwd / "given_pca.npy"
    rows = np.random.default_rng(0).standard_normal((8, WEIGHTS)).astype(np.float32)
    np.save(given, rows / np.linalg.norm(rows, axis=1, keepdims=True))
    commands = {
        "jobs": [
            *STAGE_TWO_JOBS,
            f"boost.stage_one_run_id={stage_one.run_id}",
            f"boost.pca_mat_path=null,{given}",
        ],
        "search": list(SEARCH),
    }
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = {}
    for name, args in commands.items():
        # Files, not pipes: a job never waits for the test to read the other job's output.
        with open(cwd / f"{name}.out", "w") as out, open(cwd / f"{name}.err", "w") as err:
            started[name] = subprocess.Popen(
                [sys.executable, "-m", "ms_exp.run", *args],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=err,
            )
    results = {}
    try:
        for job in started.values():
            job.wait(timeout=900)
    finally:
        for job in started.values():
            if job.poll() is None:
                job.kill()
    for name, job in started.items():
        results[name] = CliResult(
            subprocess.CompletedProcess(
                job.args,
                job.returncode,
                (cwd / f"{name}.out").read_text(),
                (cwd / f"{name}.err").read_text(),
            ),
            cwd,
        )
    return StageTwo(**results, given=given)


def _pca_sources(text: str) -> list:
    return [
        line.split()[2].rstrip(";") for line in text.splitlines() if line.startswith("PCA matrix:")
    ]


def _sweep(result: CliResult):
    """A sweep's parent run and its jobs' runs, in the order they ran."""
    assert result.rc == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    store = result.store
    parent = store.get_run(result.field("MLflow parent run ").split()[0])
    children = store.search_runs(
        ["1"],
        f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
        order_by=["attributes.start_time ASC"],
    )
    return parent, children


@pytest.mark.e2e
def test_stage_two_has_a_finite_loss_every_step_and_logs_its_pca_once(stage_one, stage_two):
    result = stage_two.jobs
    _, (run, given_run) = _sweep(result)
    assert run.data.params["boost.pca_mat_path"] == "null"
    # The basic sweeper's jobs are named by what they sweep.
    assert run.info.run_name == "pca_mat_path=null"
    assert given_run.info.run_name == f"pca_mat_path={stage_two.given}"
    store = result.store
    for job in (run, given_run):
        losses = store.get_metric_history(job.info.run_id, "train/loss")
        assert [m.step for m in losses] == list(range(1, 2 * STEPS + 1))
        assert all(math.isfinite(m.value) for m in losses)
    printed = [
        float(line.rsplit(" ", 1)[1]) for line in result.stdout.splitlines() if ", loss is " in line
    ]
    assert len(printed) == 2 * 2 * STEPS and all(math.isfinite(v) for v in printed)
    params = run.data.params
    assert params["boost.stage_one_run_id"] == stage_one.run_id
    assert params["boost.pretrained_weight_path"].endswith("checkpoint-3_44.ckpt")
    assert params["boost.weight_load_dir"] == str(stage_one.run_dir / "snapshots")
    # The matrix belongs to stage one: cached beside its snapshots and logged to its run.
    # This job computed it, or reused it from the search running beside it
    # (test_jobs_at_the_same_time_compute_the_pca_once_and_do_not_clobber).
    cache = stage_one.run_dir / "snapshots/ms_exp_pca/pca_mat_n8.npy"
    source = run.data.tags["ms_exp.pca.source"]
    assert source in ("computed", "cached")
    assert f"PCA matrix: {source} ({cache}); 8 components" in result.stdout
    # MindSpore's expected warning is said once, in ms_exp's words, and not printed raw.
    assert "forward network only once" not in result.stderr
    assert result.stdout.count("boost=dim_reduce: MindSpore warns 'call the forward") == 1
    assert run.data.tags["ms_exp.pca.cache"] == str(cache)
    assert np.load(cache).shape == (8, WEIGHTS)
    # Logged once, as pca/pca_mat_n<K>.npy (the data-parallel test's 10 components may be
    # there too: the distributed lane runs first).
    logged = {a.path for a in store.list_artifacts(stage_one.run_id, "pca")}
    assert "pca/pca_mat_n8.npy" in logged
    assert logged <= {"pca/pca_mat_n8.npy", "pca/pca_mat_n10.npy"}, logged
    # MindSpore's temporary files stayed out of the snapshot folder and were cleaned up.
    assert sorted(
        p.name for p in (stage_one.run_dir / "snapshots").iterdir() if not p.name.endswith(".ckpt")
    ) == ["ms_exp_pca", "snapshot-graph.meta"]
    assert sorted(p.name for p in (stage_one.cwd / "multirun").glob("*/*/pca")) == []
    assert run.data.metrics["eval/loss"] < _eval_loss(stage_one)
    # Its checkpoints load into the network again: ms_exp.eval gives the run's accuracy.
    evaluated = main_in_process("ms_exp.eval", ["--run-id", run.info.run_id], stage_one.cwd)
    assert evaluated.rc == 0, evaluated.stderr[-2000:]
    assert f"'accuracy': {run.data.metrics['eval/accuracy']}" in evaluated.stdout


def test_stage_twos_expected_warning_is_muted_once_unless_the_user_chose(monkeypatch, capsys):
    """Muted before the checks, which import MindSpore for stage two (it reads its log levels
    at import); said once they passed (the e2e sweep above: the raw warning is gone)."""
    from ms_exp.boost.options import mute_expected_warning

    monkeypatch.delenv("MS_SUBMODULE_LOG_v", raising=False)
    assert mute_expected_warning(compose_config([])) is None  # boost=off: nothing to mute
    assert "MS_SUBMODULE_LOG_v" not in os.environ
    with pytest.raises(InvalidConfig):  # refused: muted for the checks, but nothing said
        preflight([STAGE_TWO, "boost.stage_one_run_id=0123456789abcdef0123456789abcdef"])
    assert os.environ["MS_SUBMODULE_LOG_v"] == "{OPTIMIZER:3}"
    assert capsys.readouterr().out == ""
    monkeypatch.delenv("MS_SUBMODULE_LOG_v")
    stage_two = compose_config([STAGE_TWO])
    assert mute_expected_warning(stage_two) == (
        "boost=dim_reduce: MindSpore warns 'call the forward network only once' by design "
        "here; MS_SUBMODULE_LOG_v={OPTIMIZER:3} turns that part's warnings off for this "
        "command (set it yourself to choose)"
    )
    assert mute_expected_warning(stage_two) is None  # once a command
    monkeypatch.setenv("MS_SUBMODULE_LOG_v", "{OPTIMIZER:1}")
    assert mute_expected_warning(stage_two) is None
    assert os.environ["MS_SUBMODULE_LOG_v"] == "{OPTIMIZER:1}"


def test_boost_keys_reach_mindspore_under_their_real_names():
    from mindspore.boost import AutoBoost
    from omegaconf import OmegaConf

    from ms_exp.boost.dim_reduce import boost_config_dict, reset_auto_boost

    cfg = OmegaConf.create(
        {"rho": 0.4, "gamma": 0.8, "alpha": 0.002, "sigma": 0.2, "n_components": 6, "timeout": 77}
    )
    reset_auto_boost()
    boost = AutoBoost("O1", boost_config_dict(cfg, 2, "/snap", "/p.npy"))
    assert boost.boost_config["dim_reduce"] is True
    assert (
        boost.rho,
        boost.gamma,
        boost.alpha,
        boost.sigma,
        boost.n_components,
        boost.timeout,
        boost.device_number,
        boost.weight_load_dir,
        boost.pca_mat_path,
    ) == (0.4, 0.8, 0.002, 0.2, 6, 77, 2, "/snap", "/p.npy")
    reset_auto_boost()


@pytest.mark.e2e
def test_search_trials_share_one_pca_and_each_trains_with_its_own_values(stage_two):
    result = stage_two.search
    parent, trials = _sweep(result)
    assert len(trials) == 2
    # Jobs run one after another in one process: the later one reuses the matrix (the
    # first computed it, or found it computed by the job beside it).
    sources = [t.data.tags["ms_exp.pca.source"] for t in trials]
    assert sources[1] == "cached" and sources[0] in ("computed", "cached"), sources
    assert _pca_sources(result.stdout) == sources
    assert result.stdout.count("PCA matrix: computed") <= 1
    # MindSpore's AutoBoost is a singleton; without the reset both trials would train with
    # the first trial's rho, gamma and sigma.
    assert len({t.data.params["boost.rho"] for t in trials}) == 2
    losses = [t.data.metrics["eval/loss"] for t in trials]
    assert losses[0] != losses[1]
    parents = {t.data.tags.get("mlflow.parentRunId") for t in trials}
    assert parents == {parent.info.run_id}


@pytest.mark.e2e
def test_jobs_at_the_same_time_compute_the_pca_once_and_do_not_clobber(stage_two):
    (_, (job, _)), (_, trials) = _sweep(stage_two.jobs), _sweep(stage_two.search)
    sources = sorted(
        [_pca_sources(stage_two.jobs.stdout)[0], *_pca_sources(stage_two.search.stdout)]
    )
    assert sources == ["cached", "cached", "computed"]
    tags = [run.data.tags["ms_exp.pca.source"] for run in (job, *trials)]
    assert sorted(tags) == sources


@pytest.mark.e2e
def test_a_given_pca_matrix_is_used_as_is(stage_two):
    """The sweep's second job: its matrix is the test's own, not the cached one."""
    result = stage_two.jobs
    _, (_, run) = _sweep(result)
    assert run.data.params["boost.pca_mat_path"] == str(stage_two.given)
    assert _pca_sources(result.stdout)[1] == "given"
    assert "PCA matrix: given; 8 components" in result.stdout
    tags = run.data.tags
    assert tags["ms_exp.pca.source"] == "given"
    assert tags["ms_exp.pca.cache"] == str(stage_two.given)


@pytest.mark.distributed
@pytest.mark.e2e
def test_stage_two_data_parallel_on_two_workers(stage_one):
    result = train(
        stage_one.cwd,
        STAGE_TWO,
        "parallel=data",
        "boost.n_components=10",
        "trainer.epochs=1",
        f"parallel.launcher.master_port={free_port()}",
    )
    logs = result.run_dir / "log_output"
    rank0 = (logs / "worker_0.log").read_text()
    rank1 = (logs / "worker_1.log").read_text()
    assert "PCA matrix: computed" in rank0
    assert "rank 1: waiting up to 1800 s for rank 0's PCA matrix" in rank1
    run = result.store.get_run(result.run_id)
    assert run.data.params["boost.n_components"] == "10"
    losses = result.store.get_metric_history(result.run_id, "train/loss")
    assert len(losses) == STEPS // 2 and all(math.isfinite(m.value) for m in losses)
    # It trains (held-out loss below stage one's) and the ranks stay in step.
    assert run.data.metrics["eval/loss"] < _eval_loss(stage_one)
    import mindspore as ms

    ranks = [
        ms.load_checkpoint(str(result.run_dir / f"checkpoints/rank_{r}/checkpoint-1_22.ckpt"))
        for r in (0, 1)
    ]
    for name in ("layer1.weight", "layer3.bias"):
        np.testing.assert_array_equal(ranks[0][name].asnumpy(), ranks[1][name].asnumpy())


def _eval_loss(result) -> float:
    return result.store.get_run(result.run_id).data.metrics["eval/loss"]


def test_dim_reduce_without_stage_one_weights_is_refused_before_anything_runs(tmp_path):
    result = main_in_process(
        "ms_exp.run", [*FAST, STAGE_TWO, "boost.stage_one_run_id=null"], tmp_path
    )
    assert result.rc == 2
    assert result.stderr.strip() == (
        "ms_exp: error: boost.pretrained_weight_path=null: boost=dim_reduce needs the "
        "stage-one weights; expected stage one's final checkpoint (or "
        "boost.stage_one_run_id=<run id>|latest); run +experiment=dim_reduce_stage_one first"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _refusal(stage_one, monkeypatch, *overrides) -> str:
    monkeypatch.chdir(stage_one.cwd)
    with pytest.raises(InvalidConfig) as refused:
        preflight([STAGE_TWO, f"boost.stage_one_run_id={stage_one.run_id}", *overrides])
    return str(refused.value)


@pytest.mark.e2e
def test_bad_stage_two_inputs_are_refused_with_one_line(stage_one, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    wide = tmp_path / "wide.npy"
    np.save(wide, np.zeros((8, 100), dtype=np.float32))
    snapshots = stage_one.run_dir / "snapshots"
    stage_one_weights = stage_one.run_dir / "checkpoints/rank_0/checkpoint-3_44.ckpt"
    cases = {
        (
            "boost.weight_load_dir=/no/such/folder",
        ): "boost.weight_load_dir='/no/such/folder': not allowed; expected a folder that exists",
        (
            f"boost.weight_load_dir={empty}",
        ): f"boost.weight_load_dir={str(empty)!r}: not allowed; expected a folder of stage-one "
        "weight snapshots (*.ckpt); it has none",
        (
            "boost.n_components=16",
        ): f"boost.n_components=16: not allowed; expected at most the 12 snapshots in "
        f"{snapshots} (PCA cannot find more components than samples)",
        (
            f"boost.pca_mat_path={wide}",
            "boost.n_components=8",
        ): f"boost.pca_mat_path={str(wide)!r}: not allowed; expected a matrix 301066 wide, one "
        "column per trainable weight of this network (it is 8x100)",
        (
            "model.hidden_size=64",
            "boost.n_components=8",
        ): f"boost.pretrained_weight_path={str(stage_one_weights)!r}: not allowed; expected a "
        "checkpoint of this network (layer1.weight is [64, 512], not [64, 64]",
        (
            "boost.n_components=5",
            "parallel=data",
        ): "boost.n_components=5: not allowed; expected a multiple of parallel.device_num (2)",
        (
            "optimizer.name=momentum",
        ): "optimizer.name='momentum': not allowed; expected sgd with boost=dim_reduce",
        ("boost.rho=1.5",): "boost.rho=1.5: not allowed; expected a number in (0, 1)",
        ("parallel=semi_auto",): "parallel='semi_auto': not allowed; expected stand_alone or data",
        (
            "boost.stage_one_run_id=0123456789abcdef",
        ): "boost.stage_one_run_id='0123456789abcdef': no such run",
    }
    for overrides, message in cases.items():
        text = _refusal(stage_one, monkeypatch, *overrides)
        assert text.startswith(message), (overrides, text)
        assert "\n" not in text


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_latest_without_any_stage_one_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")  # an empty store
    with pytest.raises(
        InvalidConfig,
        match=r"^boost.stage_one_run_id='latest': there is none; "
        r"expected a finished stage-one run in experiment 'ms_exp'",
    ):
        preflight([STAGE_TWO])


def test_snapshot_settings_are_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        InvalidConfig,
        match=r"^checkpoint.snapshots.start_epoch=20: not "
        r"allowed; expected an epoch from 1 to trainer.epochs \(12\)$",
    ):
        preflight(["+experiment=dim_reduce_stage_one", "checkpoint.snapshots.start_epoch=20"])
    with pytest.raises(InvalidConfig, match=r"^checkpoint.snapshots.per_epoch=-1"):
        preflight(["checkpoint.snapshots.per_epoch=-1"])


@pytest.mark.e2e
def test_stage_one_files_come_from_mlflow_when_its_run_dir_is_gone(stage_one, monkeypatch):
    from ms_exp.boost.stage_one import resolve_stage_one
    from ms_exp.preflight.compose import compose_config

    monkeypatch.chdir(stage_one.cwd)
    cfg = compose_config([STAGE_TWO, f"boost.stage_one_run_id={stage_one.run_id}"])
    moved = stage_one.run_dir.with_name(stage_one.run_dir.name + "-elsewhere")
    stage_one.run_dir.rename(moved)
    try:
        found = resolve_stage_one(cfg.boost, cfg.tracking)
    finally:
        moved.rename(stage_one.run_dir)
    downloads = stage_one.cwd / ".ms_exp/stage_one" / stage_one.run_id
    assert found.weights == downloads / "checkpoint-3_44.ckpt"
    assert found.snapshots == downloads / "snapshots"
    assert len(list(found.snapshots.glob("*.ckpt"))) == 12 and found.weights.is_file()


@pytest.mark.e2e
def test_optuna_search_preset_maximises_accuracy_over_rho_gamma_sigma(stage_two):
    result = stage_two.search
    store = result.store
    parent, trials = _sweep(result)
    assert parent.info.run_name == "dim_reduce-stage-two-sweep"
    assert parent.data.params["boost.rho"] == "interval(0.3, 0.8)"
    assert len(trials) == 2
    for trial in trials:
        rho = float(trial.data.params["boost.rho"])
        assert 0.3 <= rho <= 0.8 and trial.info.run_name.startswith(f"rho={rho:.4g},gamma=")
    # The sweeper got each job's final eval accuracy and reports the best one.
    best = store.download_artifacts(parent.info.run_id, "sweep/optimization_results.yaml")
    import yaml

    results = yaml.safe_load(open(best))
    assert results["best_value"] == max(t.data.metrics["eval/accuracy"] for t in trials)


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_the_line_search_leaves_batchnorm_statistics_where_training_left_them(tmp_path):
    """Each line-search trial runs the network in training mode: without the restore its
    passes move BatchNorm's moving statistics (a ResNet's held-out accuracy fell from 0.48
    to 0.03 in stage two: docs/design.md#dimreduce-batchnorm)."""
    import mindspore as ms
    from mindspore import Tensor, nn
    from mindspore.boost import AutoBoost
    from omegaconf import OmegaConf

    from ms_exp.boost.cell import LossReturningBoostCell
    from ms_exp.boost.dim_reduce import boost_config_dict, reset_auto_boost

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Dense(6, 2))
    size = sum(int(np.prod(p.shape)) for p in net.trainable_params())
    np.save(tmp_path / "pca.npy", np.random.default_rng(0).normal(size=(2, size)).astype("f4"))
    boost = OmegaConf.create(
        {"rho": 0.55, "gamma": 0.9, "alpha": 0.001, "sigma": 0.4, "n_components": 2, "timeout": 60}
    )
    reset_auto_boost()
    auto_boost = AutoBoost("O1", boost_config_dict(boost, 1, tmp_path, tmp_path / "pca.npy"))
    net, sgd = auto_boost.network_auto_process_train(
        net, nn.SGD(net.trainable_params(), learning_rate=1.0)
    )
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cell = LossReturningBoostCell(nn.WithLossCell(net, loss_fn), sgd)
    reset_auto_boost()
    cell.set_train()
    x = Tensor(np.random.default_rng(1).normal(3, 1, (8, 4)).astype("f4"))
    y = Tensor(np.arange(8) % 2, ms.int32)

    class LineSearch(nn.Cell):  # the cell's DimReduce call, with the cell's own parameters
        def __init__(self) -> None:
            super().__init__(auto_prefix=False)
            self.dim_reduce, self.weights = cell.dim_reduce, cell.weights
            self.weights_clone = cell.weights_clone

        def construct(self, loss, grads, sens, *inputs):  # type: ignore[no-untyped-def]
            return self.dim_reduce(loss, grads, sens, self.weights, self.weights_clone, *inputs)

    def statistics_moved() -> list:
        loss = cell.network(x, y)
        grads = ms.grad(cell.network, grad_position=None, weights=cell.weights)(x, y)
        before = [p.asnumpy().copy() for p in net.untrainable_params()]
        LineSearch()(loss, grads, Tensor(1.0, ms.float32), x, y)
        return [not np.allclose(b, p.asnumpy()) for b, p in zip(before, net.untrainable_params())]

    assert [p.name.split(".")[-1] for p in net.untrainable_params()] == [
        "moving_mean",
        "moving_variance",
    ]
    assert statistics_moved() == [False, False]
    cell.dim_reduce.keep_stats = False  # MindSpore's own DimReduce
    assert statistics_moved() == [True, True]
