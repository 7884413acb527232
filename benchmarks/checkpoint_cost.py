"""What a checkpoint costs per rank, integrated against sliced, on 8 emulated ranks.

Models: the tutorials' Network (ms_exp.models.mlp) with hidden sizes giving about 1M, 10M,
30M and 100M trainable parameters. A checkpoint holds what a training checkpoint holds: the
train network's parameters (``TrainOneStepCell(WithLossCell(net, loss), Momentum)``, built
with ms_exp's own optimizer and loss from the default config): weights, ``moments.*``,
``learning_rate``, ``momentum`` and ``global_step``.

Layouts come from ``conf/parallel/semi_auto.yaml`` as ms_exp composes it (device_num 8, the
model-saving tutorial's strategies: only layer1 and layer3 sharded, layer2 replicated) and
from a second set with every layer sharded 8 ways; ``operator_layouts`` then
``checkpoint_layouts``, so moments share their parameter's layout.

For every size, strategy set and rank, in interleaved rounds (round, size, strategies, rank):

- integrated: ``mindspore.save_checkpoint`` of every full entry (integrated_save=True: every
  rank writes the whole model). All ranks write identical files, so by default only
  ``--integrated-ranks`` ranks per round are timed, rotating so the rounds cover all ranks;
- CPU emulation: ms_exp's own ``SemiAutoLayouts._slice`` on that integrated file (load,
  slice, save, rename): what ms_exp pays per rank on CPU, where MindSpore refuses semi-auto;
- sliced: ``save_checkpoint`` of each entry's slice for the rank (``slice_for_rank``): what
  MindSpore writes per rank with integrated_save=False. Slicing is timed apart, not in the
  save. Every rank, every round.

Times are ``perf_counter`` around the call (no fsync, as MindSpore does none: writes land in
the page cache); files are deleted after each measurement. Bytes are checked for every rank:
the sliced file must be exactly the analytic payload (each slice's element count from its
Layout x itemsize, whole entries in full) plus the protobuf framing MindSpore's
``Checkpoint`` message adds (name, dims, dtype string and length prefixes per record,
computed from the wire format); the emulation's file must have the same size.

    python benchmarks/checkpoint_cost.py                      # about 4.5 minutes on 2 cores
    python benchmarks/checkpoint_cost.py --sizes 1e6 1e7 --rounds 2

Writes benchmarks/results/checkpoint_cost.md and checkpoint_cost.png.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from math import prod
from pathlib import Path
from typing import Dict, List

import numpy as np
from benchlib import RESULTS, command_line, machine_line, pyplot, spread

IN_FEATURES, NUM_CLASSES = 784, 10
ALL_SHARDED = {
    "layer1.matmul": [[1, 1], [1, 8]],
    "layer2.matmul": [[1, 8], [8, 1]],
    "layer3.matmul": [[1, 8], [8, 1]],
}
RECORD_BYTES = 512 * 1024 * 1024  # save_checkpoint writes a Tensor in records of this size
MB = 1e6


def hidden_for(params: float) -> int:
    """Hidden size, a multiple of 8 (so that 8-way splits are even), whose Network has about
    ``params`` trainable parameters: h^2 + (in + classes + 2) h + classes."""
    b = IN_FEATURES + NUM_CLASSES + 2
    root = (-b + (b * b + 4 * (params - NUM_CLASSES)) ** 0.5) / 2
    return max(8, 8 * round(root / 8))


def build_model(hidden: int, cfg, strategy_sets) -> Dict[str, object]:
    """Numpy arrays of a training checkpoint and each strategy set's checkpoint layouts."""
    from mindspore import nn

    from ms_exp.models.mlp import Network
    from ms_exp.parallel.layout import checkpoint_layouts, operator_layouts
    from ms_exp.train.losses import create_loss
    from ms_exp.train.optimizer import create_optimizer

    network = Network(IN_FEATURES, NUM_CLASSES, hidden)
    optimizer = create_optimizer(cfg.optimizer, network.trainable_params(), 1, 1)
    train = nn.TrainOneStepCell(nn.WithLossCell(network, create_loss(cfg.loss)), optimizer)
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
    results = {
        (size, label): {
            key: []
            for key in (
                "integrated_s",
                "integrated_bytes",
                "emulation_s",
                "emulated_bytes",
                "slicing_s",
                "sliced_s",
                "sliced_bytes",
            )
        }
        for size in models
        for label in labels
    }
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
    """Every sliced file (every rank, every round) and every emulated file must have exactly
    the expected size; the integrated file that of the full payload framed the same way."""
    expected = expected_bytes(model["arrays"], model["layouts"][label])
    full = expected_bytes(model["arrays"], {})
    bad = [
        f"rank {rank}: {size:,} B, expected {expected['file']:,} B"
        for rank, size in result["sliced_bytes"] + result["emulated_bytes"]
        if size != expected["file"]
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
        "dtype strings, length prefixes). Check: every rank's sliced file, and the emulation's, "
        "exactly payload + protobuf framing, in every round.",
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        type=float,
        nargs="+",
        default=[1e6, 1e7, 3e7, 1e8],
        help="approximate trainable parameter counts",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--integrated-ranks",
        type=int,
        default=2,
        help="ranks per round whose integrated save (and emulation) is timed",
    )
    args = parser.parse_args()
    from ms_exp.preflight.compose import compose_config

    cfg = compose_config(["parallel=semi_auto"])
    device_num = int(cfg.parallel.device_num)
    if args.rounds < 1 or not 1 <= args.integrated_ranks <= device_num:
        parser.error(f"--rounds >= 1 and 1 <= --integrated-ranks <= {device_num}")
    from omegaconf import OmegaConf

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
    RESULTS.mkdir(exist_ok=True)
    check_disk(tempfile.gettempdir(), models)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ms_exp_bench_ckpt_") as scratch:
        results = measure(args, models, list(strategy_sets), device_num, Path(scratch))
    print(f"measured in {time.perf_counter() - started:.0f} s", flush=True)
    text = table(args, models, list(strategy_sets), results, device_num)
    (RESULTS / "checkpoint_cost.md").write_text(text)
    plot(models, list(strategy_sets), results, RESULTS / "checkpoint_cost.png")
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("GLOG_v", "3")  # MindSpore's warnings would bury the progress lines
    main()
