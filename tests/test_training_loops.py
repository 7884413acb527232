"""trainer.loop=model and functional: the same weights from the same config, each loss part
its own MLflow metric, mixed precision and loss scaling in both, the overflow check, the
gradient reducer, sink mode on CPU, and a functional run resumed by the shared machinery."""

import numpy as np
import pytest
from conftest import FAST, free_port, train
from training_jobs import experiment_sweep

PARTS = "+loss.parts={loss1:{name:cross_entropy},loss2:{name:softmax_cross_entropy,weight:0.5}}"


def weights(result, name="checkpoint-2_44.ckpt", rank=0):
    import mindspore as ms

    path = result.run_dir / f"checkpoints/rank_{rank}/{name}"
    return {key: value.asnumpy() for key, value in ms.load_checkpoint(str(path)).items()}


def assert_same_weights(a, b, atol=1e-6):
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=atol, err_msg=key)


def history(result, key):
    return [
        (m.step, m.value)
        for m in sorted(result.store.get_metric_history(result.run_id, key), key=lambda m: m.step)
    ]


# The tutorial's Trainer case, two losses (PARTS).
TWO_LOSSES = (
    "loss: {parts: {loss1: {name: cross_entropy}, "
    "loss2: {name: softmax_cross_entropy, weight: 0.5}}}\n"
)
# Stage one of the dimension-reduction tutorial on a small ResNet (see the test).
RESNET_O2 = (
    "defaults:\n  - override /model: resnet\n  - override /dataset: synthetic\n"
    "model: {depth: 18, width: 0.125}\n"
    "dataset: {image_shape: [3, 32, 32], num_samples: 256, num_eval_samples: 64}\n"
    "amp: {level: O2, loss_scale: fixed, loss_scale_value: 1024}\n"
)
JOBS = {
    "model": TWO_LOSSES + "trainer: {epochs: 2, loop: model}\n",
    "functional": TWO_LOSSES + "trainer: {epochs: 2, loop: functional}\n",
    # Resumed for a second epoch by a process of its own.
    "functional_first_epoch": TWO_LOSSES + "trainer: {epochs: 1, loop: functional}\n",
    "resnet_model_sink": RESNET_O2
    + ("trainer: {epochs: 2, dataset_sink_mode: true, sink_size: 3}\n"),
    "resnet_functional": RESNET_O2 + "trainer: {epochs: 2, loop: functional}\n",
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Every job of this file but the distributed one and the resumed one: one sweep, one
    process (tests/training_jobs.py)."""
    return experiment_sweep(tmp_path_factory.mktemp("loops"), JOBS, *FAST)


@pytest.mark.e2e
def test_both_loops_train_the_same_weights(sweep):
    model, functional = sweep["model"], sweep["functional"]
    # Weights, momenta, global_step and learning rate: the checkpoints are alike too.
    assert_same_weights(weights(model), weights(functional))
    assert model.field("final evaluation:") == functional.field("final evaluation:")
    for result, loop in ((model, "model"), (functional, "functional")):
        assert f"trainer.loop={loop}, amp level O0, loss scale none" in result.console
        assert result.run.data.tags["ms_exp.loop"] == loop
        assert (result.run_dir / "checkpoints/rank_0/best.ckpt").is_file()


@pytest.mark.e2e
def test_each_loss_part_is_its_own_metric(sweep):
    functional = sweep["functional"]
    total, loss1, loss2 = (
        history(functional, f"train/{name}") for name in ("loss", "loss1", "loss2")
    )
    assert [step for step, _ in total] == list(range(1, 89))
    assert [step for step, _ in loss1] == [step for step, _ in loss2] == list(range(1, 89))
    # The total is the weighted sum of the parts, which are logged unweighted.
    np.testing.assert_allclose(
        [v for _, v in total], [a + 0.5 * b for (_, a), (_, b) in zip(loss1, loss2)], rtol=1e-5
    )
    assert "loss is" in functional.console and ", loss1 is" in functional.console
    # An evaluation after every epoch, which picked best.ckpt.
    assert [step for step, _ in history(functional, "eval/accuracy")] == [44, 88]
    assert "epoch: 2 new best accuracy" in functional.console
    # Model's train step reports the total only; it trained the same weighted sum.
    model = sweep["model"]
    assert history(model, "train/loss1") == []
    np.testing.assert_allclose(
        [v for _, v in history(model, "train/loss")], [v for _, v in total], rtol=1e-5
    )


@pytest.mark.e2e
def test_a_functional_run_resumes_where_it_stopped(sweep):
    first = sweep["functional_first_epoch"]
    resumed = train(
        sweep.result.cwd,
        "trainer.epochs=2",
        PARTS,
        "trainer.loop=functional",
        f"trainer.resume={first.run_dir}",
    )
    assert resumed.run_id == first.run_id
    assert_same_weights(weights(resumed), weights(sweep["functional"]))
    assert [step for step, _ in history(resumed, "train/loss2")] == list(range(1, 89))


@pytest.mark.e2e
def test_mixed_precision_and_a_fixed_loss_scale_are_the_same_in_both_loops(sweep):
    """Stage one of the dimension-reduction tutorial: amp O2 (batch norm kept float32),
    FixedLossScaleManager(1024, drop_overflow_update=False) with Momentum(loss_scale=1024),
    on a small ResNet. The model run also asks for sink mode, which the CPU does not have."""
    model, functional = sweep["resnet_model_sink"], sweep["resnet_functional"]
    # Weights, batch-norm statistics, momenta: the same.
    assert_same_weights(
        weights(model, "checkpoint-2_8.ckpt"), weights(functional, "checkpoint-2_8.ckpt"), atol=1e-5
    )
    assert "amp level O2, loss scale fixed 1024" in model.console
    params = model.run.data.params
    assert (params["amp.level"], params["amp.loss_scale"]) == ("O2", "fixed")
    assert "the CPU has no dataset sink mode, so this run trains without it" in model.console
    assert "on Ascend/GPU it sinks 3 steps per call" in model.console
    # Every step reached the callbacks: 8 per epoch, not one per sink of 3.
    assert [step for step, _ in history(model, "train/loss")] == list(range(1, 17))


@pytest.mark.distributed
@pytest.mark.e2e
def test_the_functional_loop_reduces_gradients_across_ranks(tmp_path):
    """Each rank reads its own half of the data; with the gradient reducer both ranks take
    the same steps and end with the same weights. With amp O1, which MindSpore implements
    by rewriting the network's source into ./rewritten_network: the run's folder."""
    result = train(
        tmp_path,
        "parallel=data",
        "trainer.loop=functional",
        "trainer.epochs=1",
        "amp.level=O1",
        f"parallel.launcher.master_port={free_port()}",
    )
    rank0 = weights(result, "checkpoint-1_22.ckpt", 0)
    assert_same_weights(rank0, weights(result, "checkpoint-1_22.ckpt", 1), atol=0)
    assert not (tmp_path / "rewritten_network").exists()
    assert (result.run_dir / "amp/rank_1/rewritten_network").is_dir()


# --- in process: the casts, the overflow check ----------------------------------------


@pytest.mark.parametrize(
    "level, keep_bn, dense_fp16, batch_norm",
    [
        ("O0", None, False, "Float32"),
        ("O1", None, True, "Float32"),
        ("O2", None, True, "Float32"),
        ("O2", False, True, "Float16"),
        ("O3", None, True, "Float16"),
        ("O3", True, True, "Float32"),
    ],
)
def test_the_functional_loop_casts_the_network_as_model_does(
    level, keep_bn, dense_fp16, batch_norm, workdir
):
    """Which layers compute in float16: Dense from O1 on (its output is rounded to float16
    precision), batch norm only where keep_batchnorm_fp32 (O2's default) does not keep it
    float32."""
    import mindspore as ms
    from mindspore import nn

    from ms_exp.preflight.compose import compose_config
    from ms_exp.train.precision import cast_network

    overrides = [f"amp.level={level}"]
    if keep_bn is not None:
        overrides.append(f"amp.keep_batchnorm_fp32={str(keep_bn).lower()}")
    amp = compose_config(overrides).amp
    dense_out, bn_out = [], []
    network = nn.SequentialCell([nn.Dense(16, 16), nn.BatchNorm1d(16)])
    network[0].register_forward_hook(lambda cell, inputs, out: dense_out.append(out))
    network[1].register_forward_hook(lambda cell, inputs, out: bn_out.append(out.dtype))
    x = np.random.RandomState(0).randn(4, 16).astype(np.float32)
    exact = x @ network[0].weight.asnumpy().T + network[0].bias.asnumpy()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        cast_network(network, amp)(ms.Tensor(x))
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    error = np.abs(dense_out[0].asnumpy().astype(np.float32) - exact).max()
    assert (error > 1e-5) == dense_fp16, error
    assert str(bn_out[0]) == batch_norm


def tiny_trainer(amp_overrides, steps=3):
    """A functional Trainer of a small network over ``steps`` batches of 8."""
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn

    from ms_exp.preflight.compose import compose_config
    from ms_exp.train.loops import create_loop
    from ms_exp.train.metrics import classification_metrics

    cfg = compose_config(["trainer.loop=functional", *amp_overrides])
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    network = nn.SequentialCell([nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 4)])
    optimizer = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    trainer = create_loop(cfg, network, optimizer, classification_metrics(4), 4, None)
    rng = np.random.RandomState(0)
    data = ds.NumpySlicesDataset(
        {
            "x": rng.randn(8 * steps, 8).astype(np.float32),
            "y": (np.arange(8 * steps) % 4).astype(np.int32),
        },
        shuffle=False,
    ).batch(8)
    return trainer, network, data


# float16 (O3) gradients of a loss scaled by 2**30 overflow at every one of these steps.
OVERFLOWING = ("amp.level=O3", f"amp.loss_scale_value={2**30}")


@pytest.mark.e2e
def test_steps_whose_gradients_overflow_are_skipped_and_the_dynamic_scale_drops():
    trainer, network, data = tiny_trainer(["amp.loss_scale=dynamic", *OVERFLOWING])
    before = [p.asnumpy().copy() for p in network.trainable_params()]
    trainer.fit(1, data)
    assert trainer.overflow_steps == 3
    for p, old in zip(network.trainable_params(), before):
        np.testing.assert_array_equal(p.asnumpy(), old)
    assert trainer.scaler.scale_value.asnumpy() == 2**30 / 2**3  # halved at each

    # The same scale when the network is float32 (O0): nothing overflows, every step is
    # taken, and the scale (after fewer than scale_window good steps) stays.
    trainer, network, data = tiny_trainer(
        ["amp.loss_scale=dynamic", f"amp.loss_scale_value={2**30}"]
    )
    trainer.fit(1, data)
    assert trainer.overflow_steps == 0
    assert not np.array_equal(network.trainable_params()[0].asnumpy(), before[0])
    assert trainer.scaler.scale_value.asnumpy() == 2**30

    # scale_window good steps in a row raise the scale by scale_factor: 3 steps, window 2.
    trainer, network, data = tiny_trainer(
        ["amp.loss_scale=dynamic", "amp.scale_window=2", "amp.scale_factor=4"]
    )
    trainer.fit(1, data)
    assert trainer.overflow_steps == 0
    assert trainer.scaler.scale_value.asnumpy() == 1024 * 4


@pytest.mark.e2e  # as the test above: two functional steps compiled (5-9 s), no job
def test_a_fixed_scale_skips_overflowing_steps_only_with_drop_overflow_update():
    trainer, network, data = tiny_trainer(
        ["amp.loss_scale=fixed", "amp.drop_overflow_update=true", *OVERFLOWING]
    )
    before = network.trainable_params()[0].asnumpy().copy()
    trainer.fit(1, data)
    assert trainer.overflow_steps == 3
    np.testing.assert_array_equal(network.trainable_params()[0].asnumpy(), before)
    # Without it the steps are applied, as Model applies them: the weights break.
    trainer, network, data = tiny_trainer(["amp.loss_scale=fixed", *OVERFLOWING])
    trainer.fit(1, data)
    assert trainer.overflow_steps == 3
    assert not np.isfinite(network.trainable_params()[0].asnumpy()).all()
