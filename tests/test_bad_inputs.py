"""The bad-input corpus: every kind of wrong command line, refused the same way.

Each case calls ``python -m ms_exp.run``'s ``main()`` in-process, in an empty working
directory, and checks what a user sees and what is left behind:

- exit status 2 and exactly one stderr line, ``ms_exp: error: `` and then the whole
  expected message (compared exactly, not as a fragment): the key, the value and what is
  allowed;
- nothing written: no ``outputs/`` or ``multirun/`` folder, no ``mlflow.db``, no
  ``mlruns/``; and, run again over a working directory that already holds an MLflow store
  with one finished run, that store byte for byte as it was (no run, experiment or tag
  added) and still one run in it.

Data files the cases read are real formats, broken on purpose (an idx file with the wrong
magic number, a MindRecord file that is not one, ...), written outside the working
directory. Placeholders in arguments and messages: ``<data>`` is the case's data folder,
``<cwd>`` the working directory, ``<port>`` a port a test socket is listening on.
"""

import json
import multiprocessing
import os
import shutil
import socket
import sqlite3
import struct
import subprocess
import sys
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest
from datafiles import (
    IDX_IMAGES_MAGIC,
    IDX_LABELS_MAGIC,
    malformed_criteo_line,
    write_image_folder,
    write_mnist,
)

from ms_exp.data.criteo_sample import sample_lines
from ms_exp.parallel import checks as parallel_checks
from ms_exp.preflight import memory
from ms_exp.run import main

ERROR = "ms_exp: error: "
# A run id of the right shape that no store holds.
UNKNOWN_RUN = "0123456789abcdef0123456789abcdef"
CRITEO = (
    "dataset=criteo",
    "model=wide_deep",
    "dataset.path=<data>/criteo",
    "dataset.batch_size=10",
)
# What boost=dim_reduce requires of the optimizer (AutoBoost trains with SGD(lr=1)).
DIM_REDUCE = ("boost=dim_reduce", "optimizer.name=sgd", "optimizer.lr=1", "optimizer.momentum=0")
MIB = 2**20
# A port the cases name explicitly; it counts as free (other jobs here may hold it).
NAMED_MASTER_PORT = 8118


@dataclass
class Scene:
    """What a case's setup may use: its data folder, pytest's monkeypatch, a stack for
    resources to release after the call, and extra placeholders for argv and message."""

    data: Path
    cwd: Path
    monkeypatch: pytest.MonkeyPatch
    stack: ExitStack
    placeholders: Dict[str, str] = field(default_factory=dict)

    def fill(self, text: str) -> str:
        for name, value in {
            "<data>": str(self.data),
            "<cwd>": str(self.cwd),
            "<cpus>": str(multiprocessing.cpu_count()),
            **self.placeholders,
        }.items():
            text = text.replace(name, value)
        return text


@dataclass(frozen=True)
class Bad:
    argv: Tuple[str, ...]
    message: str  # the line after "ms_exp: error: "
    setup: Optional[Callable[[Scene], None]] = None
    # Where the working directory starts: False, empty; True, holding an MLflow store with
    # one finished run (for cases that read a store); BOTH, each way in turn (a sample of
    # every kind of case, to show a refusal never writes to an existing store).
    store: object = False


BOTH = "both"


def bad(*argv: str, message: str, setup=None, store=False) -> Bad:
    return Bad(tuple(argv), message, setup, store)


# --- data the cases read ----------------------------------------------------------------


def mnist(scene: Scene) -> Path:
    return write_mnist(scene.data / "mnist", train=20, test=10)


def mnist_missing_file(scene: Scene) -> None:
    (mnist(scene) / "t10k-labels-idx1-ubyte").unlink()


def mnist_wrong_magic(scene: Scene) -> None:
    images = mnist(scene) / "train-images-idx3-ubyte"
    with open(images, "r+b") as f:
        f.write(struct.pack(">I", IDX_LABELS_MAGIC))  # a labels file's magic


def mnist_truncated(scene: Scene) -> None:
    images = mnist(scene) / "t10k-images-idx3-ubyte"
    with open(images, "r+b") as f:
        f.truncate(images.stat().st_size - 100)  # a download cut short


def mnist_too_few_labels(scene: Scene) -> None:
    labels = mnist(scene) / "train-labels-idx1-ubyte"
    labels.write_bytes(struct.pack(">II", IDX_LABELS_MAGIC, 19) + bytes(19))


def mnist_wrong_size(scene: Scene) -> None:
    images = mnist(scene) / "train-images-idx3-ubyte"
    images.write_bytes(struct.pack(">IIII", IDX_IMAGES_MAGIC, 20, 32, 32) + bytes(20 * 32 * 32))


def images(scene: Scene) -> Path:
    return write_image_folder(scene.data / "images", per_class_train=2, per_class_val=1, size=8)


def images_without_classes(scene: Scene) -> None:
    root = images(scene)
    train = root / "train"
    for image in train.rglob("*.JPEG"):
        image.rename(train / image.name)  # flattened: no class folders left
    for folder in [p for p in train.iterdir() if p.is_dir()]:
        folder.rmdir()


def images_without_images(scene: Scene) -> None:
    root = images(scene)
    for image in (root / "val").rglob("*.JPEG"):
        image.with_suffix(".txt").write_text("not an image\n")
        image.unlink()


def images_not_images(scene: Scene) -> None:
    first, *others = sorted((images(scene) / "train" / "dog").glob("*.JPEG"))
    for image in others:
        image.unlink()
    first.write_text("<html>404 Not Found</html>\n")  # a failed download, saved as JPEG


# The converter's output, as far as preflight reads it: criteo_meta.json and two MindRecord
# files with their indexes (the header only; the pages after it stay a hole).
CRITEO_META = {
    "format": 2,
    "samples_per_record": 10,
    "field_size": 39,
    "vocab_size": 46,
    "train_samples": 270,
    "eval_samples": 30,
    "train_records": 27,
    "eval_records": 3,
}
MINDRECORD_HEADER_SIZE = 4096


def write_mindrecord_header(path: Path, samples_per_record: int = 10) -> None:
    schema = {
        name: {"shape": [samples_per_record, width], "type": kind}
        for name, width, kind in (
            ("feat_ids", 39, "int32"),
            ("feat_vals", 39, "float32"),
            ("label", 1, "float32"),
        )
    }
    header = json.dumps(
        {
            "header_size": MINDRECORD_HEADER_SIZE,
            "page": [],
            "page_size": 65536,
            "schema": [{"blob_fields": list(schema), "schema": schema}],
            "version": "3.0",
        }
    ).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(MINDRECORD_HEADER_SIZE + 1024)
    Path(f"{path}.db").write_bytes(b"SQLite format 3\x00" + bytes(100))


def criteo(scene: Scene) -> Path:
    root = scene.data / "criteo"
    root.mkdir()
    (root / "criteo_meta.json").write_text(json.dumps(CRITEO_META))
    for name in ("train.mindrecord", "eval.mindrecord"):
        write_mindrecord_header(root / name)
    return root


def criteo_meta_not_json(scene: Scene) -> None:
    (criteo(scene) / "criteo_meta.json").write_text('{"format": 2, "vocab_size": ')


def criteo_first_format(scene: Scene) -> None:
    (criteo(scene) / "criteo_meta.json").write_text(json.dumps({**CRITEO_META, "format": 1}))


def criteo_not_mindrecord(scene: Scene) -> None:
    # Raw Criteo text renamed: the mistake of skipping the converter.
    (criteo(scene) / "train.mindrecord").write_text("0\t1\t5\t\t2\t68fd1e64\n")


def criteo_without_index(scene: Scene) -> None:
    (criteo(scene) / "eval.mindrecord.db").unlink()


def criteo_truncated(scene: Scene) -> None:
    with open(criteo(scene) / "train.mindrecord", "r+b") as f:
        f.truncate(2000)  # a copy cut short, inside the header region


def criteo_other_packing(scene: Scene) -> None:
    write_mindrecord_header(criteo(scene) / "eval.mindrecord", samples_per_record=1)


def file_in_the_way(scene: Scene) -> None:
    (scene.data / "a_file").write_text("not a folder\n")


def busy_port(scene: Scene) -> None:
    listener = scene.stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    scene.placeholders["<port>"] = str(listener.getsockname()[1])


# 20 names of 200 bytes: each within NAME_MAX, 4019 bytes in all.
DEEP_FOLDER = "/".join(["y" * 200] * 20)


def filesystem_limits(scene: Scene) -> None:
    """The limits of the working directory's filesystem, and the absolute length of
    DEEP_FOLDER below it, as placeholders."""
    path_max = os.pathconf(scene.cwd, "PC_PATH_MAX")
    scene.placeholders.update(
        {
            "<name_max>": str(os.pathconf(scene.cwd, "PC_NAME_MAX")),
            "<path_max>": str(path_max),
            "<path_limit>": str(path_max - 200),
            "<deep_size>": str(len(os.fsencode(str(scene.cwd / DEEP_FOLDER)))),
        }
    )


def full_disk(scene: Scene) -> None:
    """The filesystem under ``<data>/full`` has 1 MiB free; elsewhere the real numbers."""
    full = scene.data / "full"
    full.mkdir()
    real = shutil.disk_usage

    def disk_usage(path):
        usage = real(path)
        if Path(path) == full or full in Path(path).parents:
            return usage._replace(free=MIB)
        return usage

    scene.monkeypatch.setattr(shutil, "disk_usage", disk_usage)


def rank_table(scene: Scene, devices: int = 2, text: Optional[str] = None) -> Path:
    """``<data>/hccl.json``: a rank table in MindSpore's format (or ``text``)."""
    scene.data.mkdir(parents=True, exist_ok=True)
    path = scene.data / "hccl.json"
    path.write_text(
        text
        if text is not None
        else json.dumps(
            {
                "server_list": [
                    {
                        "device": [
                            {
                                "device_id": str(i),
                                "device_ip": f"192.168.100.{i + 1}",
                                "rank_id": str(i),
                            }
                            for i in range(devices)
                        ]
                    }
                ]
            }
        )
    )
    return path


def rank_table_of_8(scene: Scene) -> None:
    rank_table(scene, devices=8)


def rank_table_not_json(scene: Scene) -> None:
    rank_table(scene, text="server_count: 1\n")


def rank_table_of_another_format(scene: Scene) -> None:
    rank_table(scene, text=json.dumps({"servers": []}))


def rank_table_of_two_servers(scene: Scene) -> None:
    server = {"device": [{"device_id": "0", "device_ip": "192.168.100.1", "rank_id": "0"}]}
    rank_table(scene, text=json.dumps({"server_list": [server, server]}))


def no_mpirun_on_path(scene: Scene) -> None:
    scene.monkeypatch.setenv("PATH", str(scene.data))


def text_file_as_store(scene: Scene) -> None:
    scene.data.mkdir(parents=True, exist_ok=True)
    (scene.data / "notes.db").write_text("meeting notes, not a database\n")


def truncated_store(scene: Scene) -> None:
    """``<data>/mlflow.db``: the first 1000 bytes of a real SQLite database of several pages
    (a copy cut short); the refusal must leave it byte for byte as it was."""
    damaged_store(scene, lambda data: data[:1000])


def store_with_its_schema_zeroed(scene: Scene) -> None:
    """``<data>/mlflow.db`` whole but for its first page after the file's header (SQLite's
    schema), zeros as a disk error leaves them: its header and size look right."""
    damaged_store(scene, lambda data: data[:100] + bytes(4096 - 100) + data[4096:])


def damaged_store(scene: Scene, damage: Callable[[bytes], bytes]) -> None:
    scene.data.mkdir(parents=True, exist_ok=True)
    whole = scene.data / "whole.db"
    with closing(sqlite3.connect(whole)) as connection:
        connection.execute("CREATE TABLE runs (run_uuid TEXT PRIMARY KEY, name TEXT)")
        connection.executemany(
            "INSERT INTO runs VALUES (?, ?)", [(f"{i:032x}", f"run {i}" * 10) for i in range(200)]
        )
        connection.commit()
    store = scene.data / "mlflow.db"
    store.write_bytes(damage(whole.read_bytes()))
    before = store.read_bytes()

    def unchanged() -> None:
        assert store.read_bytes() == before
        assert sorted(p.name for p in scene.data.iterdir()) == ["mlflow.db", "whole.db"]

    scene.stack.callback(unchanged)


def checkpoint_file(path: Path) -> Path:
    """A real MindSpore checkpoint (CRC included) of two small parameters at ``path``."""
    import mindspore as ms
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    ms.save_checkpoint(
        [
            {"name": "w", "data": ms.Tensor(np.ones((64, 64), np.float32))},
            {"name": "b", "data": ms.Tensor(np.zeros(64, np.float32))},
        ],
        str(path),
        crc_check=True,
    )
    return path


def truncated_checkpoint_in_a_run(scene: Scene) -> None:
    """``<data>/run/checkpoints/rank_0/checkpoint-1_44.ckpt``, cut short as by a full disk."""
    checkpoint = checkpoint_file(scene.data / "run/checkpoints/rank_0/checkpoint-1_44.ckpt")
    with open(checkpoint, "r+b") as f:
        f.truncate(checkpoint.stat().st_size // 2)


def checkpoint_outside_a_run(scene: Scene) -> None:
    checkpoint_file(scene.data / "loose.ckpt")


def rank_folder_a_file(scene: Scene) -> None:
    """``<data>/run/checkpoints/rank_0`` is a file where the rank's folder belongs."""
    (scene.data / "run/checkpoints").mkdir(parents=True)
    (scene.data / "run/checkpoints/rank_0").write_text("not a folder\n")


def run_record_of_a_list(scene: Scene) -> None:
    """``<data>/run/run.json`` holding JSON that is not a run record."""
    (scene.data / "run").mkdir(parents=True)
    (scene.data / "run/run.json").write_text("[1, 2]")


def memory_of_16_gib(scene: Scene) -> None:
    """This machine has 16 GiB (the estimates are compared with a fixed figure, so that the
    lines are the same on every machine)."""
    scene.monkeypatch.setattr(memory, "machine_memory", lambda: 16 * 2**30)


LONG_NAME = "x" * 20000


# --- the corpus -------------------------------------------------------------------------

BAD_INPUTS = {
    # --- wrong types
    "batch size not an integer": bad(
        "dataset.batch_size=abc",
        store=BOTH,
        message="dataset.batch_size='abc': not allowed; expected an integer",
    ),
    "learning rate not a number": bad(
        "optimizer.lr=fast", message="optimizer.lr='fast': not allowed; expected a number"
    ),
    "epochs a fraction": bad(
        "trainer.epochs=1.5", message="trainer.epochs=1.5: not allowed; expected an integer"
    ),
    "tracking switch not a boolean": bad(
        "tracking.enabled=maybe",
        message="tracking.enabled='maybe': not allowed; expected true or false",
    ),
    "image shape with a word": bad(
        "dataset=synthetic",
        "dataset.image_shape=[1,x,28]",
        message="dataset.image_shape[1]='x': not allowed; expected an integer",
    ),
    "context mode": bad(
        "trainer.mode=eager",
        message="trainer.mode='eager': not allowed; expected one of graph, pynative",
    ),
    "checkpoint format": bad(
        "checkpoint.format=h5",
        message="checkpoint.format='h5': not allowed; expected one of ckpt, safetensors",
    ),
    "redundancy-free checkpoints without data parallel": bad(
        "checkpoint.remove_redundancy=true",
        message="checkpoint.remove_redundancy=true: not allowed; expected false with "
        "parallel=stand_alone: it drops the copies of the weights that data parallel ranks "
        "hold (use parallel=data)",
    ),
    "breakpoint file with safetensors": bad(
        "checkpoint.exception_save=true",
        "checkpoint.format=safetensors",
        message="checkpoint.exception_save=true: not allowed; expected false with "
        "checkpoint.format=safetensors (MindSpore writes the breakpoint file as .ckpt only: "
        "use checkpoint.format=ckpt)",
    ),
    "breakpoint file with the functional loop": bad(
        "checkpoint.exception_save=true",
        "trainer.loop=functional",
        message="checkpoint.exception_save=true: not allowed; expected false with "
        "trainer.loop=functional (MindSpore's Model writes the breakpoint file, and the "
        "functional loop has none: use trainer.loop=model)",
    ),
    "breakpoint file without checkpoints": bad(
        "checkpoint.exception_save=true",
        "checkpoint.save=false",
        message="checkpoint.exception_save=true: not allowed; expected false with "
        "checkpoint.save=false (MindSpore writes the breakpoint file only beside the "
        "checkpoints ModelCheckpoint saves)",
    ),
    "checkpoint artifacts": bad(
        "tracking.log_checkpoints=some",
        message="tracking.log_checkpoints='some': not allowed; expected one of all, last, none",
    ),
    "device target": bad(
        "trainer.device_target=TPU",
        message="trainer.device_target='TPU': not allowed; expected one of None, CPU, GPU, Ascend",
    ),
    # --- out of range
    "batch size 0": bad(
        "dataset.batch_size=0",
        message="dataset.batch_size=0: not allowed; expected an integer >= 1",
    ),
    "learning rate 0": bad(
        "optimizer.lr=0", store=BOTH, message="optimizer.lr=0.0: not allowed; expected a number > 0"
    ),
    "epochs 0": bad(
        "trainer.epochs=0", message="trainer.epochs=0: not allowed; expected an integer >= 1"
    ),
    "keep no checkpoint": bad(
        "checkpoint.keep_checkpoint_max=0",
        message="checkpoint.keep_checkpoint_max=0: not allowed; expected an integer >= 1",
    ),
    "loss print interval 0": bad(
        "trainer.loss_print_interval=0",
        message="trainer.loss_print_interval=0: not allowed; expected an integer >= 1",
    ),
    "metric log interval 0": bad(
        "tracking.log_every_n_steps=0",
        message="tracking.log_every_n_steps=0: not allowed; expected an integer >= 1",
    ),
    "system metrics interval negative": bad(
        "tracking.system_metrics_interval=-1",
        message="tracking.system_metrics_interval=-1.0: not allowed; expected null (no system "
        "metrics) or a number of seconds > 0",
    ),
    "device id negative": bad(
        "trainer.device_id=-1",
        message="trainer.device_id=-1: not allowed; expected an integer >= 0",
    ),
    "momentum 1": bad(
        "optimizer.momentum=1",
        message="optimizer.momentum=1.0: not allowed; expected a number in [0, 1)",
    ),
    "warmup longer than training": bad(
        "optimizer.warmup_epochs=20",
        message="optimizer.warmup_epochs=20: not allowed; expected an integer from 0 to "
        "trainer.epochs (10)",
    ),
    "schedule shorter than training": bad(
        "optimizer.schedule=linear",
        "optimizer.decay_epochs=5",
        message="optimizer.decay_epochs=5: not allowed; expected null or at least "
        "trainer.epochs (10): training stops at or before the end of the schedule",
    ),
    "schedule length without decay": bad(
        "optimizer.decay_epochs=90",
        message="optimizer.decay_epochs=90: not allowed; expected null with "
        "optimizer.schedule=constant, which does not decay",
    ),
    "warmup longer than the schedule": bad(
        "optimizer.schedule=linear",
        "optimizer.decay_epochs=20",
        "optimizer.warmup_epochs=21",
        message="optimizer.warmup_epochs=21: not allowed; expected an integer from 0 to "
        "optimizer.decay_epochs (20)",
    ),
    "warmup start above the learning rate": bad(
        "optimizer.warmup_epochs=1",
        "optimizer.lr_init=0.1",
        message="optimizer.lr_init=0.1: not allowed; expected null or a number from 0 to "
        "optimizer.lr (0.05)",
    ),
    "warmup start without warmup": bad(
        "optimizer.lr_init=0.01",
        message="optimizer.lr_init=0.01: not allowed; expected null without warmup "
        "(optimizer.warmup_epochs=0): it is where warmup starts",
    ),
    "cosine with an end it ignores": bad(
        "optimizer.schedule=cosine",
        "optimizer.min_lr=0.001",
        message="optimizer.min_lr=0.001: not allowed; expected 0 with "
        "optimizer.schedule=cosine, which decays to about 0 as the model zoo's "
        "(optimizer.lr_init sets where warmup starts)",
    ),
    "checkpoint every 0 epochs": bad(
        "checkpoint.save_checkpoint_epochs=0",
        message="checkpoint.save_checkpoint_epochs=0: not allowed; expected an integer >= 1",
    ),
    "checkpoint interval in steps and epochs": bad(
        "checkpoint.save_checkpoint_steps=5",
        "checkpoint.save_checkpoint_epochs=10",
        message="checkpoint.save_checkpoint_epochs=10: not allowed; expected 1 when "
        "checkpoint.save_checkpoint_steps is set, which it would override",
    ),
    "unknown loss name": bad(
        "loss.name=smooth",
        message="loss.name='smooth': not allowed; expected one of cross_entropy, "
        "softmax_cross_entropy, cross_entropy_smooth",
    ),
    "label smoothing 1": bad(
        "loss.label_smoothing=1",
        message="loss.label_smoothing=1.0: not allowed; expected a number in [0, 1)",
    ),
    # The training loop, mixed precision, loss parts (ms_exp/preflight/training.py).
    "unknown training loop": bad(
        "trainer.loop=eager",
        message="trainer.loop='eager': not allowed; expected one of model, functional",
    ),
    "functional loop with AutoBoost": bad(
        "trainer.loop=functional",
        "boost=dim_reduce",
        "boost.pretrained_weight_path=/x",
        message="trainer.loop='functional': not allowed; expected model: boost=dim_reduce "
        "trains with a step of its own inside Model",
    ),
    "functional loop with Wide&Deep": bad(
        "trainer.loop=functional",
        *CRITEO,
        setup=criteo,
        message="trainer.loop='functional': not allowed; expected model: model=wide_deep "
        "trains with a step of its own inside Model",
    ),
    "functional loop in semi-auto parallel": bad(
        "trainer.loop=functional",
        "parallel=semi_auto",
        message="trainer.loop='functional': not allowed; expected model with "
        "parallel=semi_auto (the functional loop's gradient reducer is data "
        "parallel's: use parallel=stand_alone or data)",
    ),
    "functional loop in sink mode": bad(
        "trainer.loop=functional",
        "trainer.dataset_sink_mode=true",
        message="trainer.dataset_sink_mode=true: not allowed; expected false with "
        "trainer.loop=functional (sink mode is Model's)",
    ),
    "sink size 0": bad(
        "trainer.sink_size=0",
        message="trainer.sink_size=0: not allowed; expected -1 (the whole dataset) or an "
        "integer >= 1",
    ),
    "unknown amp level": bad(
        "amp.level=O4", message="amp.level='O4': not allowed; expected one of O0, O1, O2, O3"
    ),
    "unknown loss scale": bad(
        "amp.loss_scale=auto",
        message="amp.loss_scale='auto': not allowed; expected one of none, fixed, dynamic",
    ),
    "amp with Wide&Deep's own loss scale": bad(
        *CRITEO,
        "amp.level=O2",
        setup=criteo,
        message="amp.level='O2': not allowed; expected O0: model=wide_deep trains with a "
        "step of its own inside Model",
    ),
    "keep batch norm fp32 without float16": bad(
        "amp.keep_batchnorm_fp32=false",
        "amp.level=O1",
        message="amp.keep_batchnorm_fp32=false: not allowed; expected null with "
        "amp.level=O1, which casts no batch norm to float16",
    ),
    "loss scale 0": bad(
        "amp.loss_scale=fixed",
        "amp.loss_scale_value=0",
        message="amp.loss_scale_value=0.0: not allowed; expected a number > 0",
    ),
    "dynamic scale factor 1": bad(
        "amp.loss_scale=dynamic",
        "trainer.loop=functional",
        "amp.scale_factor=1",
        message="amp.scale_factor=1: not allowed; expected an integer >= 2",
    ),
    "dynamic scale window 0": bad(
        "amp.scale_window=0", message="amp.scale_window=0: not allowed; expected an integer >= 1"
    ),
    "overflow check without a loss scale": bad(
        "amp.drop_overflow_update=true",
        message="amp.drop_overflow_update=true: not allowed; expected false with "
        "amp.loss_scale=none (no loss scale, no overflow check)",
    ),
    "dynamic loss scale in Model on CPU": bad(
        "amp.loss_scale=dynamic",
        "trainer.device_target=CPU",
        message="amp.loss_scale='dynamic': not allowed; expected none or fixed without "
        "drop_overflow_update on CPU with trainer.loop=model (MindSpore's Model has no "
        "overflow check on CPU), or trainer.loop=functional for dynamic",
    ),
    "dropping overflowing steps in Model on CPU": bad(
        "amp.loss_scale=fixed",
        "amp.drop_overflow_update=true",
        message="amp.loss_scale='fixed': not allowed; expected none or fixed without "
        "drop_overflow_update on CPU with trainer.loop=model (MindSpore's Model has no "
        "overflow check on CPU), or trainer.loop=functional for fixed with "
        "amp.drop_overflow_update=true",
    ),
    "loss part named loss": bad(
        "+loss.parts={loss:{name:cross_entropy}}",
        message="loss.parts='loss': not allowed; expected part names of letters, digits and "
        "_, starting with a letter, other than 'loss' (the total is train/loss)",
    ),
    "loss parts all weighted 0": bad(
        "+loss.parts={a:{weight:0},b:{weight:0}}",
        message="loss.parts='a, b': not allowed; expected at least one part with weight > 0",
    ),
    "negative loss part weight": bad(
        "+loss.parts={a:{weight:-1}}",
        message="loss.parts.a.weight=-1.0: not allowed; expected a number >= 0",
    ),
    "loss part smoothing out of range": bad(
        "+loss.parts={a:{label_smoothing:1.5}}",
        message="loss.parts.a.label_smoothing=1.5: not allowed; expected a number in [0, 1)",
    ),
    "loss part with an unknown key": bad(
        "+loss.parts={a:{wt:1}}",
        message="loss.parts.a.wt=1: unknown key; expected one of name, label_smoothing, "
        "weight, _target_ (other keys only beside a _target_: its own arguments)",
    ),
    "loss part weight not a number": bad(
        "+loss.parts.a.weight=heavy",
        message="loss.parts.a.weight='heavy': not allowed; expected a number",
    ),
    "loss smoothing beside loss parts": bad(
        "loss.label_smoothing=0.1",
        "+loss.parts={a:{weight:1}}",
        message="loss.label_smoothing=0.1: not allowed; expected 0 with loss.parts (set "
        "label_smoothing per part)",
    ),
    "loss parts with AutoBoost": bad(
        "boost=dim_reduce",
        "boost.pretrained_weight_path=/x",
        "+loss.parts={a:{weight:1}}",
        message="loss.parts='a': not allowed; expected no parts: boost=dim_reduce trains "
        "with a step of its own inside Model",
    ),
    "stand-alone on two devices": bad(
        "parallel.device_num=2",
        message="parallel.device_num=2: not allowed; expected 1 for parallel=stand_alone",
    ),
    "strategies for another device count": bad(
        "parallel=semi_auto",
        "parallel.device_num=3",
        message="parallel.strategies: strategy for 'layer1.matmul': ((2, 1), (1, 2)) uses "
        "2*1*2 = 4 devices, which does not divide device_num=3; expected for each "
        "operator of the network one shard tuple per input, each factor dividing its "
        "dimension, the product dividing parallel.device_num (3)",
    ),
    "dim-reduce rho 0": bad(
        "boost=dim_reduce",
        "boost.rho=0",
        store=BOTH,
        message="boost.rho=0.0: not allowed; expected a number in (0, 1): the line search "
        "tries steps 1 and rho",
    ),
    "dim-reduce gamma 1": bad(
        "boost=dim_reduce",
        "boost.gamma=1",
        message="boost.gamma=1.0: not allowed; expected a number in [0, 1): the residual "
        "gradient's momentum",
    ),
    "dim-reduce alpha negative": bad(
        "boost=dim_reduce",
        "boost.alpha=-0.1",
        message="boost.alpha=-0.1: not allowed; expected a number >= 0: the residual "
        "gradient's step",
    ),
    "dim-reduce sigma above 1": bad(
        "boost=dim_reduce",
        "boost.sigma=1.5",
        message="boost.sigma=1.5: not allowed; expected a number in (0, 1): the line "
        "search's sufficient-decrease factor",
    ),
    "dim-reduce no components": bad(
        "boost=dim_reduce",
        "boost.n_components=0",
        message="boost.n_components=0: not allowed; expected an integer >= 1",
    ),
    "dim-reduce components not shared evenly": bad(
        "boost=dim_reduce",
        "parallel=data",
        "boost.n_components=3",
        message="boost.n_components=3: not allowed; expected a multiple of "
        "parallel.device_num (2): each rank takes an equal share of the components",
    ),
    "synthetic data without samples": bad(
        "dataset=synthetic",
        "dataset.num_samples=0",
        message="dataset.num_samples=0: not allowed; expected an integer >= 1",
    ),
    "synthetic data of one class": bad(
        "dataset=synthetic",
        "dataset.num_classes=1",
        message="dataset.num_classes=1: not allowed; expected an integer >= 2",
    ),
    "digits held out entirely": bad(
        "dataset.eval_fraction=1",
        message="dataset.eval_fraction=1.0: not allowed; expected a fraction between 0 and "
        "1 (exclusive)",
    ),
    "batch larger than the training set": bad(
        "dataset.batch_size=1500",
        message="dataset.batch_size=1500: not allowed; expected at most the 1437 training "
        "samples of dataset=digits (with dataset.drop_remainder=true a larger batch "
        "gives 0 steps per epoch)",
    ),
    "batch larger than each rank's shard": bad(
        "parallel=data",
        "dataset=synthetic",
        "dataset.num_samples=100",
        "dataset.batch_size=64",
        message="dataset.batch_size=64: not allowed; expected at most the 100 training "
        "samples of dataset=synthetic, 50 on each of 2 ranks (with "
        "dataset.drop_remainder=true a larger batch gives 0 steps per epoch)",
    ),
    "master port below 1024": bad(
        "parallel=data",
        "parallel.launcher.master_port=80",
        message="parallel.launcher.master_port=80: not allowed; expected a port from 1024 "
        "to 65535, or null for a free one",
    ),
    "fusion indices not increasing": bad(
        "parallel=data",
        "parallel.all_reduce_fusion_config=[35,20]",
        message="parallel.all_reduce_fusion_config=[35, 20]: not allowed; expected "
        "increasing positive gradient indices, e.g. [20, 35]",
    ),
    "resnet depth": bad(
        "model=resnet",
        "dataset=synthetic",
        "dataset.image_shape=[3,32,32]",
        "model.depth=34",
        message="model.depth=34: not allowed; expected one of 18, 50",
    ),
    # --- values the types admit but MindSpore, numpy and MLflow do not
    "learning rate infinite": bad(
        "optimizer.lr=inf",
        store=BOTH,
        message="optimizer.lr=inf: not allowed; expected a finite number (a literal beyond "
        "1.8e308, such as 1e400, reads as inf)",
    ),
    "learning rate beyond float64": bad(
        "optimizer.lr=1e400",
        message="optimizer.lr=inf: not allowed; expected a finite number (a literal beyond "
        "1.8e308, such as 1e400, reads as inf)",
    ),
    "learning rate not a number (nan)": bad(
        "optimizer.lr=nan", message="optimizer.lr=nan: not allowed; expected a finite number"
    ),
    "fixed loss scale infinite": bad(
        "amp.loss_scale=fixed",
        "amp.loss_scale_value=inf",
        message="amp.loss_scale_value=inf: not allowed; expected a finite number (a literal "
        "beyond 1.8e308, such as 1e400, reads as inf)",
    ),
    "normalisation std nan in a list": bad(
        "dataset.std=[nan]", message="dataset.std[0]=nan: not allowed; expected a finite number"
    ),
    "loss part weight infinite": bad(
        "+loss.parts={a:{weight:inf}}",
        message="loss.parts.a.weight=inf: not allowed; expected a finite number (a literal "
        "beyond 1.8e308, such as 1e400, reads as inf)",
    ),
    "Wide&Deep learning rate infinite": bad(
        *CRITEO,
        "model.wide_lr=-inf",
        setup=criteo,
        message="model.wide_lr=-inf: not allowed; expected a finite number (a literal beyond "
        "1.8e308, such as 1e400, reads as inf)",
    ),
    "seed beyond what set_seed takes": bad(
        "trainer.seed=1099511627776",
        store=BOTH,
        message="trainer.seed=1099511627776: not allowed; expected an integer from 0 to "
        "4294967295 (what mindspore.set_seed and numpy.random.seed take)",
    ),
    "seed negative": bad(
        "trainer.seed=-1",
        message="trainer.seed=-1: not allowed; expected an integer from 0 to 4294967295 "
        "(what mindspore.set_seed and numpy.random.seed take)",
    ),
    "split seed beyond what numpy takes": bad(
        "dataset.split_seed=4294967296",
        message="dataset.split_seed=4294967296: not allowed; expected an integer from 0 to "
        "4294967295 (what mindspore.set_seed and numpy.random.seed take)",
    ),
    "epochs beyond int32": bad(
        "trainer.epochs=1180591620717411303424",
        message="trainer.epochs=1180591620717411303424: not allowed; expected an integer of "
        "at most 2147483647 (int32, as MindSpore takes it)",
    ),
    "hidden size below int32": bad(
        "model.hidden_size=-99999999999",
        message="model.hidden_size=-99999999999: not allowed; expected an integer of at least "
        "-2147483648 (int32, as MindSpore takes it)",
    ),
    "more data workers than CPUs": bad(
        "dataset.num_parallel_workers=100000",
        store=BOTH,
        message="dataset.num_parallel_workers=100000: not allowed; expected an integer from 1 "
        "to <cpus>, the CPUs of this machine (mindspore.dataset refuses more workers "
        "than CPUs)",
    ),
    "experiment name beyond MLflow's limit": bad(
        f"tracking.experiment_name={LONG_NAME}",
        store=BOTH,
        message="tracking.experiment_name='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
        "xxxxxxxxxx': not allowed; expected a name of at most 500 characters, MLflow's "
        "limit (it has 20000)",
    ),
    "run name beyond MLflow's SQL stores": bad(
        f"tracking.run_name={'r' * 251}",
        message="tracking.run_name='rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr...rrrrrrrrrr': "
        "not allowed; expected null or a name of at most 250 characters, what "
        "MLflow's SQL stores hold (it has 251)",
    ),
    "tracking server without a host": bad(
        "tracking.uri=http://",
        store=BOTH,
        message="tracking.uri='http://': not allowed; expected the address of an MLflow "
        "server, with its host: http://HOST[:PORT], e.g. http://127.0.0.1:5000",
    ),
    "tracking server with a port but no host": bad(
        "tracking.uri=https://:5000",
        message="tracking.uri='https://:5000': not allowed; expected the address of an MLflow "
        "server, with its host: https://HOST[:PORT], e.g. http://127.0.0.1:5000",
    ),
    "learning rate finite in float64, inf in float32": bad(
        "optimizer.lr=1e39",
        message="optimizer.lr=1e+39: not allowed; expected a number of at most 3.403e+38 in "
        "size (float32, as MindSpore computes with it)",
    ),
    "weight decay finite in float64, inf in float32": bad(
        "optimizer.weight_decay=1e39",
        message="optimizer.weight_decay=1e+39: not allowed; expected a number of at most "
        "3.403e+38 in size (float32, as MindSpore computes with it)",
    ),
    "ranks' log folder climbing out of the run directory": bad(
        "parallel=data",
        "parallel.device_num=2",
        "parallel.launcher.log_dir=../../escaped_logs",
        message="parallel.launcher.log_dir='../../escaped_logs': not allowed; expected an "
        "absolute path, or a relative one inside the run directory (without '..')",
    ),
    "strategy file climbing out of the run directory": bad(
        "checkpoint.strategy.save_file=../common/strategy.ckpt",
        message="checkpoint.strategy.save_file='../common/strategy.ckpt': not allowed; "
        "expected an absolute path, or a relative one inside the run directory "
        "(without '..')",
    ),
    # Sizes beyond this machine's memory, from a lower bound computed of the config alone.
    "a network larger than memory": bad(
        "model.hidden_size=2147483647",
        setup=memory_of_16_gib,
        store=BOTH,
        message="model.hidden_size=2147483647: not allowed; expected a network whose "
        "parameters fit in this machine's 16.0 GiB of memory (model=mlp would have "
        "4611686177341177791 parameters: at least 16.0 EiB as float32)",
    ),
    "images larger than memory": bad(
        "dataset=synthetic",
        "dataset.image_shape=[3,65536,65536]",
        setup=memory_of_16_gib,
        message="dataset.image_shape=[3, 65536, 65536]: not allowed; expected images of which "
        "a batch fits in this machine's 16.0 GiB of memory (one image of "
        "3x65536x65536 is 48.0 GiB as float32, a batch of dataset.batch_size=32 "
        "1.5 TiB)",
    ),
    "synthetic samples beyond memory": bad(
        "dataset=synthetic",
        "dataset.num_samples=2000000000",
        setup=memory_of_16_gib,
        message="dataset.num_samples=2000000000: not allowed; expected samples that fit in "
        "this machine's 16.0 GiB of memory (dataset=synthetic makes its 2000000256 "
        "samples (dataset.num_samples + dataset.num_eval_samples) of 1x28x28 in "
        "memory: at least 5.7 TiB as float32)",
    ),
    "a batch larger than memory": bad(
        "dataset=synthetic",
        "dataset.image_shape=[3,16384,16384]",
        "dataset.num_samples=64",
        "dataset.num_eval_samples=8",
        setup=memory_of_16_gib,
        message="dataset.batch_size=32: not allowed; expected at most 5 images of "
        "3x16384x16384 a batch, what fits in this machine's 16.0 GiB of memory (a "
        "batch of 32 is 96.0 GiB as float32)",
    ),
    # Interpolations are resolved in the preflight: one that cannot resolve names its key.
    "interpolation of an unset environment variable": bad(
        "trainer.epochs=${oc.env:MS_EXP_NEVER_SET}",
        message="trainer.epochs='${oc.env:MS_EXP_NEVER_SET}': KeyError raised while resolving "
        "interpolation: \"Environment variable 'MS_EXP_NEVER_SET' not found\"; "
        "expected a value that resolves (an interpolation of a key that exists, a set "
        "environment variable or a known resolver, and no loop)",
    ),
    "interpolation of a key that does not exist": bad(
        "optimizer.lr=${optimizer.nope}",
        message="optimizer.lr='${optimizer.nope}': Interpolation key 'optimizer.nope' not "
        "found; expected a value that resolves (an interpolation of a key that exists, "
        "a set environment variable or a known resolver, and no loop)",
    ),
    "interpolations that refer to each other": bad(
        "trainer.seed=${trainer.epochs}",
        "trainer.epochs=${trainer.seed}",
        message="trainer.epochs='${trainer.seed}': Recursive interpolation detected; expected "
        "a value that resolves (an interpolation of a key that exists, a set "
        "environment variable or a known resolver, and no loop)",
    ),
    "a resolver nobody registered": bad(
        "trainer.epochs=${foo:bar}",
        message="trainer.epochs='${foo:bar}': Unsupported interpolation type foo; expected a "
        "value that resolves (an interpolation of a key that exists, a set "
        "environment variable or a known resolver, and no loop)",
    ),
    # A password in the URI is refused, not masked: it would be in the config, Hydra's
    # record, the params, the tags and the printed lines. The line shows it as ***.
    "password in the tracking server's URI": bad(
        "tracking.uri=http://alice:s3cret@127.0.0.1:5000",
        store=BOTH,
        message="tracking.uri='http://alice:***@127.0.0.1:5000': a password in tracking.uri "
        "would be written into the run's records and printed; expected a URI without "
        "a password, the credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, which MLflow sends to the server",
    ),
    "password in a database store's URI": bad(
        "tracking.uri=postgresql://ms_exp:s3cret@127.0.0.1/mlflow",
        message="tracking.uri='postgresql://ms_exp:***@127.0.0.1/mlflow': a password in "
        "tracking.uri would be written into the run's records and printed; expected a "
        "URI without a password, the password in PGPASSWORD or ~/.pgpass (PostgreSQL; "
        "MySQL: ~/.my.cnf), which the database client reads",
    ),
    # A password that holds a "/", "?" or "#", typed unencoded, ends urlsplit's host early
    # (SQLAlchemy still reads it as the password): refused all the same, all of it masked.
    "password with a slash in the tracking server's URI": bad(
        "tracking.uri=http://alice:s3/cr?et@127.0.0.1:5000",
        message="tracking.uri='http://alice:***@127.0.0.1:5000': a password in tracking.uri "
        "would be written into the run's records and printed; expected a URI without "
        "a password, the credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, which MLflow sends to the server",
    ),
    "password with a slash in a database store's URI": bad(
        "tracking.uri=postgresql://ms_exp:s3/cret@127.0.0.1/mlflow",
        store=BOTH,
        message="tracking.uri='postgresql://ms_exp:***@127.0.0.1/mlflow': a password in "
        "tracking.uri would be written into the run's records and printed; expected a "
        "URI without a password, the password in PGPASSWORD or ~/.pgpass (PostgreSQL; "
        "MySQL: ~/.my.cnf), which the database client reads",
    ),
    "password in an upper-case scheme's URI": bad(
        "tracking.uri=HTTPS://alice:s3cret@127.0.0.1:5000",
        message="tracking.uri='https://alice:***@127.0.0.1:5000': a password in tracking.uri "
        "would be written into the run's records and printed; expected a URI without "
        "a password, the credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, which MLflow sends to the server",
    ),
    # A credential in the query (SQLAlchemy hands ?password= to the database driver), in any
    # case: refused the same way, its value as ***.
    "password in the query of a database store's URI": bad(
        "tracking.uri='postgresql://ms_exp@127.0.0.1/mlflow?password=s3cret'",
        store=BOTH,
        message="tracking.uri='postgresql://ms_exp@127.0.0.1/mlflow?password=***': a password "
        "in tracking.uri would be written into the run's records and printed; expected "
        "a URI without a password, the password in PGPASSWORD or ~/.pgpass "
        "(PostgreSQL; MySQL: ~/.my.cnf), which the database client reads",
    ),
    "token in the query of the tracking server's URI": bad(
        "tracking.uri='http://127.0.0.1:5000?token=s3cret'",
        message="tracking.uri='http://127.0.0.1:5000?token=***': a password in tracking.uri "
        "would be written into the run's records and printed; expected a URI without "
        "a password, the credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, which MLflow sends to the server",
    ),
    "mixed-case access token after another query parameter": bad(
        "tracking.uri='https://127.0.0.1:5000/?x=1&Access_Token=s3cret'",
        message="tracking.uri='https://127.0.0.1:5000/?x=1&Access_Token=***': a password in "
        "tracking.uri would be written into the run's records and printed; expected a "
        "URI without a password, the credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, which MLflow sends to the server",
    ),
    "password in the query of the sweep's Optuna storage": bad(
        "-m",
        "hydra/sweeper=optuna",
        "optimizer.lr=interval(0.01,0.2)",
        "hydra.sweeper.storage='postgresql://ms_exp@127.0.0.1/optuna?password=s3cret'",
        message="hydra.sweeper.storage='postgresql://ms_exp@127.0.0.1/optuna?password=***': a "
        "password in the URL would be written into the sweep's Hydra records and "
        "MLflow artifacts; expected a database URL without a password, the password "
        "in PGPASSWORD or ~/.pgpass (libpq reads them)",
    ),
    # Refused for something else, the line repeating what was typed: the password as ***.
    "password in a query Hydra cannot read unquoted": bad(
        "tracking.uri=postgresql://ms_exp@127.0.0.1/mlflow?password=s3cret",
        message="override 'tracking.uri=postgresql://ms_exp@127.0.0.1/mlflow?password=***': '=' "
        "cannot stand unquoted in the value of tracking.uri (Hydra's parser: mismatched "
        "input '='); expected key=value, +key=value (add a key), ++key=value (add or "
        "set), ~key (remove); quote a value that holds , ( ) [ ] { } or spaces",
    ),
    "password in an override Hydra cannot read": bad(
        "tracking.uri=http://alice:s3#cret@127.0.0.1:5000",
        message="override 'tracking.uri=http://alice:***@127.0.0.1:5000': Hydra's parser says: "
        "LexerNoViableAltException: tracking.uri=http://alice:***@127.0.0.1:5000; "
        "expected key=value, +key=value (add a key), ++key=value (add or set), ~key "
        "(remove); quote a value that holds , ( ) [ ] { } or spaces",
    ),
    "password in a URI that does not resolve": bad(
        "tracking.uri=http://alice:s3cret@127.0.0.1:${tracking.uri}",
        message="tracking.uri='http://alice:***@127.0.0.1:${tracking.uri}': Recursive "
        "interpolation detected; expected a value that resolves (an interpolation of a "
        "key that exists, a set environment variable or a known resolver, and no "
        "loop)",
    ),
    # --cfg only prints the config: the password typed into an override would be printed.
    "password in a URI the config printout would show": bad(
        "--cfg",
        "job",
        "tracking.uri=http://alice:s3cret@127.0.0.1:5000",
        message="tracking.uri='http://alice:***@127.0.0.1:5000': a password in tracking.uri "
        "would be written into the run's records and printed; expected a URI without "
        "a password, the credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, which MLflow sends to the server",
    ),
    "tracking store in memory": bad(
        "tracking.uri=sqlite:///:memory:",
        message="tracking.uri='sqlite:///:memory:': not allowed; expected a SQLite file, not "
        ":memory: (a store in memory ends with the process that holds it: nothing "
        "would be recorded)",
    ),
    "tracking server port beyond 65535": bad(
        "tracking.uri=http://127.0.0.1:99999",
        message="tracking.uri='http://127.0.0.1:99999': not allowed; expected the address of "
        "an MLflow server with a port from 1 to 65535, e.g. http://127.0.0.1:5000",
    ),
    "tracking server port 0": bad(
        "tracking.uri=http://127.0.0.1:0",
        message="tracking.uri='http://127.0.0.1:0': not allowed; expected the address of an "
        "MLflow server with a port from 1 to 65535, e.g. http://127.0.0.1:5000",
    ),
    "MLflow's file store": bad(
        "tracking.uri=file:///tmp/mlruns",
        message="tracking.uri='file:///tmp/mlruns': not allowed; expected sqlite:///... or a "
        "server: MLflow 3 refuses its file store (maintenance mode) unless "
        "MLFLOW_ALLOW_FILE_STORE=true",
    ),
    "tracking store a text file": bad(
        "tracking.uri=sqlite:///<data>/notes.db",
        setup=text_file_as_store,
        store=BOTH,
        message="tracking.uri='sqlite:///<data>/notes.db': not allowed; expected an MLflow "
        "SQLite store, or a file name that does not exist yet (<data>/notes.db is not a "
        "SQLite database)",
    ),
    "tracking store cut short": bad(
        "tracking.uri=sqlite:///<data>/mlflow.db",
        setup=truncated_store,
        store=BOTH,
        message="tracking.uri='sqlite:///<data>/mlflow.db': not allowed; expected an MLflow "
        "SQLite store, or a file name that does not exist yet (<data>/mlflow.db is cut "
        "short: 1000 bytes, where its header says 45056 (11 pages of 4096): a copy or "
        "disk that stopped early; restore the whole file)",
    ),
    "tracking store with its schema page zeroed": bad(
        "tracking.uri=sqlite:///<data>/mlflow.db",
        setup=store_with_its_schema_zeroed,
        store=BOTH,
        message="tracking.uri='sqlite:///<data>/mlflow.db': not allowed; expected an MLflow "
        "SQLite store, or a file name that does not exist yet (<data>/mlflow.db is "
        "damaged: SQLite says 'database disk image is malformed': restore the whole "
        "file from a copy)",
    ),
    "tracking store a folder": bad(
        "tracking.uri=sqlite:///<data>",
        setup=file_in_the_way,
        message="tracking.uri='sqlite:///<data>': not allowed; expected an MLflow SQLite store, or "
        "a file name that does not exist yet (<data> is not a file)",
    ),
    # Hydra's own callbacks, instantiated by Hydra before the job: checked before Hydra runs.
    "a Hydra callback that is a blocklisted function": bad(
        "+hydra.callbacks.x._target_=os.system",
        store=BOTH,
        message="hydra.callbacks.x._target_='os.system': not allowed; expected a Hydra "
        "callback class, a subclass of hydra.experimental.callback.Callback (os.system "
        "is a builtin_function_or_method)",
    ),
    "a Hydra callback that does not import": bad(
        "+hydra.callbacks.x._target_=ms_exp_no_such_module.Callback",
        message="hydra.callbacks.x._target_='ms_exp_no_such_module.Callback': does not import "
        "(Are you sure that module 'ms_exp_no_such_module' is installed?); expected an "
        "importable class or function (run from the project folder, or put it on "
        "PYTHONPATH)",
    ),
    "a Hydra callback with an argument it does not take": bad(
        "+hydra.callbacks.x._target_=ms_exp.job.folder_claim.RunFolderClaim",
        "+hydra.callbacks.x.when=now",
        message="hydra.callbacks.x.when='now': is not an argument of the target; expected a "
        "parameter of ms_exp.job.folder_claim.RunFolderClaim: none",
    ),
    # --- OmegaConf's type messages, in ms_exp's words
    "normalisation std not a list": bad(
        "dataset.std=0",
        message="dataset.std=0: not allowed; expected a list in brackets, e.g. [1, 2]",
    ),
    "a list as a mapping": bad(
        "dataset.std={a:1}",
        message="dataset.std={a:1}: not allowed; expected a list in brackets, e.g. [1, 2]",
    ),
    "a section set to one value": bad(
        "trainer=3",
        message="trainer=3: not allowed; expected a section of keys, not one value (set a key "
        "of it: section.key=value)",
    ),
    "null for a key that cannot be null": bad(
        "model.hidden_size=null",
        message="model.hidden_size=null: not allowed; expected a value (it cannot be null)",
    ),
    "a choice given as a list": bad(
        "optimizer.name=[sgd]",
        message="optimizer.name=['sgd']: not allowed; expected one of sgd, momentum, adam",
    ),
    "a string given as a list": bad(
        "tracking.experiment_name=[a]",
        message="tracking.experiment_name=['a']: not allowed; expected a string",
    ),
    "callbacks given one value": bad(
        "trainer.callbacks=3",
        message="trainer.callbacks=3: not allowed; expected a mapping in braces, e.g. "
        "{name: value}",
    ),
    "an unquoted parenthesis (Hydra's grammar)": bad(
        "optimizer.lr=()",
        message="override 'optimizer.lr=()': '(' cannot stand unquoted in the value of "
        "optimizer.lr (Hydra's parser: mismatched input '('); expected key=value, "
        "+key=value (add a key), ++key=value (add or set), ~key (remove); quote a "
        "value that holds , ( ) [ ] { } or spaces",
    ),
    "an unquoted equals sign (Hydra's grammar)": bad(
        "optimizer.lr=a=b",
        message="override 'optimizer.lr=a=b': '=' cannot stand unquoted in the value of "
        "optimizer.lr (Hydra's parser: mismatched input '='); expected key=value, "
        "+key=value (add a key), ++key=value (add or set), ~key (remove); quote a "
        "value that holds , ( ) [ ] { } or spaces",
    ),
    # --- unknown keys
    "unknown model key": bad(
        "model.hiden_size=3",
        store=BOTH,
        message="model.hiden_size=3: unknown key; expected one of _target_, hidden_size, "
        "name, weight_init",
    ),
    "unknown key added with +": bad(
        "+optimizer.nesterov=true",
        message="optimizer.nesterov=true: unknown key; expected one of name, lr, momentum, "
        "weight_decay, schedule, warmup_epochs, min_lr, lr_init, decay_epochs, "
        "group_params, _target_ (other keys only beside a _target_: its own "
        "arguments)",
    ),
    "an argument of a user's target typed without +": bad(
        "optimizer._target_=mindspore.nn.AdamWeightDecay",
        "optimizer.beta1=0.8",
        message="optimizer.beta1=0.8: unknown key; expected one of _target_, decay_epochs, "
        "group_params, lr, lr_init, min_lr, momentum, name, schedule, warmup_epochs, "
        "weight_decay; an argument of mindspore.nn.AdamWeightDecay is added with +: "
        "+optimizer.beta1=0.8",
    ),
    "a key the config has, added with +": bad(
        "+trainer.epochs=3",
        message="+trainer.epochs=3: trainer.epochs is already in the config; expected "
        "trainer.epochs=3 (+ adds a key the config does not have; ++ adds or sets)",
    ),
    "the dimension-reduction tutorial's n_component": bad(
        "boost=dim_reduce",
        "boost.n_component=4",
        message="boost.n_component=4: unknown key; expected one of alpha, gamma, level, mode, "
        "n_components, pca_mat_path, pretrained_weight_path, rho, sigma, "
        "stage_one_run_id, timeout, weight_load_dir",
    ),
    "unknown launcher key": bad(
        "parallel=data",
        "parallel.launcher.port=9000",
        message="parallel.launcher.port=9000: unknown key; expected one of cluster_time_out, "
        "join_timeout, local_worker_num, log_dir, master_addr, master_port, "
        "mpirun_args, node_rank, rank_table_file, start_device_id, style, "
        "worker_num",
    ),
    "unknown tracking key": bad(
        "tracking.url=http://localhost:5000",
        message="tracking.url=http://localhost:5000: unknown key; expected one of enabled, "
        "experiment_name, log_checkpoints, log_every_n_steps, log_grad_norm, log_models, "
        "register_model, rerun_of, run_name, skip_finished, system_metrics_interval, "
        "uri",
    ),
    "unknown strategy-file key": bad(
        "checkpoint.strategy.savefile=s.ckpt",
        message="checkpoint.strategy.savefile=s.ckpt: unknown key; expected one of "
        "load_file, only_trainable_params, save_file",
    ),
    "a path for the bundled digits": bad(
        "+dataset.path=/data/mnist",
        message="dataset.path='/data/mnist': unknown key; expected one of batch_size, "
        "shuffle, num_parallel_workers, drop_remainder, _target_, name, "
        "eval_fraction, split_seed, mean, std",
    ),
    # --- unknown options
    "unknown dataset": bad(
        "dataset=cifar",
        store=BOTH,
        message="dataset='cifar': unknown option; expected one of criteo, digits, imagenet, "
        "mnist, synthetic",
    ),
    "unknown parallel mode": bad(
        "parallel=pipeline",
        message="parallel='pipeline': unknown option; expected one of auto, data, semi_auto, "
        "stand_alone",
    ),
    "unknown model": bad(
        "model=vgg", message="model='vgg': unknown option; expected one of mlp, resnet, wide_deep"
    ),
    "unknown experiment": bad(
        "+experiment=model_savings",
        message="experiment='model_savings': unknown option; expected one of "
        "dim_reduce_search, dim_reduce_stage_one, dim_reduce_stage_two, "
        "model_saving, model_saving_integrated, model_saving_sliced, "
        "resnet50_imagenet_stage_one, wide_deep_hybrid",
    ),
    "unknown launcher": bad(
        "hydra/launcher=ray",
        message="hydra/launcher='ray': unknown option; expected one of basic, concurrent, "
        "joblib, pool, slurm, submitit_local, submitit_slurm",
    ),
    "unknown launch style": bad(
        "parallel=data",
        "parallel.launcher.style=slurm",
        message="parallel.launcher.style='slurm': not allowed; expected one of msrun, mpirun, "
        "rank_table",
    ),
    "auto-parallel search mode": bad(
        "parallel=auto",
        "parallel.search_mode=random",
        message="parallel.search_mode='random': not allowed; expected one of "
        "sharding_propagation, dynamic_programming, recursive_programming",
    ),
    # --- group choices that conflict
    "dim-reduce with auto parallel": bad(
        "boost=dim_reduce",
        "parallel=auto",
        store=BOTH,
        message="parallel='auto': not allowed; expected stand_alone or data with "
        "boost=dim_reduce (DimReduce is data-parallel)",
    ),
    "dim-reduce with wide&deep": bad(
        *CRITEO,
        "boost=dim_reduce",
        setup=criteo,
        message="boost='dim_reduce': not allowed; expected off with model=wide_deep",
    ),
    "dim-reduce with an optimizer it ignores": bad(
        "boost=dim_reduce",
        message="optimizer.name='momentum': not allowed; expected sgd with boost=dim_reduce "
        "(MindSpore trains stage two with SGD(learning_rate=1) whatever is "
        "configured)",
    ),
    "dim-reduce with parameter groups it ignores": bad(
        *DIM_REDUCE,
        "optimizer.group_params=true",
        message="optimizer.group_params=true: not allowed; expected false with "
        "boost=dim_reduce (MindSpore trains stage two with SGD(learning_rate=1) "
        "whatever is configured)",
    ),
    "host placement without embedding tables": bad(
        "placement=host_device",
        message="placement='host_device': not allowed; expected a model with embedding "
        "tables to keep on the host (model=wide_deep); model=mlp has none, use "
        "placement=device",
    ),
    "wide&deep on digits": bad(
        "model=wide_deep",
        message="model='wide_deep': not allowed; expected dataset=criteo (Criteo ids and "
        "weights); dataset=digits is images",
    ),
    "criteo with the mlp": bad(
        *CRITEO,
        "model=mlp",
        setup=criteo,
        message="dataset='criteo': not allowed; expected model=wide_deep for Criteo ids and "
        "weights; model=mlp reads images",
    ),
    "wide&deep semi-auto": bad(
        *CRITEO,
        "parallel=semi_auto",
        setup=criteo,
        message="parallel='semi_auto': not allowed; expected stand_alone or data with "
        "model=wide_deep",
    ),
    "wide&deep with an optimizer it ignores": bad(
        *CRITEO,
        "optimizer.lr=0.1",
        setup=criteo,
        message="optimizer.lr=0.1: not allowed; expected its default 0.05 with "
        "model=wide_deep, which does not read the optimizer section; set "
        "model.wide_lr (FTRL) and model.deep_lr (Adam/LazyAdam)",
    ),
    "sliced checkpoints saved whole": bad(
        "checkpoint=sliced",
        "checkpoint.integrated_save=true",
        store=BOTH,
        message="checkpoint.integrated_save=true: not allowed; expected false with "
        "checkpoint=sliced, which saves each rank's slice (use "
        "checkpoint=integrated for whole weights)",
    ),
    "sliced checkpoints not saved": bad(
        "checkpoint=sliced",
        "checkpoint.save=false",
        message="checkpoint.save=false: not allowed; expected true with checkpoint=sliced "
        "(use checkpoint=none to save nothing)",
    ),
    "no checkpoints, saved": bad(
        "checkpoint=none",
        "checkpoint.save=true",
        message="checkpoint.save=true: not allowed; expected false with checkpoint=none (use "
        "checkpoint=integrated or checkpoint=sliced to save checkpoints)",
    ),
    "no checkpoints, best kept": bad(
        "checkpoint=none",
        "checkpoint.keep_best=true",
        message="checkpoint.keep_best=true: not allowed; expected false with "
        "checkpoint=none, which writes no checkpoint (for best.ckpt alone use "
        "checkpoint=integrated checkpoint.save=false)",
    ),
    "resnet on 8x8 digits": bad(
        "model=resnet",
        message="model='resnet': not allowed; expected images of at least 32x32; "
        "dataset=digits has 8x8 (use model=mlp)",
    ),
    "label smoothing the sparse loss": bad(
        "loss.name=softmax_cross_entropy",
        "loss.label_smoothing=0.1",
        message="loss.label_smoothing=0.1: not allowed; expected 0 with "
        "loss.name=softmax_cross_entropy (use cross_entropy or cross_entropy_smooth "
        "to smooth labels)",
    ),
    "workers other than devices": bad(
        "parallel=data",
        "parallel.launcher.worker_num=4",
        message="parallel.launcher.worker_num=4: not allowed; expected null or "
        "parallel.device_num (2): one worker per device",
    ),
    "node rank beyond the nodes": bad(
        "parallel=data",
        "parallel.launcher.local_worker_num=1",
        "parallel.launcher.node_rank=2",
        message="parallel.launcher.node_rank=2: not allowed; expected this node's rank, 0 to "
        "1 (2 workers, 1 on each node)",
    ),
    "master on another machine for a one-node job": bad(
        "parallel=data",
        "parallel.launcher.master_addr=192.0.2.1",
        message="parallel.launcher.master_addr='192.0.2.1': not allowed; expected an address "
        "of this machine, e.g. 127.0.0.1, when all 2 workers run here (set "
        "parallel.launcher.local_worker_num to spread them over nodes)",
    ),
    "rank table off Ascend": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        setup=rank_table,
        store=BOTH,
        message="parallel.launcher.style='rank_table': not allowed; expected "
        "trainer.device_target=Ascend with it (rank-table ranks talk over HCCL, which "
        "only Ascend has; trainer.device_target is None), or "
        "parallel.launcher.style=msrun",
    ),
    "mpirun on CPU": bad(
        "parallel=data",
        "parallel.launcher.style=mpirun",
        "trainer.device_target=CPU",
        store=BOTH,
        message="parallel.launcher.style='mpirun': not allowed; expected "
        "trainer.device_target=GPU or Ascend with it (MindSpore 2.10 initialises no "
        "CPU communication under mpirun; trainer.device_target is CPU), or "
        "parallel.launcher.style=msrun",
    ),
    "mpirun not installed": bad(
        "parallel=data",
        "parallel.launcher.style=mpirun",
        "trainer.device_target=GPU",
        setup=no_mpirun_on_path,
        message="parallel.launcher.style='mpirun': not allowed; expected mpirun on PATH "
        "(install Open MPI, e.g. apt-get install openmpi-bin), or "
        "parallel.launcher.style=msrun",
    ),
    "rank table not given": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        message="parallel.launcher.rank_table_file=null: not allowed; expected the path of the "
        "Ascend rank table (hccl_<n>p_*.json) with parallel.launcher.style=rank_table",
    ),
    "negative start device id": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        "parallel.launcher.start_device_id=-1",
        setup=rank_table,
        message="parallel.launcher.start_device_id=-1: not allowed; expected an integer >= 0 "
        "(the first rank's DEVICE_ID)",
    ),
    "rank table for msrun": bad(
        "parallel=data",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        setup=rank_table,
        message="parallel.launcher.rank_table_file='<data>/hccl.json': not allowed; expected "
        "null with parallel.launcher.style=msrun (only style=rank_table reads it)",
    ),
    "start device id for msrun": bad(
        "parallel=data",
        "parallel.launcher.start_device_id=4",
        message="parallel.launcher.start_device_id=4: not allowed; expected 0 with "
        "parallel.launcher.style=msrun (only style=rank_table reads it)",
    ),
    "mpirun arguments for msrun": bad(
        "parallel=data",
        "parallel.launcher.mpirun_args=[--bind-to,none]",
        message="parallel.launcher.mpirun_args=['--bind-to', 'none']: not allowed; expected [] "
        "with parallel.launcher.style=msrun (only style=mpirun reads it)",
    ),
    "msrun's workers per node for mpirun": bad(
        "parallel=data",
        "parallel.launcher.style=mpirun",
        "parallel.launcher.local_worker_num=1",
        message="parallel.launcher.local_worker_num=1: not allowed; expected null with "
        "parallel.launcher.style=mpirun (only style=msrun reads it)",
    ),
    "msrun's node rank for a rank table": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "parallel.launcher.node_rank=0",
        message="parallel.launcher.node_rank=0: not allowed; expected -1 with "
        "parallel.launcher.style=rank_table (only style=msrun reads it)",
    ),
    # --- paths that do not exist
    "rank table missing": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        "parallel.launcher.rank_table_file=/no/such/hccl_2p.json",
        message="parallel.launcher.rank_table_file='/no/such/hccl_2p.json': not allowed; "
        "expected a readable rank table file (/no/such/hccl_2p.json is not a file)",
    ),
    "rank table not JSON": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        setup=rank_table_not_json,
        message="parallel.launcher.rank_table_file='<data>/hccl.json': not allowed; expected a "
        "readable rank table file (<data>/hccl.json is not JSON: Expecting value: "
        "line 1 column 1 (char 0))",
    ),
    "rank table of another format": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        setup=rank_table_of_another_format,
        message="parallel.launcher.rank_table_file='<data>/hccl.json': not allowed; expected a "
        "readable rank table file (<data>/hccl.json has no server_list[].device[] of "
        "MindSpore's rank table)",
    ),
    "rank table of two servers": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        setup=rank_table_of_two_servers,
        message="parallel.launcher.rank_table_file='<data>/hccl.json': not allowed; expected a "
        "rank table of one server, this one (it lists 2); on several servers use "
        "parallel.launcher.style=msrun or mpirun",
    ),
    "rank table of another size": bad(
        "parallel=data",
        "parallel.launcher.style=rank_table",
        "trainer.device_target=Ascend",
        "parallel.launcher.rank_table_file=<data>/hccl.json",
        setup=rank_table_of_8,
        message="parallel.launcher.rank_table_file='<data>/hccl.json': not allowed; expected a "
        "rank table listing 2 devices, one per rank (it lists 8)",
    ),
    "mnist folder missing": bad(
        "dataset=mnist",
        "dataset.path=/no/such/mnist",
        store=BOTH,
        message="dataset.path='/no/such/mnist': not allowed; expected a folder that exists",
    ),
    "image folder not given": bad(
        "dataset=imagenet",
        message="dataset.path=null: not allowed; expected a folder that exists (set it, or "
        "the DATA_PATH environment variable)",
    ),
    "criteo folder missing": bad(
        "dataset=criteo",
        "model=wide_deep",
        "dataset.path=<data>/nowhere",
        message="dataset.path='<data>/nowhere': not allowed; expected a folder that exists",
    ),
    "stage-one weights missing": bad(
        *DIM_REDUCE,
        "boost.pretrained_weight_path=/no/such/stage_one.ckpt",
        message="boost.pretrained_weight_path='/no/such/stage_one.ckpt': not allowed; "
        "expected a .ckpt or .safetensors file that exists (stage one's final checkpoint)",
    ),
    "stage-one run without a store": bad(
        *DIM_REDUCE,
        "boost.stage_one_run_id=latest",
        store=False,
        message="boost.stage_one_run_id='latest': there is no store (<cwd>/mlflow.db does "
        "not exist); expected a stage-one run: run stage one first, here (python -m "
        "ms_exp.run +experiment=dim_reduce_stage_one), or name its store with "
        "tracking.uri=...",
    ),
    "stage-one run not in the store": bad(
        *DIM_REDUCE,
        f"boost.stage_one_run_id={UNKNOWN_RUN}",
        store=True,
        message=f"boost.stage_one_run_id='{UNKNOWN_RUN}': no such run; expected the id of a "
        "run in sqlite:///<cwd>/mlflow.db",
    ),
    "strategy file to load missing": bad(
        "parallel=semi_auto",
        "checkpoint.strategy.load_file=/no/such/strategy.ckpt",
        message="checkpoint.strategy.load_file='/no/such/strategy.ckpt': not allowed; "
        "expected '' (none) or a strategy file that exists",
    ),
    "re-run of a run not in the store": bad(
        "--from-run",
        UNKNOWN_RUN,
        store=True,
        message=f"--from-run={UNKNOWN_RUN}: no such run in sqlite:///<cwd>/mlflow.db (Run "
        f"with id={UNKNOWN_RUN} not found); expected the id of a run in that store",
    ),
    "re-run without a store": bad(
        f"--from-run={UNKNOWN_RUN}",
        store=False,
        message=f"--from-run={UNKNOWN_RUN}: no MLflow store at <cwd>/mlflow.db; expected the "
        "id of a run in an existing store (name the run's store with "
        "tracking.uri=...)",
    ),
    "tracking URI scheme": bad(
        "tracking.uri=ftp://mlflow.example",
        message="tracking.uri='ftp://mlflow.example': not allowed; expected null "
        "(sqlite:///mlflow.db here) or a URI of scheme sqlite, http, https, file, "
        "databricks, postgresql, mysql, mssql",
    ),
    "tracking store under a file": bad(
        "tracking.uri=sqlite:///<data>/a_file/mlflow.db",
        setup=file_in_the_way,
        message="tracking.uri='sqlite:///<data>/a_file/mlflow.db': not allowed; expected a "
        "writable folder (<data>/a_file is a file, not a folder)",
    ),
    # --- output folders: unwritable, unnamed, full
    "run folder under a file": bad(
        "hydra.run.dir=<data>/a_file/run",
        setup=file_in_the_way,
        store=BOTH,
        message="hydra.run.dir='<data>/a_file/run': not allowed; expected a writable folder "
        "(<data>/a_file is a file, not a folder)",
    ),
    "sweep folder under a file": bad(
        "-m",
        "hydra.sweep.dir=<data>/a_file/sweep",
        "trainer.epochs=1,2",
        setup=file_in_the_way,
        message="hydra.sweep.dir='<data>/a_file/sweep': not allowed; expected a writable "
        "folder (<data>/a_file is a file, not a folder)",
    ),
    "run folder empty": bad(
        "hydra.run.dir=",
        message="hydra.run.dir='': not allowed; expected a folder path (relative paths are "
        "below the working directory)",
    ),
    "run folder name longer than the filesystem's NAME_MAX": bad(
        "hydra.run.dir=" + "x" * 300,
        setup=filesystem_limits,
        message=f"hydra.run.dir='{'x' * 50}...{'x' * 20}': not allowed; expected a folder path "
        "whose names have at most <name_max> bytes each, the limit of the filesystem "
        f"at <cwd> ({'x' * 50}...{'x' * 20} has 300)",
    ),
    "run folder path longer than the filesystem's PATH_MAX": bad(
        "hydra.run.dir=" + DEEP_FOLDER,
        setup=filesystem_limits,
        message=f"hydra.run.dir='{'y' * 50}...{'y' * 20}': not allowed; expected a folder path "
        "of at most <path_limit> bytes, the PATH_MAX of <path_max> at <cwd> less 200 "
        "for what a run writes inside it (it has <deep_size> as an absolute path)",
    ),
    "run folder on a full disk": bad(
        "hydra.run.dir=<data>/full/run",
        setup=full_disk,
        store=BOTH,
        message="hydra.run.dir='<data>/full/run': not allowed; expected a folder on a "
        "filesystem with at least 67108864 bytes (64 MiB) free (<data>/full has "
        "1048576 bytes free)",
    ),
    "sweep folder on a full disk": bad(
        "-m",
        "hydra.sweep.dir=<data>/full/sweep",
        "trainer.epochs=1,2",
        setup=full_disk,
        message="hydra.sweep.dir='<data>/full/sweep': not allowed; expected a folder on a "
        "filesystem with at least 67108864 bytes (64 MiB) free (<data>/full has "
        "1048576 bytes free)",
    ),
    "tracking store on a full disk": bad(
        "tracking.uri=sqlite:///<data>/full/mlflow.db",
        setup=full_disk,
        store=BOTH,
        message="tracking.uri='sqlite:///<data>/full/mlflow.db': not allowed; expected a "
        "folder on a filesystem with at least 67108864 bytes (64 MiB) free "
        "(<data>/full has 1048576 bytes free)",
    ),
    # --- malformed dataset files
    "mnist idx file missing": bad(
        "dataset=mnist",
        "dataset.path=<data>/mnist",
        setup=mnist_missing_file,
        message="dataset.path='<data>/mnist': not allowed; expected a folder with the MNIST "
        "idx files (t10k-labels-idx1-ubyte missing)",
    ),
    "mnist idx magic number": bad(
        "dataset=mnist",
        "dataset.path=<data>/mnist",
        setup=mnist_wrong_magic,
        store=BOTH,
        message="dataset.path='<data>/mnist': not allowed; expected MNIST idx files as "
        "MnistDataset reads them (train-images-idx3-ubyte has magic number 2049, "
        "not 2051)",
    ),
    "mnist idx file truncated": bad(
        "dataset=mnist",
        "dataset.path=<data>/mnist",
        setup=mnist_truncated,
        message="dataset.path='<data>/mnist': not allowed; expected MNIST idx files as "
        "MnistDataset reads them (t10k-images-idx3-ubyte is 7756 bytes; its header "
        "says 7856 (truncated or not an idx file))",
    ),
    "mnist labels fewer than images": bad(
        "dataset=mnist",
        "dataset.path=<data>/mnist",
        setup=mnist_too_few_labels,
        message="dataset.path='<data>/mnist': not allowed; expected MNIST idx files as "
        "MnistDataset reads them (train-labels-idx1-ubyte holds 19 labels for 20 "
        "images in train-images-idx3-ubyte)",
    ),
    "mnist images not 28x28": bad(
        "dataset=mnist",
        "dataset.path=<data>/mnist",
        setup=mnist_wrong_size,
        message="dataset.path='<data>/mnist': not allowed; expected MNIST idx files as "
        "MnistDataset reads them (train-images-idx3-ubyte holds 32x32 images, not "
        "28x28)",
    ),
    "image folder without class folders": bad(
        "dataset=imagenet",
        "dataset.path=<data>/images",
        setup=images_without_classes,
        message="dataset.train_dir='train': not allowed; expected a folder of class folders "
        "under <data>/images",
    ),
    "image class folders without images": bad(
        "dataset=imagenet",
        "dataset.path=<data>/images",
        setup=images_without_images,
        message="dataset.eval_dir='val': not allowed; expected class folders holding images "
        "(.jpeg, .JPEG, .Jpeg, .jpg, ...)",
    ),
    "image files that are not images": bad(
        "dataset=imagenet",
        "dataset.path=<data>/images",
        setup=images_not_images,
        store=BOTH,
        message="dataset.train_dir='train': not allowed; expected class folders of JPEG, PNG "
        "or BMP images (dog/dog_train_0000.JPEG is none of them)",
    ),
    "criteo meta file not JSON": bad(
        *CRITEO,
        setup=criteo_meta_not_json,
        message="dataset.path='<data>/criteo': not allowed; expected a readable "
        "criteo_meta.json (Expecting value: line 1 column 29 (char 28))",
    ),
    "criteo folder of the first format": bad(
        *CRITEO,
        setup=criteo_first_format,
        message="dataset.path='<data>/criteo': not allowed; expected a folder written by "
        "this version of the Criteo converter (criteo_meta.json format 2; this one "
        "is format 1 (one sample per record)); convert again with `python -m "
        "ms_exp.data.criteo_convert RAW OUT_DIR --overwrite`",
    ),
    "criteo records not MindRecord": bad(
        *CRITEO,
        setup=criteo_not_mindrecord,
        store=BOTH,
        message="dataset.path='<data>/criteo': not allowed; expected a folder of MindRecord "
        "files written by the Criteo converter (train.mindrecord is not a MindRecord "
        "file)",
    ),
    "criteo records without index": bad(
        *CRITEO,
        setup=criteo_without_index,
        message="dataset.path='<data>/criteo': not allowed; expected a folder of MindRecord "
        "files written by the Criteo converter (eval.mindrecord has no index: "
        "eval.mindrecord.db is missing)",
    ),
    "criteo records truncated": bad(
        *CRITEO,
        setup=criteo_truncated,
        message="dataset.path='<data>/criteo': not allowed; expected a folder of MindRecord "
        "files written by the Criteo converter (train.mindrecord is 2000 bytes, "
        "shorter than its 4096-byte header region: truncated)",
    ),
    "criteo records packed otherwise": bad(
        *CRITEO,
        setup=criteo_other_packing,
        message="dataset.path='<data>/criteo': not allowed; expected MindRecord files of "
        "columns feat_ids, feat_vals, label with 10 samples a record as "
        "criteo_meta.json says (eval.mindrecord has {'feat_ids': [1, 39], "
        "'feat_vals': [1, 39], 'label': [1, 1]}); convert again with `python -m "
        "ms_exp.data.criteo_convert RAW OUT_DIR --overwrite`",
    ),
    "criteo batch not whole records": bad(
        *CRITEO,
        "dataset.batch_size=15",
        setup=criteo,
        message="dataset.batch_size=15: not allowed; expected a multiple of 10, the samples "
        "per record (samples_per_record) of <data>/criteo; or convert the data again "
        "with a --samples-per-record that divides the batch size",
    ),
    # --- ports in use
    "master port in use": bad(
        "parallel=data",
        "parallel.launcher.master_port=<port>",
        setup=busy_port,
        store=BOTH,
        message="parallel.launcher.master_port=<port>: not allowed; expected a free port "
        "(another process is listening on 127.0.0.1:<port>)",
    ),
    "one master port for concurrent jobs": bad(
        "-m",
        "hydra/launcher=concurrent",
        "parallel=data",
        "optimizer.lr=0.01,0.1",
        "parallel.launcher.master_port=8118",
        store=BOTH,
        message="parallel.launcher.master_port=8118: not allowed; expected a different port "
        "for each distributed job that hydra/launcher=concurrent runs at the same "
        "time (jobs 0 and 1 both use 8118; sweep it too, e.g. "
        "parallel.launcher.master_port=8118,8119)",
    ),
    # --- resuming
    "resume from a path that does not exist": bad(
        "trainer.resume=/no/such/run",
        message="trainer.resume='/no/such/run': not allowed; expected auto, an MLflow run id, "
        "a run directory or a .ckpt file that exists",
    ),
    "resume from a folder that is not a run": bad(
        "trainer.resume=<data>",
        message="trainer.resume='<data>': not allowed; expected auto, an MLflow run id, a run "
        "directory or a .ckpt file (<data> has no checkpoints/ folder)",
    ),
    "resume from a file that is not a checkpoint": bad(
        "trainer.resume=<data>/notes.txt",
        setup=lambda scene: (
            scene.data.mkdir(parents=True, exist_ok=True),
            (scene.data / "notes.txt").write_text("not a checkpoint\n"),
        ),
        message="trainer.resume='<data>/notes.txt': not allowed; expected auto, an MLflow run "
        "id, a run directory or a .ckpt file (.ckpt or .safetensors)",
    ),
    "resume a run id the store does not have": bad(
        f"trainer.resume={UNKNOWN_RUN}",
        store=True,
        message=f"trainer.resume='{UNKNOWN_RUN}': not allowed; expected auto, an MLflow run "
        "id, a run directory or a .ckpt file (no such run in sqlite:///<cwd>/mlflow.db)",
    ),
    "resume a run id without a store": bad(
        f"trainer.resume={UNKNOWN_RUN}",
        message=f"trainer.resume='{UNKNOWN_RUN}': not allowed; expected auto, an MLflow run "
        "id, a run directory or a .ckpt file (no such run: there is no MLflow store at "
        "<cwd>/mlflow.db)",
    ),
    "resume a run without checkpoints": bad(
        "trainer.resume=<data>/run",
        setup=lambda scene: scene.data.joinpath("run/checkpoints/rank_0").mkdir(parents=True),
        message="trainer.resume='<data>/run': not allowed; expected a run with a "
        "checkpoint-<epoch>_<step>.ckpt in each of its 1 rank folders "
        "(<data>/run/checkpoints)",
    ),
    "resume from a truncated checkpoint": bad(
        "trainer.resume=<data>/run/checkpoints/rank_0/checkpoint-1_44.ckpt",
        setup=truncated_checkpoint_in_a_run,
        store=BOTH,
        message="trainer.resume='<data>/run/checkpoints/rank_0/checkpoint-1_44.ckpt': not "
        "allowed; expected a checkpoint that reads back whole (checkpoint "
        "<data>/run/checkpoints/rank_0/checkpoint-1_44.ckpt is damaged (truncated or "
        "corrupt: MindSpore's CRC check or parse failed: Failed to read the "
        "checkpoint file <data>/run/checkpoints/rank_0/checkpoint-1_44.ckpt. The file "
        "may be corrupted, and the content cannot be parsed.)); name an older "
        "checkpoint, or the run directory to resume from its newest good one",
    ),
    "resume from a checkpoint outside a run": bad(
        "trainer.resume=<data>/loose.ckpt",
        setup=checkpoint_outside_a_run,
        message="trainer.resume='<data>/loose.ckpt': not allowed; expected a checkpoint in a "
        "run directory, <run dir>/checkpoints/rank_<r>/<file>.ckpt (loose.ckpt is in "
        "<data>); to evaluate a loose file use python -m ms_exp.eval --checkpoint",
    ),
    "run folder whose record is a list": bad(
        "hydra.run.dir=<data>/run",
        setup=run_record_of_a_list,
        store=BOTH,
        message="<data>/run/run.json: damaged (not a run record); it names the run that owns "
        "the folder: choose another folder, or move the file away to start a new run "
        "there",
    ),
    "resume a run whose rank folder is a file": bad(
        "trainer.resume=<data>/run",
        setup=rank_folder_a_file,
        store=BOTH,
        message="trainer.resume='<data>/run': not allowed; expected a run with a "
        "checkpoint-<epoch>_<step>.ckpt in each of its 1 rank folders "
        "(<data>/run/checkpoints/rank_0 is a file, not a folder)",
    ),
    "resume in place a run whose rank folder is a file": bad(
        "hydra.run.dir=<data>/run",
        "trainer.resume=auto",
        setup=rank_folder_a_file,
        store=BOTH,
        message="hydra.run.dir='<data>/run': not allowed; expected a run folder whose "
        "checkpoints/rank_0 is a folder or absent (<data>/run/checkpoints/rank_0 is a "
        "file, not a folder)",
    ),
    "resume a run that saves no checkpoint": bad(
        "checkpoint=none",
        "trainer.resume=auto",
        store=BOTH,
        message="trainer.resume='auto': not allowed; expected null with checkpoint=none (a "
        "run that saves no checkpoint cannot be resumed)",
    ),
    "resume stage one's snapshot series": bad(
        "checkpoint.snapshots.per_epoch=2",
        "trainer.resume=auto",
        message="trainer.resume='auto': not allowed; expected null with "
        "checkpoint.snapshots.per_epoch > 0 (the snapshot series cannot be continued)",
    ),
    # --- sweeps with one bad job
    "one bad job of a sweep": bad(
        "-m",
        "trainer.epochs=1,0",
        store=BOTH,
        message="trainer.epochs=0: not allowed; expected an integer >= 1",
    ),
    "one bad learning rate of a sweep": bad(
        "-m", "optimizer.lr=0.1,-1", message="optimizer.lr=-1.0: not allowed; expected a number > 0"
    ),
    "one sweep job without its data": bad(
        "-m",
        "dataset=digits,mnist",
        message="dataset.path=null: not allowed; expected a folder that exists (set it, or "
        "the DATA_PATH environment variable)",
    ),
}


@pytest.fixture(scope="module")
def existing_store(tmp_path_factory) -> Path:
    """An MLflow store with one finished run, as a working directory holds after a run."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    client = MlflowClient(f"sqlite:///{path}")
    experiment = client.create_experiment("ms_exp", artifact_location=path.parent.as_uri())
    run = client.create_run(experiment, run_name="earlier")
    client.set_terminated(run.info.run_id)
    return path


def run_count(database: Path) -> int:
    with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as connection:
        return connection.execute("SELECT count(*) FROM runs").fetchone()[0]


CASES = [
    pytest.param(case, with_store, id=f"{name}{' (store)' if with_store else ''}")
    for name, case in BAD_INPUTS.items()
    for with_store in (False, True)
    if case.store in (BOTH, with_store)
]


@pytest.mark.e2e
@pytest.mark.parametrize("case,with_store", CASES)
def test_bad_input_is_refused_in_one_line_and_leaves_nothing(
    case, with_store, workdir, tmp_path_factory, existing_store, monkeypatch, capsys
):
    monkeypatch.delenv("DATA_PATH", raising=False)
    # Other jobs on this machine may hold the port the cases name; "master port in use"
    # holds a port of its own.
    port_is_free = parallel_checks.port_is_free
    monkeypatch.setattr(
        parallel_checks,
        "port_is_free",
        lambda address, port: port == NAMED_MASTER_PORT or port_is_free(address, port),
    )
    with ExitStack() as stack:
        scene = Scene(tmp_path_factory.mktemp("data"), workdir, monkeypatch, stack)
        if case.setup:
            case.setup(scene)
        if with_store:
            shutil.copy(existing_store, workdir / "mlflow.db")
        rc = main([scene.fill(arg) for arg in case.argv])
    out, err = capsys.readouterr()
    assert (rc, err.strip().splitlines()) == (2, [ERROR + scene.fill(case.message)])
    assert "s3cret" not in out + err  # the cases' passwords: printed nowhere (nor left below)
    left = sorted(p.name for p in workdir.iterdir())
    if with_store:
        assert left == ["mlflow.db"]  # no outputs/, multirun/, mlruns/, journal
        assert (workdir / "mlflow.db").read_bytes() == existing_store.read_bytes()
        assert run_count(workdir / "mlflow.db") == 1
    else:
        assert left == []  # no outputs/, multirun/, mlflow.db, mlruns/


def test_the_corpus_holds_at_least_45_distinct_bad_inputs():
    assert (
        len({(case.argv, case.setup, case.store) for case in BAD_INPUTS.values()})
        == len(BAD_INPUTS)
        >= 45
    )


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux's read-only /proc")
def test_read_only_output_directory_is_refused_even_for_root(workdir, capsys):
    assert main(["hydra.run.dir=/proc/ms_exp_run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    # The reason is the kernel's (EACCES, ENOENT, EROFS, ... depending on its version).
    assert line.startswith(
        ERROR + "hydra.run.dir='/proc/ms_exp_run': not allowed; expected a writable folder (/proc: "
    ) and line.endswith(")"), line
    assert list(workdir.iterdir()) == []


# --- the converter's raw input ----------------------------------------------------------

CONVERTER = "ms_exp.data.criteo_convert"


@pytest.mark.parametrize("kind", ["wrong field count", "bad integer"])
def test_criteo_text_of_malformed_lines_is_refused_before_anything_is_written(
    kind, workdir, tmp_path_factory, capsys
):
    from ms_exp.data.criteo_convert import main as convert

    raw = tmp_path_factory.mktemp("raw") / "day_0.txt"
    raw.write_text("".join(malformed_criteo_line(kind, line) + "\n" for line in sample_lines(5)))
    assert convert([str(raw), "criteo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{CONVERTER}: error: RAW='{raw}': no valid line among 5 lines (5 {kind} "
        "(first at lines 1, 2, 3, 4, 5)); expected Criteo text: label 0/1, 13 "
        "integer and 26 hexadecimal fields, tab-separated"
    ]
    assert list(workdir.iterdir()) == []  # no OUT_DIR, no partial folder


# --- refused before the heavy imports ---------------------------------------------------


def test_refusal_happens_before_mindspore_is_imported(tmp_path):
    """Range checks and the dataset header checks import neither MindSpore nor MLflow."""
    scene = Scene(tmp_path / "data", tmp_path, pytest.MonkeyPatch(), ExitStack())
    scene.data.mkdir()
    mnist_wrong_magic(scene)
    criteo_not_mindrecord(scene)
    images_not_images(scene)
    argvs: List[List[str]] = [
        ["dataset.batch_size=0"],
        ["dataset=mnist", f"dataset.path={scene.data}/mnist"],
        [scene.fill(arg) for arg in CRITEO],
        ["dataset=imagenet", f"dataset.path={scene.data}/images"],
    ]
    code = (
        "import sys; from ms_exp.run import main; "
        f"codes = [main(argv) for argv in {argvs!r}]; "
        "print(codes, 'mindspore' in sys.modules, 'mlflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path / "data",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[2, 2, 2, 2] False False"
