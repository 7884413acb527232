"""What a checkpoint costs. Both parts run by default (``--parts``).

Sliced: integrated against sliced on 8 emulated ranks. The tutorials' Network (about 1M to 100M
trainable parameters) as a training checkpoint holds it: ``TrainOneStepCell(WithLossCell(net,
loss), optimizer)`` with ms_exp's optimizer and loss (weights, ``moments.*``,
``learning_rate``, ``momentum``, ``global_step``). Layouts: ``conf/parallel/semi_auto.yaml``
as ms_exp composes it (the tutorial's strategies: layer1 and layer3 sharded, layer2
replicated) and every layer sharded 8 ways; ``operator_layouts`` then ``checkpoint_layouts``.
In interleaved rounds (round, size, strategies, rank):

- integrated: ``save_checkpoint`` of every full entry (every rank writes the whole model; the
  files are identical, so ``--integrated-ranks`` ranks per round are timed, rotating);
- CPU emulation: ms_exp's ``SemiAutoLayouts._slice`` on that file (load, slice, save with a
  CRC, rename): what ms_exp pays per rank on CPU, where MindSpore refuses semi-auto;
- sliced: ``save_checkpoint`` of the rank's slice of each entry (``slice_for_rank``, timed
  apart): what MindSpore writes with integrated_save=False. Every rank, every round.

Each sliced file must be exactly the analytic payload (each slice's element count from its
Layout x itemsize) plus the protobuf framing of MindSpore's ``Checkpoint`` records (computed
from the wire format); the emulation's file that plus the CRC trailer.

Formats: the train networks of the default job (``compose_config([])``: the MLP on digits)
and of ``model=resnet`` (ResNet-50, width 1.0, on the default dataset), built with ms_exp's
``create_network``, optimizer and loss, saved with ``epoch_num`` and ``step_num`` as its
ModelCheckpoint saves them. Per round, model and format (ckpt, safetensors):

- save: ms_exp's ``save_weights`` (a .ckpt with ``crc_check=True``; a safetensors file, then
  the SHA-256 digest ms_exp records beside it); load: ``load_verified`` (CRC, or digest then
  ``load_checkpoint``);
- async: ``save_checkpoint(..., async_save=True)``: until it returns (what training waits;
  MindSpore copies every tensor first) and until the file is written (its "asyn_save_ckpt"
  thread joined, then a safetensors file's digest, as TimedModelCheckpoint does);
- share: each rank's file of a 2-rank data-parallel ``remove_redundancy`` save. MindSpore
  deduplicates only inside a distributed job, so the split is MindSpore's own
  ``remove_param_redundancy`` over what ``get_parameter_redundancy`` gives a Cell on 2 ranks
  (every name on ranks (0, 1): the sorted names dealt out in turn), and each share is saved
  in this process with ``choice_func`` and ``remove_redundancy=True`` as ``ModelCheckpoint``
  passes them (docs/design.md#remove-redundancy shows the same split in a real 2-rank job).

Every file's size is checked: a .ckpt's payload + framing + CRC trailer, a safetensors
file's 8 + JSON header + payload, from the entries' shapes and dtypes. Times are
``perf_counter`` around the call (no fsync, as MindSpore does none); files are deleted after
each measurement.

    python benchmarks/checkpoint_cost.py                      # about 7 minutes on 2 cores
    python benchmarks/checkpoint_cost.py --parts formats --rounds 2
    python benchmarks/checkpoint_cost.py --parts sliced --sizes 1e6 1e7 --rounds 2

Writes benchmarks/results/checkpoint_cost.md (a part not run keeps its last tables),
checkpoint_cost.png (sliced) and checkpoint_cost_formats.png.
"""

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from math import prod
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
from benchlib import RESULTS, command_line, machine_line, pyplot, row, spread

IN_FEATURES, NUM_CLASSES = 784, 10
ALL_SHARDED = {
    "layer1.matmul": [[1, 1], [1, 8]],
    "layer2.matmul": [[1, 8], [8, 1]],
    "layer3.matmul": [[1, 8], [8, 1]],
}
RECORD_BYTES = 512 * 1024 * 1024  # save_checkpoint writes a Tensor in records of this size
MB = 1e6
CRC_TRAILER = len(b"crc_num") + 10  # crc_check=True ends a .ckpt with b"crc_num" + 10 bytes


def hidden_for(params: float) -> int:
    """Hidden size, a multiple of 8 (so that 8-way splits are even), whose Network has about
    ``params`` trainable parameters: h^2 + (in + classes + 2) h + classes."""
    b = IN_FEATURES + NUM_CLASSES + 2
    root = (-b + (b * b + 4 * (params - NUM_CLASSES)) ** 0.5) / 2
    return max(8, 8 * round(root / 8))


def train_cell(cfg: Any, network: Any, num_classes: int) -> Any:
    """``TrainOneStepCell(WithLossCell(network, loss), optimizer)`` with ms_exp's own loss and
    optimizer of ``cfg``: its parameters are what a training checkpoint holds."""
    from mindspore import nn

    from ms_exp.train.losses import create_loss
    from ms_exp.train.optimizer import create_optimizer

    optimizer = create_optimizer(cfg.optimizer, network, 1, int(cfg.trainer.epochs))
    loss = create_loss(cfg.loss, num_classes)
    return nn.TrainOneStepCell(nn.WithLossCell(network, loss), optimizer)


def build_model(hidden: int, cfg, strategy_sets) -> Dict[str, object]:
    """Numpy arrays of a training checkpoint and each strategy set's checkpoint layouts."""
    from ms_exp.models.mlp import Network
    from ms_exp.parallel.layout import checkpoint_layouts, operator_layouts

    network = Network(IN_FEATURES, NUM_CLASSES, hidden)
    train = train_cell(cfg, network, NUM_CLASSES)
    arrays = {p.name: np.array(p.asnumpy()) for p in train.get_parameters()}
    shapes = {name: a.shape for name, a in arrays.items()}
    layouts = {
        label: checkpoint_layouts(
            shapes, operator_layouts(network, strategies, cfg.parallel.device_num)
        )
        for label, strategies in strategy_sets.items()
    }
    return {
        "hidden": hidden,
        "params": sum(p.size for p in network.trainable_params()),
        "arrays": arrays,
        "layouts": layouts,
    }


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _field_len(length: int) -> int:
    """A length-delimited protobuf field (field number < 16: one tag byte)."""
    return 1 + _varint_len(length) + length


def framing_bytes(name: str, shape, dtype: str, nbytes: int) -> int:
    """Bytes ``save_checkpoint`` adds around one entry's data: each record is a
    ``Checkpoint{value{tag, tensor{dims (unpacked), tensor_type, tensor_content}}}``."""
    total = 0
    for start in range(0, nbytes, RECORD_BYTES):
        content = min(RECORD_BYTES, nbytes - start)
        tensor = (
            sum(1 + _varint_len(d) for d in shape) + _field_len(len(dtype)) + _field_len(content)
        )
        total += _field_len(_field_len(len(name.encode())) + _field_len(tensor)) - content
    return total


def ms_dtype(array: np.ndarray) -> str:
    """The dtype string save_checkpoint writes: ``str(Tensor.dtype)``, "Float32"."""
    import mindspore as ms

    return str(ms.Tensor.from_numpy(array[:0] if array.ndim else array).dtype)


def expected_bytes(arrays, layouts) -> Dict[str, int]:
    """Analytic payload of a rank's sliced file (from the Layouts, not from slicing) and the
    file size it implies once framed. With even splits every rank's slice has the same
    shape (the rank picks which slice, not how big), so one figure serves all ranks."""
    payload = framing = 0
    for name, array in arrays.items():
        shape = layouts[name].slice_shape() if name in layouts else array.shape
        nbytes = prod(shape) * array.itemsize
        payload += nbytes
        framing += framing_bytes(name, shape, ms_dtype(array), nbytes)
    return {"payload": payload, "file": payload + framing}


def entries_for(arrays, layouts=None, rank: int = 0) -> List[dict]:
    """save_checkpoint's input: full entries, or ``rank``'s slices of those with a layout.
    ``Tensor.from_numpy`` shares memory, so building the list copies nothing but slices."""
    import mindspore as ms

    from ms_exp.parallel.layout import slice_for_rank

    layouts = layouts or {}
    return [
        {
            "name": name,
            "data": ms.Tensor.from_numpy(
                slice_for_rank(a, layouts[name], rank) if name in layouts else a
            ),
        }
        for name, a in arrays.items()
    ]


def timed_save(entries, path: Path) -> Dict[str, float]:
    import mindspore as ms

    start = time.perf_counter()
    ms.save_checkpoint(entries, str(path))
    return {"s": time.perf_counter() - start, "bytes": path.stat().st_size}


def timed_emulation(model, label: str, rank: int, path: Path, device_num: int) -> Dict[str, float]:
    """ms_exp's own CPU emulation on an integrated file: SemiAutoLayouts._slice, the method
    its callback runs on every checkpoint ModelCheckpoint leaves (load, slice, save, rename)."""
    from ms_exp.parallel.emulation import SemiAutoLayouts

    emulation = SemiAutoLayouts(
        None,
        {},
        device_num,
        rank,
        path.parent,
        path.stem,
        strategy_file="",
        slice_files=True,
        save_steps=1,
    )
    emulation.layouts = model["layouts"][label]
    start = time.perf_counter()
    emulation._slice(path)
    return {"s": time.perf_counter() - start, "bytes": path.stat().st_size}


def measure_rank(model, label, rank, device_num, integrated: bool, workdir: Path, result):
    """One rank of one round: integrated save then the emulation on its file (when timed
    this round), then the sliced save. Appends to ``result``; deletes the files."""
    line = f"  rank {rank}"
    path = workdir / "bench.ckpt"
    if integrated:
        saved = timed_save(model["full"], path)
        result["integrated_s"].append(saved["s"])
        result["integrated_bytes"].append(saved["bytes"])
        emulated = timed_emulation(model, label, rank, path, device_num)
        result["emulation_s"].append(emulated["s"])
        result["emulated_bytes"].append((rank, emulated["bytes"]))
        path.unlink()
        line += (
            f"  integrated {saved['s']:7.3f} s {saved['bytes'] / MB:8.2f} MB"
            f"  emulation {emulated['s']:7.3f} s"
        )
    start = time.perf_counter()
    entries = entries_for(model["arrays"], model["layouts"][label], rank)
    result["slicing_s"].append(time.perf_counter() - start)
    saved = timed_save(entries, path)
    del entries
    path.unlink()
    result["sliced_s"].append(saved["s"])
    result["sliced_bytes"].append((rank, saved["bytes"]))
    print(f"{line}  sliced {saved['s']:7.3f} s {saved['bytes'] / MB:8.2f} MB", flush=True)


def integrated_ranks(round_: int, per_round: int, device_num: int) -> set:
    """Ranks whose integrated save is timed in ``round_``, rotating over the rounds."""
    return {(round_ * per_round + i) % device_num for i in range(per_round)}


def measure(args, models, labels, device_num: int, workdir: Path):
    keys = (
        "integrated_s integrated_bytes emulation_s emulated_bytes slicing_s sliced_s sliced_bytes"
    )
    results = {(size, label): {k: [] for k in keys.split()} for size in models for label in labels}
    timed_save(models[min(models)]["full"], workdir / "warmup.ckpt")  # first call's setup
    for round_ in range(args.rounds):
        timed = integrated_ranks(round_, args.integrated_ranks, device_num)
        for size, model in models.items():
            for label in labels:
                print(
                    f"round {round_ + 1}/{args.rounds}, {model['params']:,} parameters, {label}:",
                    flush=True,
                )
                for rank in range(device_num):
                    measure_rank(
                        model, label, rank, device_num, rank in timed, workdir, results[size, label]
                    )
    return results


def bytes_check(model, label, result) -> Dict[str, object]:
    """Every sliced file (every rank, every round) must have exactly the expected size, every
    emulated file that and the CRC trailer (ms_exp saves a .ckpt with its CRC); the
    integrated file that of the full payload framed the same way."""
    expected = expected_bytes(model["arrays"], model["layouts"][label])
    full = expected_bytes(model["arrays"], {})
    checked = [(rank, size, 0) for rank, size in result["sliced_bytes"]]
    checked += [(rank, size, CRC_TRAILER) for rank, size in result["emulated_bytes"]]
    bad = [
        f"rank {rank}: {size:,} B, expected {expected['file'] + trailer:,} B"
        for rank, size, trailer in checked
        if size != expected["file"] + trailer
    ]
    bad += [
        f"integrated: {size:,} B, expected {full['file']:,} B"
        for size in set(result["integrated_bytes"])
        if size != full["file"]
    ]
    return {"payload": expected["payload"], "full": full, "bad": bad}


def mb_range(values) -> str:
    low, high = min(values) / MB, max(values) / MB
    return f"{low:.3f}" if low == high else f"{low:.3f}-{high:.3f}"


def table(args, models, labels, results, device_num: int) -> str:
    lines = [
        f"Checkpoint cost per rank, {device_num} ranks emulated, the tutorials' Network with "
        "its Momentum states: `save_checkpoint` of the whole model (integrated) against "
        "each rank's slices (sliced), and ms_exp's CPU emulation (`SemiAutoLayouts._slice` "
        f"on the integrated file: load, slice, save, rename). {args.rounds} interleaved "
        f"rounds; seconds median (min-max) over rounds x ranks; integrated and emulation "
        f"timed for {args.integrated_ranks} of {device_num} ranks per round, rotating (all "
        "ranks write the same integrated file); sliced for every rank. MB = 10^6 bytes.",
        "",
        machine_line(),
        "",
        command_line("checkpoint_cost.py"),
        "",
        "| parameters | strategies | integrated save (s) | sliced save (s) | slicing, numpy (s) "
        "| CPU emulation (s) | integrated / sliced |",
        "|---|---|---|---|---|---|---|",
    ]
    checks = {}
    for size, model in models.items():
        for label in labels:
            r = results[size, label]
            ratio = statistics.median(r["integrated_s"]) / statistics.median(r["sliced_s"])
            lines.append(
                f"| {model['params']:,} | {label} | {spread(r['integrated_s'], '.3f')} "
                f"| {spread(r['sliced_s'], '.3f')} | {spread(r['slicing_s'], '.3f')} "
                f"| {spread(r['emulation_s'], '.3f')} | {ratio:.1f} |"
            )
            checks[size, label] = bytes_check(model, label, r)
    lines += [
        "",
        "Bytes per rank. Analytic payload: each sliced entry's slice (element count from "
        "its Layout x itemsize), other entries whole. Framing: file - payload (names, dims, "
        "dtype strings, length prefixes). Check: every rank's sliced file exactly payload + "
        "protobuf framing, the emulation's that + the 17-byte CRC trailer, in every round.",
        "",
        "| parameters | strategies | integrated (MB) | sliced file (MB, ranks min-max) "
        "| analytic payload (MB) | share of integrated payload | framing, integrated / sliced (B) "
        "| bytes check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size, model in models.items():
        for label in labels:
            c, r = checks[size, label], results[size, label]
            sliced = [b for _, b in r["sliced_bytes"]]
            full = c["full"]
            framing = sorted({b - c["payload"] for _, b in r["sliced_bytes"]})
            verdict = (
                "matches" if not c["bad"] else "**does not match**: " + "; ".join(c["bad"][:3])
            )
            lines.append(
                f"| {model['params']:,} | {label} | {mb_range(r['integrated_bytes'])} "
                f"| {mb_range(sliced)} | {c['payload'] / MB:.3f} "
                f"| {c['payload'] / full['payload']:.4f} "
                f"| {full['file'] - full['payload']} / {'-'.join(map(str, framing))} "
                f"| {verdict} |"
            )
    return "\n".join(lines) + "\n"


def plot(models, labels, results, path: Path) -> None:
    plt = pyplot()
    figure, (seconds, sizes) = plt.subplots(1, 2, figsize=(12, 4.5))
    params = [m["params"] for m in models.values()]
    for label, marker in zip(labels, "os"):
        for key, style in (("integrated_s", "-"), ("sliced_s", "--"), ("emulation_s", ":")):
            values = [results[size, label][key] for size in models]
            median = [statistics.median(v) for v in values]
            errors = [
                [m - min(v) for m, v in zip(median, values)],
                [max(v) - m for m, v in zip(median, values)],
            ]
            seconds.errorbar(
                params,
                median,
                yerr=errors,
                fmt=marker + style,
                capsize=3,
                label=f"{key[:-2]}, {label}",
            )
        for key, style in (("integrated_bytes", "-"), ("sliced_bytes", "--")):
            per_rank = [
                max(b if isinstance(b, int) else b[1] for b in results[size, label][key])
                for size in models
            ]
            sizes.plot(
                params, [b / MB for b in per_rank], marker + style, label=f"{key[:-6]}, {label}"
            )
    for axis, ylabel in ((seconds, "seconds per rank"), (sizes, "MB per rank (max over ranks)")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("trainable parameters")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("Checkpoint cost per rank, 8 emulated ranks (median, min-max)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def check_disk(workdir: str, models) -> None:
    """Refuse to start without room for an integrated file, its emulated slice and the
    sliced file at once (MindSpore writes each to a temporary name first), plus 2 GB."""
    largest = max(sum(a.nbytes for a in m["arrays"].values()) for m in models.values())
    free = shutil.disk_usage(workdir).free
    if free < 3 * largest + 2e9:
        sys.exit(
            f"only {free / 1e9:.1f} GB free in {workdir}; need {(3 * largest + 2e9) / 1e9:.1f}"
        )


# ModelCheckpoint's append_info=["epoch_num", "step_num"] as ms_exp configures it.
APPEND = {"epoch_num": 1, "step_num": 1}
JOBS = {"default job": [], "model=resnet": ["model=resnet"]}
TIMES = {
    "save_s": "save (s)",
    "returned_s": "async: call returns (s)",
    "written_s": "async: file written (s)",
    "load_s": "load, checked (s)",
    "share_s": "one rank's share, save (s)",
}
FILES = ("whole", "rank 0", "rank 1")


def job_model(overrides: List[str]) -> Dict[str, Any]:
    """The train network of ``compose_config(overrides)`` as ms_exp builds it, each entry's
    (shape, dtype string, bytes) as save_checkpoint writes it, and MindSpore's two-rank
    data-parallel shares: ``get_parameter_redundancy`` of a Cell gives every parameter the
    group's ranks, ``remove_param_redundancy`` then deals the sorted names out in turn."""
    from mindspore.train._utils import remove_param_redundancy

    from ms_exp.data.build import declared_spec
    from ms_exp.models import create_network
    from ms_exp.preflight.compose import compose_config

    cfg = compose_config(overrides)
    spec = declared_spec(cfg.dataset)
    network = create_network(cfg.model, spec)
    train = train_cell(cfg, network, spec.num_classes)
    entries = {p.name: (tuple(p.shape), str(p.dtype), p.nbytes) for p in train.get_parameters()}
    shares = remove_param_redundancy({name: ((0, 1),) for name in sorted(entries)})
    entries.update({name: ((), "Int64", 8) for name in APPEND})
    return {
        "train": train,
        "params": sum(p.size for p in network.trainable_params()),
        "entries": entries,
        "shares": {rank: shares[rank] for rank in sorted(shares)},
    }


def checked_size(model: Dict[str, Any], fmt: str, path: Path, names: Any = None) -> tuple:
    """(file size, expected size) of ``path``, holding every entry or a share's ``names``
    (and APPEND's, which every share holds). A .ckpt: the payload, each record's protobuf
    framing and the CRC trailer; a safetensors file: 8 bytes of header length, the JSON
    header (its length read from the file) and the payload."""
    kept = [n for n in model["entries"] if names is None or n in names or n in APPEND]
    payload = sum(model["entries"][n][2] for n in kept)
    if fmt == "ckpt":
        framing = sum(framing_bytes(n, *model["entries"][n]) for n in kept) + CRC_TRAILER
    else:
        with open(path, "rb") as stream:
            framing = 8 + int.from_bytes(stream.read(8), "little")
    return path.stat().st_size, payload + framing


def async_save(model: Dict[str, Any], fmt: str, path: Path) -> Dict[str, float]:
    """``save_checkpoint(..., async_save=True)`` with ms_exp's options: seconds until the call
    returns (what training waits) and until the file is written, as TimedModelCheckpoint
    sees it: MindSpore's "asyn_save_ckpt" thread joined, then a safetensors file's digest."""
    import mindspore as ms
    from mindspore.train.serialization import _wait_async_thread_save_ckpt

    from ms_exp.checkpoint.files import record_digest

    options = {"format": "safetensors"} if fmt == "safetensors" else {"crc_check": True}
    start = time.perf_counter()
    ms.save_checkpoint(
        model["train"], str(path), async_save=True, append_dict=dict(APPEND), **options
    )
    returned = time.perf_counter() - start
    _wait_async_thread_save_ckpt()
    record_digest(path)
    return {"returned_s": returned, "written_s": time.perf_counter() - start}


def measure_format(model: Dict[str, Any], fmt: str, path: Path, result: Dict[str, list]) -> str:
    """One round of one model and format: synchronous save and checked load, asynchronous
    save, then each rank's share. Appends to ``result``; deletes the files."""
    from ms_exp.checkpoint.files import load_verified, remove_checkpoint, save_weights

    def timed(call: Any, *args: Any, **kwargs: Any) -> float:
        start = time.perf_counter()
        call(*args, **kwargs)
        return time.perf_counter() - start

    result["save_s"].append(timed(save_weights, model["train"], path, append_dict=dict(APPEND)))
    result["files"].append(("whole", *checked_size(model, fmt, path)))
    result["load_s"].append(timed(load_verified, path))
    remove_checkpoint(path)
    for key, value in async_save(model, fmt, path).items():
        result[key].append(value)
    result["files"].append(("async", *checked_size(model, fmt, path)))
    remove_checkpoint(path)
    for rank, names in model["shares"].items():
        share = {"choice_func": names.__contains__, "remove_redundancy": True}
        result["share_s"].append(
            timed(save_weights, model["train"], path, **share, append_dict=dict(APPEND))
        )
        result["files"].append((f"rank {rank}", *checked_size(model, fmt, path, names)))
        remove_checkpoint(path)
    return ", ".join(f"{TIMES[key][:-4]} {result[key][-1]:.3f} s" for key in TIMES)


def measure_formats(args: Any, models: Dict[str, Any], workdir: Path) -> Dict[tuple, dict]:
    from ms_exp.checkpoint.files import SUFFIXES, remove_checkpoint, save_weights

    keys = [*TIMES, "files"]
    results = {(job, fmt): {k: [] for k in keys} for job in models for fmt in SUFFIXES}
    for suffix in SUFFIXES.values():  # the first call's setup, untimed
        save_weights(next(iter(models.values()))["train"], workdir / f"warmup{suffix}")
        remove_checkpoint(workdir / f"warmup{suffix}")
    for round_ in range(args.rounds):
        for job, model in models.items():
            for fmt, suffix in SUFFIXES.items():
                line = measure_format(model, fmt, workdir / f"bench{suffix}", results[job, fmt])
                print(f"round {round_ + 1}/{args.rounds}, {job}, {fmt}: {line}", flush=True)
    return results


def file_sizes(result: Dict[str, list]) -> Dict[str, int]:
    return {kind: size for kind, size, _ in result["files"]}


def formats_table(args: Any, models: Dict[str, Any], results: Dict[tuple, dict]) -> str:
    lines = [
        "Checkpoint formats: the train network of the default job (the MLP on digits) and of "
        "`model=resnet` (ResNet-50, width 1.0) with its Momentum states, saved and loaded as "
        "ms_exp does (a .ckpt with its CRC, a safetensors file with ms_exp's SHA-256 digest, "
        "in its times); async: until `save_checkpoint(..., async_save=True)` returns and until "
        "the file is written; share: one rank's file of a 2-rank data-parallel "
        f"`remove_redundancy` save. {args.rounds} interleaved rounds; seconds median "
        "(min-max), shares over rounds x both ranks. MB = 10^6 bytes.",
        "",
        machine_line(),
        "",
        command_line("checkpoint_cost.py"),
        "",
        row("model (parameters)", "format", *TIMES.values()),
        "|---" * (2 + len(TIMES)) + "|",
    ]
    lines += [
        row(f"{job} ({models[job]['params']:,})", fmt, *(spread(r[k], ".3f") for k in TIMES))
        for (job, fmt), r in results.items()
    ]
    lines += [
        "",
        "Bytes. Whole: what every rank writes without `remove_redundancy`. Check: every file "
        "(whole, async, shares, every round) exactly a .ckpt's payload + protobuf framing + "
        "CRC trailer, a safetensors file's 8 + JSON header + payload.",
        "",
        row("model", "format", *(f"{k} (MB)" for k in FILES), "largest share / whole", "check"),
        "|---" * 7 + "|",
    ]
    for (job, fmt), r in results.items():
        size = file_sizes(r)
        bad = [f"{k}: {n:,} B, expected {want:,}" for k, n, want in r["files"] if n != want]
        lines.append(
            row(
                job,
                fmt,
                *(f"{size[kind] / MB:.3f}" for kind in FILES),
                f"{max(size['rank 0'], size['rank 1']) / size['whole']:.3f}",
                "matches" if not bad else "**does not match**: " + "; ".join(bad[:3]),
            )
        )
    return "\n".join(lines) + "\n"


def formats_plot(results: Dict[tuple, dict], path: Path) -> None:
    """Seconds (median, min-max) and bytes, one bar per model and format."""
    plt = pyplot()
    figure, (seconds, sizes) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(results)
    for index, ((job, fmt), r) in enumerate(results.items()):
        at = [i + (index - (len(results) - 1) / 2) * width for i in range(len(TIMES))]
        median = [statistics.median(r[k]) for k in TIMES]
        errors = [[m - min(r[k]) for m, k in zip(median, TIMES)]]
        errors.append([max(r[k]) - m for m, k in zip(median, TIMES)])
        seconds.bar(at, median, width, yerr=errors, capsize=2, label=f"{job}, {fmt}")
        size = file_sizes(r)
        at = [i + (index - (len(results) - 1) / 2) * width for i in range(len(FILES))]
        sizes.bar(at, [size[kind] / MB for kind in FILES], width, label=f"{job}, {fmt}")
    seconds.set_xticks(range(len(TIMES)), [t[:-4] for t in TIMES.values()], fontsize=7)
    sizes.set_xticks(range(len(FILES)), FILES)
    for axis, ylabel in ((seconds, "seconds (median, min-max)"), (sizes, "MB per file")):
        axis.set_yscale("log")
        axis.set_ylabel(ylabel)
        axis.grid(True, axis="y", which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("Checkpoint formats, asynchronous saves and 2-rank shares")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def formats_part(args: Any) -> str:
    models = {job: job_model(overrides) for job, overrides in JOBS.items()}
    for job, m in models.items():
        print(f"{job}: {m['params']:,} parameters, {len(m['entries'])} entries", flush=True)
    with tempfile.TemporaryDirectory(prefix="ms_exp_bench_ckpt_") as scratch:
        results = measure_formats(args, models, Path(scratch))
    formats_plot(results, RESULTS / "checkpoint_cost_formats.png")
    return formats_table(args, models, results)


PARTS = ("sliced", "formats")


def write_results(texts: Dict[str, str]) -> str:
    """results/checkpoint_cost.md: each part's table between ``<!-- part: NAME -->`` marks;
    a part not run this time keeps the table its last run wrote."""
    path = RESULTS / "checkpoint_cost.md"
    old = path.read_text() if path.is_file() else ""
    blocks = []
    for part in PARTS:
        if part not in texts:
            found = re.search(rf"<!-- part: {part} -->\n.*?<!-- /part: {part} -->\n", old, re.S)
            blocks += [found.group(0)] if found else []
        else:
            blocks.append(f"<!-- part: {part} -->\n{texts[part]}<!-- /part: {part} -->\n")
    text = "\n".join(blocks)
    path.write_text(text)
    return text


def sliced_part(args: Any) -> str:
    from omegaconf import OmegaConf

    from ms_exp.preflight.compose import compose_config

    cfg = compose_config(["parallel=semi_auto"])
    device_num = int(cfg.parallel.device_num)
    if not 1 <= args.integrated_ranks <= device_num:
        sys.exit(f"--integrated-ranks: 1 to {device_num}")
    strategy_sets = {
        "tutorial": OmegaConf.to_container(cfg.parallel.strategies),
        "all layers sharded": ALL_SHARDED,
    }
    models = {}
    for size in sorted(set(args.sizes)):
        models[size] = build_model(hidden_for(size), cfg, strategy_sets)
        models[size]["full"] = entries_for(models[size]["arrays"])
        print(
            f"model ~{size:.0e}: hidden {models[size]['hidden']}, {models[size]['params']:,} "
            f"trainable parameters, {len(models[size]['arrays'])} checkpoint entries",
            flush=True,
        )
    check_disk(tempfile.gettempdir(), models)
    with tempfile.TemporaryDirectory(prefix="ms_exp_bench_ckpt_") as scratch:
        results = measure(args, models, list(strategy_sets), device_num, Path(scratch))
    plot(models, list(strategy_sets), results, RESULTS / "checkpoint_cost.png")
    return table(args, models, list(strategy_sets), results, device_num)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--rounds", type=int, default=5)
    sliced = parser.add_argument_group("sliced")
    sizes = [1e6, 1e7, 3e7, 1e8]
    sliced.add_argument("--sizes", type=float, nargs="+", default=sizes, help="parameters")
    help_ranks = "ranks per round whose integrated save (and emulation) is timed"
    sliced.add_argument("--integrated-ranks", type=int, default=2, help=help_ranks)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds >= 1")
    RESULTS.mkdir(exist_ok=True)
    texts = {}
    for part in PARTS:
        if part in args.parts:
            started = time.perf_counter()
            texts[part] = (sliced_part if part == "sliced" else formats_part)(args)
            print(f"{part}: measured in {time.perf_counter() - started:.0f} s", flush=True)
    print(write_results(texts))


if __name__ == "__main__":
    os.environ.setdefault("GLOG_v", "3")  # MindSpore's warnings would bury the progress lines
    main()
