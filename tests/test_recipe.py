"""The model zoo ResNet recipe: label-smoothing cross entropy,
parameter groups, per-step learning rates, all_reduce_fusion_config, checkpoint intervals,
and stage one of the dimension-reduction tutorial as ``+experiment=resnet50_imagenet_stage_one``.

The pieces are checked directly against the model zoo's formulas (models/official/cv/ResNet:
src/CrossEntropySmooth.py, src/util.py init_group_params, src/lr_generator.py get_lr); the
preset once, tiny, through the command line.
"""

import math

import mindspore as ms
import numpy as np
import pytest
from conftest import train
from datafiles import write_image_folder

from ms_exp.preflight.compose import compose_config

PRESET = "+experiment=resnet50_imagenet_stage_one"


def zoo_get_lr(lr_init, lr_end, lr_max, warmup_epochs, total_epochs, steps_per_epoch, mode):
    """The model zoo ResNet's ``get_lr`` (src/lr_generator.py, linear and cosine modes),
    written out here as the oracle."""
    total, warmup = steps_per_epoch * total_epochs, steps_per_epoch * warmup_epochs
    rates = []
    for i in range(total):
        if mode == "linear":
            if i < warmup:
                lr = lr_init + (lr_max - lr_init) * i / warmup
            else:
                lr = lr_max - (lr_max - lr_end) * (i - warmup) / (total - warmup)
        elif i < warmup:
            lr = lr_init + (lr_max - lr_init) / warmup * (i + 1)
        else:
            decay = total - warmup
            linear_decay = (total - i) / decay
            cosine_decay = 0.5 * (1 + math.cos(math.pi * 2 * 0.47 * i / decay))
            lr = lr_max * (linear_decay * cosine_decay + 0.00001)
        rates.append(lr)
    return np.array(rates, np.float32)


def rates(*overrides, steps_per_epoch=10, epochs=4):
    from ms_exp.train.optimizer import learning_rates

    cfg = compose_config([f"trainer.epochs={epochs}", *overrides])
    return np.array(learning_rates(cfg.optimizer, steps_per_epoch, epochs))


# --- learning rates ---------------------------------------------------------------------


def test_tutorial_schedule_is_the_model_zoo_get_lr():
    # get_lr(lr_init=0, lr_end=0.0, lr_max=0.8, warmup_epochs=5, total_epochs=90,
    #        steps_per_epoch=625, lr_decay_mode="linear"), trained for 70 of the 90 epochs.
    lr = rates(PRESET, steps_per_epoch=625, epochs=70)
    assert len(lr) == 90 * 625
    warmup, total = 5 * 625, 90 * 625
    assert lr[0] == 0.0 and lr[1000] == pytest.approx(0.8 * 1000 / warmup)
    assert lr[warmup] == pytest.approx(0.8)
    last_trained = 70 * 625 - 1
    assert lr[last_trained] == pytest.approx(0.8 * (1 - (last_trained - warmup) / (total - warmup)))
    assert lr[-1] == pytest.approx(0.8 / (total - warmup))
    np.testing.assert_allclose(lr, zoo_get_lr(0, 0.0, 0.8, 5, 90, 625, "linear"), rtol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "cosine"])
def test_schedules_match_the_model_zoo_with_warmup_start_and_end(mode):
    end = 0.0001 if mode == "linear" else 0.0  # the zoo's cosine has no end value
    lr = rates(
        f"optimizer.schedule={mode}",
        "optimizer.lr=0.1",
        "optimizer.lr_init=0.01",
        f"optimizer.min_lr={end}",
        "optimizer.warmup_epochs=2",
        "optimizer.decay_epochs=5",
        steps_per_epoch=7,
        epochs=4,
    )
    np.testing.assert_allclose(lr, zoo_get_lr(0.01, end, 0.1, 2, 5, 7, mode), rtol=1e-6)


def test_schedule_without_decay_epochs_spans_training_and_warms_up_from_min_lr():
    linear = rates(
        "optimizer.schedule=linear",
        "optimizer.lr=0.8",
        "optimizer.min_lr=0.08",
        "optimizer.warmup_epochs=1",
    )
    np.testing.assert_allclose(linear, zoo_get_lr(0.08, 0.08, 0.8, 1, 4, 10, "linear"))
    cosine = rates("optimizer.schedule=cosine", "optimizer.lr=0.8", "optimizer.warmup_epochs=1")
    assert cosine[0] == pytest.approx(0.08) and cosine[9] == pytest.approx(0.8)
    # Step 10 of 40, 30 decaying: the linear factor is 1 and the cosine one 0.777.
    assert cosine[10] == pytest.approx(0.8 * (0.5 * (1 + math.cos(math.pi * 0.94 / 3)) + 1e-5))
    last = 1 / 30 * 0.5 * (1 + math.cos(math.pi * 0.94 * 39 / 30))
    assert cosine[-1] == pytest.approx(0.8 * (last + 1e-5))


# --- loss ---------------------------------------------------------------------------------


def smoothed_cross_entropy(logits, labels, smooth, classes):
    """CrossEntropySmooth's value in numpy: one-hot 1 - smooth / smooth / (classes - 1),
    softmax cross entropy, mean over the batch."""
    target = np.full(logits.shape, smooth / (classes - 1))
    target[np.arange(len(labels)), labels] = 1 - smooth
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(np.mean(-(target * log_softmax).sum(axis=1)))


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_cross_entropy_smooth_is_the_model_zoo_loss():
    from ms_exp.train.losses import create_loss

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 5)).astype(np.float32) * 3
    labels = np.array([0, 4, 2, 2, 1, 3], np.int32)
    cfg = compose_config(["loss.name=cross_entropy_smooth", "loss.label_smoothing=0.1"]).loss
    loss = create_loss(cfg, num_classes=5)
    value = float(loss(ms.Tensor(logits), ms.Tensor(labels)).asnumpy())
    assert value == pytest.approx(smoothed_cross_entropy(logits, labels, 0.1, 5), rel=1e-5)
    # Not MindSpore's CrossEntropyLoss(label_smoothing=0.1), which spreads 0.1 / 5 over all.
    ms_smoothed = compose_config(["loss.label_smoothing=0.1"]).loss
    other = float(create_loss(ms_smoothed, 5)(ms.Tensor(logits), ms.Tensor(labels)).asnumpy())
    assert abs(other - value) > 1e-3
    # No smoothing: plain cross entropy.
    plain = create_loss(compose_config(["loss.name=cross_entropy_smooth"]).loss, 5)
    assert float(plain(ms.Tensor(logits), ms.Tensor(labels)).asnumpy()) == pytest.approx(
        smoothed_cross_entropy(logits, labels, 0.0, 5), rel=1e-5
    )


# --- parameter groups and loss scale ------------------------------------------------------


@pytest.mark.parametrize("name", ["momentum", "sgd", "adam"])
def test_group_params_keep_weight_decay_off_batch_norm_and_biases(name):
    from ms_exp.models.resnet import create_resnet
    from ms_exp.train.optimizer import create_optimizer

    network = create_resnet(18, num_classes=3, width=0.125)
    cfg = compose_config(
        [f"optimizer.name={name}", "optimizer.weight_decay=0.0001", "optimizer.group_params=true"]
    ).optimizer
    optimizer = create_optimizer(cfg, network, steps_per_epoch=10, epochs=1, loss_scale=1024.0)
    names = [p.name for p in optimizer.parameters]
    assert names == [p.name for p in network.trainable_params()]  # order_params
    # MindSpore stores the decay multiplied by the loss scale it divides gradients by.
    decay = {
        p.name: float(d.asnumpy()) / 1024
        for p, d in zip(optimizer.parameters, optimizer.weight_decay)
    }
    no_decay = {n for n in names if n.endswith((".gamma", ".beta", ".bias"))}
    assert "bn1.gamma" in no_decay and "end_point.bias" in no_decay
    assert {n for n, d in decay.items() if d == 0} == no_decay
    assert {n for n, d in decay.items() if d == pytest.approx(0.0001)} == set(names) - no_decay
    assert "conv1.weight" not in no_decay and "end_point.weight" not in no_decay
    assert optimizer.loss_scale == 1024.0

    ungrouped = create_optimizer(
        compose_config(["optimizer.weight_decay=0.0001"]).optimizer,
        network,
        steps_per_epoch=10,
        epochs=1,
    )
    assert not ungrouped.is_group and ungrouped.loss_scale == 1.0


# --- checkpoint interval and data parallel context ---------------------------------------


def test_checkpoints_every_n_epochs_unless_steps_are_given():
    from ms_exp.checkpoint.callbacks import save_interval_steps

    assert save_interval_steps(compose_config([]).checkpoint, 625) == 625
    assert save_interval_steps(compose_config([PRESET]).checkpoint, 625) == 6250
    steps = compose_config(["checkpoint.save_checkpoint_steps=100"]).checkpoint
    assert save_interval_steps(steps, 625) == 100


def test_the_checks_accept_increasing_fusion_indices_and_refuse_others():
    from ms_exp.config.errors import ConfigError
    from ms_exp.parallel.checks import validate_parallel

    for fusion in ([85, 160], [1], []):
        validate_parallel(
            compose_config(
                [
                    "parallel=data",
                    "parallel.device_num=8",
                    f"parallel.all_reduce_fusion_config=[{','.join(map(str, fusion))}]",
                ]
            ).parallel
        )
    for fusion in ("[0,20]", "[20,20]", "[35,20]"):
        with pytest.raises(ConfigError, match="increasing positive gradient indices"):
            validate_parallel(
                compose_config(
                    ["parallel=data", f"parallel.all_reduce_fusion_config={fusion}"]
                ).parallel
            )


def test_tutorial_on_eight_devices_passes_the_fusion_indices_to_mindspore():
    from ms_exp.train.context import auto_parallel_context

    cfg = compose_config(
        [
            PRESET,
            "parallel=data",
            "parallel.device_num=8",
            "parallel.all_reduce_fusion_config=[85,160]",
        ]
    )
    context = auto_parallel_context(cfg.parallel, cfg.checkpoint.strategy, "Ascend")
    assert context["all_reduce_fusion_config"] == [85, 160]
    try:
        ms.set_auto_parallel_context(**context)
        assert ms.get_auto_parallel_context("all_reduce_fusion_config") == [85, 160]
        assert ms.get_auto_parallel_context("parallel_mode") == "data_parallel"
    finally:
        ms.reset_auto_parallel_context()


# --- the preset ---------------------------------------------------------------------------


def test_stage_one_preset_is_the_tutorial_recipe():
    cfg = compose_config([PRESET], return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    assert (choices["dataset"], choices["model"], choices["parallel"]) == (
        "imagenet",
        "resnet",
        "stand_alone",
    )
    assert (cfg.model.depth, cfg.dataset.batch_size, cfg.trainer.epochs) == (50, 256, 70)
    opt = cfg.optimizer
    assert (opt.name.value, opt.momentum, opt.lr, opt.lr_init, opt.min_lr) == (
        "momentum",
        0.9,
        0.8,
        0.0,
        0.0,
    )
    assert (opt.schedule.value, opt.warmup_epochs, opt.decay_epochs) == ("linear", 5, 90)
    assert (opt.weight_decay, opt.group_params) == (0.0001, True)
    assert (cfg.loss.name.value, cfg.loss.label_smoothing) == ("cross_entropy_smooth", 0.1)
    amp = cfg.amp
    assert (
        amp.level.value,
        amp.keep_batchnorm_fp32,
        amp.loss_scale.value,
        amp.loss_scale_value,
        amp.drop_overflow_update,
    ) == ("O2", False, "fixed", 1024, False)
    assert (cfg.trainer.dataset_sink_mode, cfg.trainer.sink_size) == (True, -1)
    ckpt = cfg.checkpoint
    assert (ckpt.save_checkpoint_steps, ckpt.save_checkpoint_epochs, ckpt.keep_checkpoint_max) == (
        None,
        10,
        10,
    )
    assert (ckpt.snapshots.per_epoch, ckpt.snapshots.start_epoch, ckpt.snapshots.keep_max) == (
        1,
        1,
        40,
    )


@pytest.mark.e2e
def test_stage_one_preset_trains_tiny_on_cpu(tmp_path):
    """The preset as a user runs it, shrunk: a ResNet-50 of 1/8 width on 32x32 images of an
    image folder, 3 epochs of 3 steps, a checkpoint every 2 epochs."""
    images = write_image_folder(tmp_path / "images", per_class_train=4, per_class_val=2, size=32)
    result = train(
        tmp_path / "work",
        PRESET,
        f"dataset.path={images}",
        "model.width=0.125",
        "dataset.image_size=32",
        "dataset.batch_size=4",
        "trainer.epochs=3",
        "checkpoint.save_checkpoint_epochs=2",
    )
    assert "3 steps per epoch" in result.stdout
    assert "amp level O2, loss scale fixed 1024" in result.stdout
    params = result.store.get_run(result.run_id).data.params
    assert {
        key: params[key]
        for key in (
            "model.depth",
            "dataset.batch_size",
            "optimizer.name",
            "optimizer.lr",
            "optimizer.schedule",
            "optimizer.warmup_epochs",
            "optimizer.decay_epochs",
            "optimizer.group_params",
            "loss.name",
            "loss.label_smoothing",
            "amp.level",
            "amp.keep_batchnorm_fp32",
            "amp.loss_scale",
            "amp.loss_scale_value",
            "amp.drop_overflow_update",
        )
    } == {
        "model.depth": "50",
        "dataset.batch_size": "4",
        "optimizer.name": "momentum",
        "optimizer.lr": "0.8",
        "optimizer.schedule": "linear",
        "optimizer.warmup_epochs": "5",
        "optimizer.decay_epochs": "90",
        "optimizer.group_params": "True",
        "loss.name": "cross_entropy_smooth",
        "loss.label_smoothing": "0.1",
        "amp.level": "O2",
        "amp.keep_batchnorm_fp32": "False",
        "amp.loss_scale": "fixed",
        "amp.loss_scale_value": "1024.0",
        "amp.drop_overflow_update": "False",
    }
    losses = result.store.get_metric_history(result.run_id, "train/loss")
    assert len(losses) == 9 and all(math.isfinite(m.value) for m in losses)

    # Full checkpoints every save_checkpoint_epochs and at the end, named as the tutorial's
    # ModelCheckpoint(prefix="resnet"); weight-only snapshots every epoch.
    folder = result.run_dir / "checkpoints" / "rank_0"
    assert sorted(p.name for p in folder.glob("resnet-*.ckpt")) == [
        "resnet-2_3.ckpt",
        "resnet-3_3.ckpt",
    ]
    snapshots = sorted(p.name for p in (result.run_dir / "snapshots").glob("*.ckpt"))
    assert snapshots == ["snapshot-1_3.ckpt", "snapshot-2_3.ckpt", "snapshot-3_3.ckpt"]
    # The learning rate of every step, as the optimizer reads it: the tutorial's get_lr for
    # 3 steps per epoch (90 epochs of them, of which 9 steps were trained).
    saved = ms.load_checkpoint(str(folder / "resnet-3_3.ckpt"))
    assert saved["global_step"].asnumpy().item() == 9
    np.testing.assert_allclose(
        saved["learning_rate"].asnumpy(), zoo_get_lr(0, 0.0, 0.8, 5, 90, 3, "linear"), rtol=1e-6
    )
    snapshot = ms.load_checkpoint(str(result.run_dir / "snapshots" / snapshots[-1]))
    assert "learning_rate" not in snapshot and "moments.conv1.weight" not in snapshot
