"""Wide&Deep on Criteo-format data under both placements (the hybrid-training tutorial):
the tutorial's wide/deep loss lines, both losses and AUC in MLflow, host kernels and host
tables under placement=host_device, data parallel with 2 msrun workers, the preset, the
large-table setting, and the refusals."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port, main_in_process, run_cli, train
from datafiles import write_criteo_text
from training_jobs import Job

from ms_exp.run import main

# Small sizes and a livelier deep learning rate so two epochs on 3,600 samples learn.
TINY = (
    "model=wide_deep",
    "dataset=criteo",
    "dataset.batch_size=256",
    "model.emb_dim=8",
    "model.deep_layers=[64,32]",
    "model.deep_lr=0.003",
    "trainer.epochs=2",
)
LOSS_LINE = re.compile(
    r"^epoch: (\d+) step: (\d+), wide_loss is ([\d.e-]+), "
    r"deep_loss is ([\d.e-]+)$",
    re.M,
)


@pytest.fixture(scope="module")
def criteo(tmp_path_factory) -> Path:
    """4,000 lines of Criteo text (3 of them malformed) converted to MindRecord, 8 samples
    a record (3585 training samples padded to 449 records: 14 batches of 256)."""
    from ms_exp.data.criteo_convert import main as convert

    root = tmp_path_factory.mktemp("criteo")
    write_criteo_text(root / "train.txt", 4000, seed=0, malformed=3)
    assert (
        convert(
            [
                str(root / "train.txt"),
                str(root / "mr"),
                "--threshold",
                "5",
                "--samples-per-record",
                "8",
            ]
        )
        == 0
    )
    return root / "mr"


def metric(result, name):
    return [m.value for m in result.store.get_metric_history(result.run_id, name)]


@pytest.fixture(scope="module")
def placements(tmp_path_factory, criteo):
    """Both placements, two epochs each, as one sweep (one process): its parent run, and
    the jobs by placement."""
    cwd = tmp_path_factory.mktemp("placements")
    result = run_cli(
        "ms_exp.run",
        [
            "-m",
            "trainer.progress_bar=never",
            *TINY,
            f"dataset.path={criteo}",
            "trainer.loss_print_interval=1",
            "placement=device,host_device",
        ],
        cwd,
    )
    assert result.rc == 0, result.stderr[-3000:]
    store = result.store
    experiment = store.get_experiment_by_name("ms_exp")
    runs = store.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    jobs = {
        run.data.params["placement.mode"]: Job(run.data.params["placement.mode"], run, store)
        for run in children
    }
    return result, parents, children, jobs


@pytest.mark.e2e
def test_host_device_prints_the_tutorial_loss_lines_and_logs_both_losses_and_auc(
    placements, criteo
):
    cli, _, _, jobs = placements
    result = jobs["host_device"]
    steps = 3585 // 256  # the converter's train split, drop_remainder
    lines = LOSS_LINE.findall(result.console)
    assert len(lines) == 2 * steps and lines[0][:2] == ("1", "1")
    assert "on a CPU-only machine host and device are the same memory" in result.console
    wide, deep = metric(result, "train/wide_loss"), metric(result, "train/deep_loss")
    assert len(wide) == len(deep) == 2 * steps
    # The printed values are the logged ones; deep_loss adds the L2 term on top.
    assert float(lines[-1][2]) == pytest.approx(wide[-1]) and float(lines[-1][3]) == pytest.approx(
        deep[-1]
    )
    assert all(d > w for w, d in zip(wide, deep))
    assert metric(result, "train/loss") == wide  # train/loss is the log loss
    auc = metric(result, "eval/auc")
    assert len(auc) == 2 and auc[-1] > 0.75
    run = result.run
    assert run.data.tags["ms_exp.placement"] == "host_device"
    assert set(run.data.tags["ms_exp.placement.host_params"].split(",")) == {
        "wide_embedding.embedding_table",
        "deep_embedding.embedding_table",
    }
    vocab = json.loads((criteo / "criteo_meta.json").read_text())["vocab_size"]
    assert run.data.metrics["placement/host_table_mb"] == pytest.approx(vocab * (8 + 1) * 4 / 2**20)
    assert run.data.metrics["system/peak_host_memory_mb"] > 100
    assert "(auc " in result.field("best checkpoint:")

    # The inference flow reproduces the run's AUC from the saved best checkpoint.
    evaluated = main_in_process(
        "ms_exp.eval", ["--run-id", result.run_id, "--checkpoint", "best"], cli.cwd
    )
    assert evaluated.rc == 0, evaluated.stderr[-2000:]
    assert float(re.search(r"'auc': ([\d.]+)", evaluated.stdout).group(1)) == pytest.approx(
        max(auc), abs=1e-6
    )


@pytest.mark.e2e
def test_device_placement_keeps_dense_tables_and_learns(placements):
    result = placements[3]["device"]
    assert "placement=device: every parameter and optimizer state on CPU" in result.console
    run = result.run
    assert "ms_exp.placement.host_params" not in run.data.tags
    assert "placement/host_table_mb" not in run.data.metrics
    assert metric(result, "eval/auc")[-1] > 0.7


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_placements_build_the_tutorials_kernels_and_train_the_same_loss(criteo):
    import mindspore as ms
    from omegaconf import OmegaConf

    from ms_exp.config.schema import WideDeepModel
    from ms_exp.models.wide_deep import WideDeepLoss, create_train_step, wide_deep
    from ms_exp.placement.tables import Placement

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    cfg = OmegaConf.structured(WideDeepModel(emb_dim=8, deep_layers=[16]))
    rng = np.random.default_rng(0)
    batch = (
        ms.Tensor(rng.integers(0, 500, (32, 39)).astype(np.int32)),
        ms.Tensor(rng.random((32, 39)).astype(np.float32)),
        ms.Tensor((rng.random((32, 1)) < 0.3).astype(np.float32)),
    )
    losses = {}
    for host in (False, True):
        ms.set_seed(3)
        network = wide_deep(
            (39,),
            500,
            Placement(host_tables=host),
            emb_dim=cfg.emb_dim,
            deep_layers=cfg.deep_layers,
        )
        step = create_train_step(cfg, network, Placement(host_tables=host))
        lookups = [network.wide_embedding, network.deep_embedding]
        assert {(t.target, t.sparse) for t in lookups} == {
            ("CPU", True) if host else ("DEVICE", False)
        }
        wide_opt, deep_opt = step.wide_optimizer, step.deep_optimizer
        assert type(wide_opt).__name__ == "FTRL"
        assert type(deep_opt).__name__ == ("LazyAdam" if host else "Adam")
        if host:  # the tutorial's primitive_target CPU on the fused sparse kernels
            for optimizer, kernel in (
                (wide_opt, "FusedSparseFtrl"),
                (deep_opt, "FusedSparseLazyAdam"),
            ):
                assert optimizer.sparse_opt.name == kernel
                assert optimizer.sparse_opt.attrs["primitive_target"] == "CPU"
        wide_names = {p.name for p in step.wide_params}
        assert wide_names == {"wide_bias", "wide_embedding.embedding_table"}
        losses[host] = [float(x.asnumpy()) for x in WideDeepLoss(network, cfg.l2_coef)(*batch)]
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)


# The tutorial's placement (tables on the host, sparse optimizers) under data parallelism;
# placement=device's dense tables reduce as any network's do (tests/test_distributed.py).
@pytest.mark.distributed
@pytest.mark.e2e
def test_data_parallel_two_workers_end_with_the_same_weights(tmp_path, criteo):
    placement = "host_device"
    result = train(
        tmp_path,
        *TINY,
        f"dataset.path={criteo}",
        f"placement={placement}",
        "parallel=data",
        f"parallel.launcher.master_port={free_port()}",
        "trainer.epochs=1",
    )
    import mindspore as ms

    ranks = [
        ms.load_checkpoint(
            str(next((result.run_dir / f"checkpoints/rank_{r}").glob("checkpoint-1_*.ckpt")))
        )
        for r in (0, 1)
    ]
    for name in (
        "wide_embedding.embedding_table",
        "deep_embedding.embedding_table",
        "deep_layers.0.weight",
    ):
        np.testing.assert_array_equal(ranks[0][name].asnumpy(), ranks[1][name].asnumpy())
    run = result.store.get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ms_exp.placement"] == placement
    assert len(metric(result, "train/deep_loss")) == (3585 // 2) // 256


@pytest.mark.e2e
def test_hybrid_preset_and_a_table_of_millions_of_rows(tmp_path, criteo):
    result = train(
        tmp_path,
        "+experiment=wide_deep_hybrid",
        "dataset.batch_size=256",
        "model.emb_dim=4",
        "model.deep_layers=[16]",
        "model.vocab_size=2000000",
        env={"DATA_PATH": str(criteo)},
    )
    run = result.store.get_run(result.run_id)
    assert run.data.params["placement.mode"] == "host_device"
    assert run.data.params["trainer.epochs"] == "1" and run.info.run_name == "wide_deep_hybrid"
    assert len(LOSS_LINE.findall(result.stdout)) == 3585 // 256  # a line every step
    assert "embedding tables (38.1 MiB)" in result.stdout  # 2e6 rows x (4 + 1) floats
    assert run.data.metrics["placement/host_table_mb"] == pytest.approx(2e6 * 5 * 4 / 2**20)


BAD = {
    "host tables without tables": (
        ["placement=host_device"],
        "placement='host_device': not allowed; expected a model "
        "with embedding tables to keep on the host "
        "(model=wide_deep); model=mlp has none, use placement=device",
    ),
    "wide_deep on images": (
        ["model=wide_deep"],
        "model='wide_deep': not allowed; expected dataset=criteo",
    ),
    "criteo with an image model": (
        ["dataset=criteo", "DATA"],
        "dataset='criteo': not allowed; expected model=wide_deep",
    ),
    "semi_auto wide_deep": (
        ["model=wide_deep", "dataset=criteo", "DATA", "parallel=semi_auto"],
        "parallel='semi_auto': not allowed; expected stand_alone or data",
    ),
    "optimizer it does not read": (
        ["model=wide_deep", "dataset=criteo", "DATA", "optimizer.lr=0.1"],
        "optimizer.lr=0.1: not allowed; expected its default 0.05 with model=wide_deep",
    ),
    "tables smaller than the data": (
        ["model=wide_deep", "dataset=criteo", "DATA", "model.vocab_size=10"],
        "model.vocab_size=10: not allowed; expected null or at least the dataset's",
    ),
    "keep_prob 0": (
        ["model=wide_deep", "dataset=criteo", "DATA", "model.keep_prob=0"],
        "model.keep_prob=0.0: not allowed; expected a number in (0, 1]",
    ),
    "unknown placement": (
        ["placement=host"],
        "placement='host': unknown option; expected one of device, host_device",
    ),
}


@pytest.mark.parametrize("argv,message", BAD.values(), ids=BAD.keys())
def test_bad_wide_deep_input_is_refused_in_one_line(workdir, capsys, criteo, argv, message):
    argv = [f"dataset.path={criteo}" if a == "DATA" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert list(workdir.iterdir()) == []


@pytest.mark.e2e
def test_a_placement_sweep_is_one_parent_run_ranked_by_auc(tmp_path, placements):
    result, parents, children, _ = placements
    assert len(parents) == 1 and len(children) == 2
    assert {c.data.params["placement.mode"] for c in children} == {"device", "host_device"}
    # The sweep report ranks Wide&Deep jobs by AUC (classifiers: by accuracy).
    assert "by eval/auc, highest first" in result.stdout
    summary = Path(
        result.store.download_artifacts(parents[0].info.run_id, "report/summary.csv", str(tmp_path))
    )
    header = summary.read_text().splitlines()[0].split(",")
    assert "eval/auc" in header and "eval/accuracy" not in header
