"""Checkpoints carry MindSpore's CRC (.ckpt) or a recorded SHA-256 (.safetensors) and are
checked when read; a damaged file is refused by name; the retention never removes the last
good checkpoint."""

import hashlib
import shutil
import threading
import time
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from conftest import main_in_process, migrated_store
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import Callback, CheckpointConfig, Model, ModelCheckpoint, RunContext
from mindspore.train.callback import _InternalCallbackParam
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ms_exp.checkpoint.callbacks import StepsDone, create_checkpoint_callbacks, record_breakpoints
from ms_exp.checkpoint.files import (
    DamagedCheckpoint,
    breakpoint_record,
    checkpoint_format,
    digest_file,
    last_checkpoint,
    load_verified,
    save_weights,
)
from ms_exp.preflight.compose import compose_config, hydra_config_of


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


SAFETENSORS_DAMAGED = (
    "is damaged (truncated or corrupt: its SHA-256 differs from the one recorded in "
    "{name}.sha256 when it was written)"
)


@pytest.mark.parametrize("suffix", [".ckpt", ".safetensors"])
def test_a_flipped_byte_is_caught_by_the_crc_and_named(tmp_path, suffix):
    path = tmp_path / f"net{suffix}"
    save_weights(nn.Dense(64, 64), path)
    _flip_a_byte(path)
    # Without the CRC (or the digest), MindSpore reads the damaged weights as if nothing
    # happened; for safetensors it refuses crc_check=True on save and only warns on load.
    assert set(ms.load_checkpoint(str(path), format=checkpoint_format(path))) == {"weight", "bias"}
    with pytest.raises(DamagedCheckpoint, match=f"checkpoint {path} is damaged") as refused:
        load_verified(path)
    if suffix == ".safetensors":
        assert str(refused.value) == f"checkpoint {path} " + SAFETENSORS_DAMAGED.format(
            name=path.name
        )


@pytest.mark.parametrize("suffix", [".ckpt", ".safetensors"])
def test_a_truncated_file_is_named(tmp_path, suffix):
    path = tmp_path / f"net{suffix}"
    save_weights(nn.Dense(64, 64), path)
    whole = path.read_bytes()
    path.write_bytes(whole[:1000])
    with pytest.raises(DamagedCheckpoint, match=f"checkpoint {path} is damaged"):
        load_verified(path)
    if suffix == ".safetensors":
        # A file without a recorded digest (written elsewhere) still gets MindSpore's parse,
        # which refuses a truncated one.
        digest_file(path).unlink()
        with pytest.raises(DamagedCheckpoint, match="MindSpore's parse failed: Fail to parse"):
            load_verified(path)
        path.write_bytes(whole)
        assert set(load_verified(path)) == {"weight", "bias"}


def _run_context(network, step):
    params = _InternalCallbackParam()
    params.train_network = network
    params.cur_step_num, params.cur_epoch_num, params.batch_num = step, 1, 100
    return RunContext(params)


def _checkpoint_group(keep: int, fmt: str = "ckpt"):
    return OmegaConf.create(
        {
            "save": True,
            "integrated_save": True,
            "prefix": "checkpoint",
            "save_checkpoint_steps": 1,
            "keep_checkpoint_max": keep,
            "keep_best": False,
            "format": fmt,
        }
    )


def _failing_save(*args, **kwargs):
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_a_failed_save_never_costs_the_last_good_checkpoint(tmp_path, monkeypatch, fmt):
    network = nn.Dense(8, 8)
    (ours,) = create_checkpoint_callbacks(
        _checkpoint_group(keep=1, fmt=fmt),
        network,
        tmp_path / "ours",
        steps_per_epoch=100,
        parallel_mode="stand_alone",
    )
    theirs = ModelCheckpoint(
        "checkpoint",
        str(tmp_path / "theirs"),
        CheckpointConfig(save_checkpoint_steps=1, keep_checkpoint_max=1),
    )
    ours.on_train_step_end(_run_context(network, 1))
    theirs.step_end(_run_context(network, 1))
    import mindspore.train.callback._checkpoint as mindspore_checkpoint

    monkeypatch.setattr(mindspore_checkpoint, "save_checkpoint", _failing_save)
    with pytest.raises(OSError):
        ours.on_train_step_end(_run_context(network, 2))
    with pytest.raises(OSError):
        theirs.step_end(_run_context(network, 2))
    # MindSpore's ModelCheckpoint removes the oldest file before it writes the next one.
    assert list((tmp_path / "theirs").glob("*.ckpt")) == []
    (kept,) = (tmp_path / "ours").glob(f"*.{fmt}")
    assert kept.name == f"checkpoint-1_1.{fmt}"
    assert int(load_verified(kept)["step_num"].asnumpy()) == 1
    monkeypatch.undo()
    ours.on_train_step_end(_run_context(network, 3))  # the next good one replaces it
    # A safetensors checkpoint's digest is written with it and removed with it.
    expected = {f"checkpoint-1_3.{fmt}"} | (
        {"checkpoint-1_3.safetensors.sha256"} if fmt == "safetensors" else set()
    )
    assert {p.name for p in (tmp_path / "ours").iterdir()} == expected


def test_an_async_save_killed_mid_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """checkpoint.async_save: MindSpore's thread writes <name>.tmp and renames it; the older
    checkpoints are removed only once the new file is there whole."""
    network = nn.Dense(8, 8)
    group = _checkpoint_group(keep=1, fmt="safetensors")
    group.async_save = True
    (ours,) = create_checkpoint_callbacks(
        group, network, tmp_path, steps_per_epoch=100, parallel_mode="stand_alone"
    )
    ours.on_train_step_end(_run_context(network, 1))
    import mindspore.train.serialization as serialization

    writing, killed = threading.Event(), threading.Event()

    def killed_mid_write(name, *args, **kwargs):
        Path(name).with_suffix(".tmp").write_bytes(b"half a checkpoint")
        writing.set()
        killed.wait(60)  # the writer dies here: no rename

    monkeypatch.setattr(serialization, "_exec_save", killed_mid_write)
    ours.on_train_step_end(_run_context(network, 2))
    assert writing.wait(60)
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "checkpoint-1_1.safetensors",
        "checkpoint-1_1.safetensors.sha256",
        "checkpoint-1_2.tmp",
    }
    killed.set()
    ours.on_train_step_end(_run_context(network, 3))  # a step goes by, nothing saved
    monkeypatch.undo()
    assert last_checkpoint(tmp_path, "checkpoint").name == "checkpoint-1_1.safetensors"
    assert int(load_verified(tmp_path / "checkpoint-1_1.safetensors")["step_num"].asnumpy()) == 1
    ours.on_train_end(_run_context(network, 4))  # a save that ends whole replaces it
    assert {p.name for p in tmp_path.glob("checkpoint-*.safetensors*")} == {
        "checkpoint-1_4.safetensors",
        "checkpoint-1_4.safetensors.sha256",
    }
    assert int(load_verified(tmp_path / "checkpoint-1_4.safetensors")["step_num"].asnumpy()) == 4


class _FailsAtStep(Callback):
    """Raises as step ``step`` begins, before its update: what an error inside the step
    leaves."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_step_begin(self, run_context):
        if run_context.original_args().cur_step_num == self.step:
            raise RuntimeError("the device failed")


def test_exception_save_leaves_a_breakpoint_file_with_the_step_its_weights_are_at(tmp_path):
    """checkpoint.exception_save reaches CheckpointConfig; when training raises, MindSpore's
    Model writes <prefix>-<epoch>_<step>_breakpoint.ckpt without a CRC, named after the step
    it had begun, and ms_exp records beside it the step its weights are at."""
    network = nn.Dense(4, 2)
    group = _checkpoint_group(keep=2)
    group.save_checkpoint_steps = 5
    group.exception_save = True
    (ours,) = create_checkpoint_callbacks(
        group, network, tmp_path, steps_per_epoch=10, parallel_mode="stand_alone"
    )
    assert ours._config.exception_save is True
    rng = np.random.default_rng(0)
    data = ds.NumpySlicesDataset(
        (rng.random((40, 4), np.float32), rng.integers(0, 2, 40).astype(np.int32)),
        ["x", "y"],
        shuffle=False,
    ).batch(4)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(network, loss, nn.SGD(network.trainable_params(), 0.1))
    steps, since = StepsDone(0), time.time()
    with pytest.raises(RuntimeError, match="the device failed"):
        model.train(2, data, callbacks=[steps, ours, _FailsAtStep(13)])
    record_breakpoints(tmp_path, "checkpoint", steps.step, since)
    written = tmp_path / "checkpoint-2_3_breakpoint.ckpt"
    assert written.read_bytes()[-17:-10] != b"crc_num"  # a .ckpt with a CRC ends so
    assert int(ms.load_checkpoint(str(written))["step_num"].asnumpy()) == 3  # in the epoch
    assert breakpoint_record(written) == {
        "step": 12,
        "sha256": hashlib.sha256(written.read_bytes()).hexdigest(),
    }
    # Its weights are step 12's (the optimizer's count says so), the newest numbered
    # checkpoint's step 10's.
    assert int(ms.load_checkpoint(str(written))["global_step"].asnumpy()[0]) == 12
    assert last_checkpoint(tmp_path, "checkpoint").name == "checkpoint-1_10.ckpt"


def _run_directory(run_dir):
    """A run directory as a default job leaves it, as far as ms_exp.eval reads it: its
    config.yaml (composed and resolved as the launching process saves it) and a
    checkpoint."""
    run_dir.mkdir(parents=True)
    cfg = compose_config([], return_hydra_config=True)
    with hydra_config_of(cfg, str(run_dir)):
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        OmegaConf.save(job, run_dir / "config.yaml", resolve=True)
    checkpoint = run_dir / "checkpoints/rank_0/checkpoint-1_44.ckpt"
    checkpoint.parent.mkdir(parents=True)
    ms.save_checkpoint(nn.Dense(8, 8), str(checkpoint), crc_check=True)
    return checkpoint


def test_evaluating_a_damaged_checkpoint_is_refused_in_one_line(workdir):
    checkpoint = _run_directory(workdir / "outputs" / "run")
    shutil.copyfile(migrated_store(), workdir / "mlflow.db")
    _flip_a_byte(checkpoint)
    evaluation = main_in_process("ms_exp.eval", ["--checkpoint", str(checkpoint)], workdir)
    assert evaluation.rc == 2
    assert evaluation.stderr.strip().splitlines()[-1] == (
        f"ms_exp.eval: error: checkpoint {checkpoint} is damaged (truncated or corrupt: "
        "MindSpore's CRC check or parse failed: Failed to read the checkpoint file "
        f"{checkpoint}. May not have permission to read it, please check the correct of the "
        "file.)"
    )
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    assert client.search_runs(experiments) == []  # no evaluation run was opened for it
