"""The training curves in MLflow: train/lr (the rate each step used, every schedule, both
loops), train/grad_norm (the unscaled gradients' global norm) and the loss-scale curves
(train/loss_scale, train/overflow, train/overflow_steps)."""

import math

import numpy as np
import pytest
from conftest import FAST
from training_jobs import experiment_sweep

STEPS = 44  # the default digits job's steps per epoch


def history(result, key):
    return {m.step: m.value for m in result.store.get_metric_history(result.run_id, key)}


def zoo_rates(schedule, lr, warmup, total, lr_init=0.0, lr_end=0.0):
    """The model zoo ResNet's get_lr, written out again for the test."""
    rates = []
    for i in range(total):
        if i < warmup:
            rates.append(
                lr_init + (lr - lr_init) * ((i if schedule == "linear" else i + 1) / warmup)
            )
        elif schedule == "linear":
            rates.append(lr - (lr - lr_end) * (i - warmup) / (total - warmup))
        elif schedule == "cosine":
            decay = total - warmup
            cosine = 0.5 * (1 + math.cos(math.pi * 0.94 * i / decay))
            rates.append(lr * ((total - i) / decay * cosine + 1e-5))
        else:
            rates.append(lr)
    return rates


def test_learning_rates_for_a_schedule_cell_and_groups():
    import mindspore as ms
    from mindspore import nn

    from ms_exp.tracking.learning_rate import LearningRates

    network = nn.Dense(4, 2)
    cell = nn.CosineDecayLR(0.01, 0.1, 10)
    rates = LearningRates(nn.Momentum(network.trainable_params(), cell, 0.9))
    for step in (1, 2, 7):
        assert rates.at(step) == pytest.approx(
            float(cell(ms.Tensor(step - 1, ms.int32)).asnumpy()), rel=1e-6
        )
    table = nn.cosine_decay_lr(0.0, 0.1, 20, 5, 4)
    rates = LearningRates(nn.Momentum(network.trainable_params(), table, 0.9))
    assert [rates.at(s) for s in range(1, 21)] == pytest.approx(table, rel=1e-6)
    groups = [{"params": [network.weight], "lr": 0.3}, {"params": [network.bias]}]
    assert LearningRates(nn.Momentum(groups, 0.1, 0.9)).at(5) == pytest.approx(0.3)


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_the_stored_norm_is_of_the_unscaled_gradients():
    import mindspore as ms
    from mindspore import nn

    from ms_exp.train.grad_norm import store_grad_norm

    ms.set_context(mode=ms.GRAPH_MODE)
    rng = np.random.RandomState(0)
    x = ms.Tensor(rng.randn(8, 8).astype(np.float32))
    y = ms.Tensor((np.arange(8) % 4).astype(np.int32))
    for scale in (1.0, 1024.0):
        ms.set_seed(0)
        network = nn.Dense(8, 4)
        loss = nn.WithLossCell(network, nn.SoftmaxCrossEntropyWithLogits(True, "mean"))
        grads = ms.grad(loss, None, network.trainable_params())(x, y)
        expected = np.sqrt(sum(float((g.asnumpy() ** 2).sum()) for g in grads))
        optimizer = nn.Momentum(network.trainable_params(), 0.1, 0.9, loss_scale=scale)
        probe = store_grad_norm(optimizer)
        # As Model's TrainOneStepCell with a fixed scale and no overflow check: the
        # gradients arrive scaled, the optimizer divides them.
        step = nn.TrainOneStepCell(loss, optimizer, sens=scale)
        step(x, y)
        assert probe.read() == pytest.approx(expected, rel=1e-5)
        assert "grad_norm" not in [p.name for p in step.get_parameters()]


def test_model_loss_scale_outputs_are_read_as_overflow_and_scale():
    import mindspore as ms

    from ms_exp.tracking.callback import loss_scale_state

    class Cell:
        scale_sense = 1.0

    outputs = (ms.Tensor(1.0), ms.Tensor(True), ms.Tensor(512.0))
    params = {"train_network": Cell(), "net_outputs": outputs}
    assert loss_scale_state(type("P", (dict,), {"__getattr__": dict.get})(params)) == (
        outputs[1],
        outputs[2],
    )
    params = {"train_network": object(), "net_outputs": outputs}
    assert loss_scale_state(type("P", (dict,), {"__getattr__": dict.get})(params)) is None


LR_CASES = [("model", "constant"), ("model", "linear"), ("functional", "cosine")]


def lr_job(loop, schedule):
    warmup = 0 if schedule == "constant" else 1
    decay = 2 if schedule == "constant" else 3  # a decaying schedule stops partway
    optimizer = f"schedule: {schedule}, warmup_epochs: {warmup}"
    if decay != 2:
        optimizer += f", decay_epochs: {decay}"
    return (
        f"trainer: {{epochs: 2, loop: {loop}}}\noptimizer: {{{optimizer}}}\n"
        "tracking: {log_every_n_steps: 3, log_grad_norm: true}\n"
    )


JOBS = {
    **{f"{loop}_{schedule}": lr_job(loop, schedule) for loop, schedule in LR_CASES},
    # float16 gradients of a loss scaled by 2**30 overflow until the scale has dropped.
    "overflow": (
        "trainer: {epochs: 1, loop: functional}\n"
        f"amp: {{level: O3, loss_scale: dynamic, loss_scale_value: {2**30}}}\n"
        "tracking: {log_grad_norm: true}\n"
    ),
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The jobs of this file: one sweep, one process (tests/training_jobs.py)."""
    return experiment_sweep(tmp_path_factory.mktemp("curves"), JOBS, *FAST)


@pytest.mark.e2e
@pytest.mark.parametrize("loop,schedule", LR_CASES)
def test_train_lr_is_the_rate_each_step_used(sweep, loop, schedule):
    result = sweep[f"{loop}_{schedule}"]
    params = result.run.data.params
    assert (params["trainer.loop"], params["optimizer.schedule"]) == (loop, schedule)
    warmup = 0 if schedule == "constant" else 1
    decay = 2 if schedule == "constant" else 3  # a decaying schedule stops partway
    expected = zoo_rates(schedule, 0.05, warmup * STEPS, decay * STEPS)
    lr = history(result, "train/lr")
    assert sorted(lr) == list(range(3, 2 * STEPS + 1, 3))
    for step, value in lr.items():
        assert value == pytest.approx(expected[step - 1], rel=1e-5, abs=1e-9), step
    norms = history(result, "train/grad_norm")
    assert sorted(norms) == sorted(lr)
    assert all(0 < v < 100 for v in norms.values())
    # No loss scale, nothing checked: no loss-scale curves.
    assert not history(result, "train/loss_scale")


@pytest.mark.e2e
def test_overflows_halve_the_logged_scale_and_are_counted(sweep):
    result = sweep["overflow"]
    scale = history(result, "train/loss_scale")
    overflow = history(result, "train/overflow")
    count = history(result, "train/overflow_steps")
    norms = history(result, "train/grad_norm")
    assert sorted(scale) == sorted(overflow) == sorted(count) == list(range(1, STEPS + 1))
    assert scale[1] == 2**30 and overflow[1] == 1  # the first step's own scale
    assert 0 < count[STEPS] < STEPS
    for step in range(1, STEPS):
        halved = scale[step + 1] == scale[step] / 2
        assert halved == bool(overflow[step]), step
        assert halved or scale[step + 1] == scale[step]
        assert count[step] == sum(overflow[s] for s in range(1, step + 1))
    # A skipped step has no gradient norm.
    assert sorted(norms) == [s for s in range(1, STEPS + 1) if not overflow[s]]
