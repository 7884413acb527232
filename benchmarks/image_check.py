"""What a rank of a distributed ``dataset=imagenet`` job spends checking its split before
MindSpore starts: every image read again (``damaged_image`` on each file, as each rank did
until it trusted the launching process), against the launching process's record in the
run folder trusted (the files listed and stat'ed, their digest compared).

A split of ``--files`` tiny JPEGs (40x40, about 1.5 kB, in 100 class folders) is written
once; the launching process checks it and writes its record. Then each round times, in
this process, the rank-side call of each arm (``check_image_folder`` after
``trust_image_checks``, as ``python -m ms_exp.worker`` runs it), what this process found
whole forgotten before each call as a new process would have it; the arms alternate which
goes first, after one untimed round that fills the page cache.

    python benchmarks/image_check.py                     # 20 000 files, 5 rounds
    python benchmarks/image_check.py --files 5000 --rounds 3

Writes benchmarks/results/image_check.md and image_check.png.
"""

import argparse
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

from benchlib import boxplot, command_line, machine_line, measure_and_write, pyplot, spread

from ms_exp.data import headers
from ms_exp.data.spec import IMAGE_EXTENSIONS

ARMS = {"every image read": "read", "record trusted": "trusted"}
CLASSES = 100
IMAGENET_TRAIN = 1_281_167  # files in ImageNet-1k's train split


def write_split(split: Path, files: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    encoded = []
    for _ in range(16):
        out = io.BytesIO()
        pixels = (rng.random((40, 40, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(out, format="JPEG", quality=90)
        encoded.append(out.getvalue())
    for index in range(files):
        folder = split / f"class_{index % CLASSES:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"image_{index:07d}.JPEG").write_bytes(encoded[index % len(encoded)])


def rank_side(split: Path, run_dir: Path, arm: str, files: int) -> float:
    """Seconds of a rank's check of ``split``, in a process that found nothing whole yet
    (this process's memory of what it checked, forgotten)."""
    headers._WHOLE_IMAGE_FOLDERS.clear()
    headers._CHECKED_BY_LAUNCHER.clear()
    started = time.perf_counter()
    if arm == "trusted":
        headers.trust_image_checks(run_dir)
    read = headers.check_image_folder("dataset.train_dir", "train", split, IMAGE_EXTENSIONS)
    seconds = time.perf_counter() - started
    if read != (0 if arm == "trusted" else files):
        sys.exit(f"{arm}: {read} images read")
    return seconds


def measure(args, scratch: Path) -> Dict[str, List[float]]:
    split, run_dir = scratch / "images" / "train", scratch / "run"
    write_split(split, args.files)
    run_dir.mkdir()
    headers.check_image_folder("dataset.train_dir", "train", split, IMAGE_EXTENSIONS)
    headers.record_image_checks(run_dir)  # the launching process, before the ranks start
    for arm in ARMS.values():  # untimed: fills the page cache
        rank_side(split, run_dir, arm, args.files)
    results = {arm: [] for arm in ARMS.values()}
    for round_ in range(1, args.rounds + 1):
        for arm in list(ARMS.values()) if round_ % 2 else list(ARMS.values())[::-1]:
            results[arm].append(rank_side(split, run_dir, arm, args.files) / args.files * 1e6)
            print(
                f"round {round_}/{args.rounds} {arm:<8} {results[arm][-1]:7.1f} µs a file",
                flush=True,
            )
    return results


def table(results, args) -> str:
    lines = [
        f"A split of {args.files:,} tiny JPEGs in {CLASSES} class folders, page cache warm, "
        f"{args.rounds} interleaved rounds; median (min-max). One rank's check before "
        "MindSpore starts; ImageNet's train split: the median times its "
        f"{IMAGENET_TRAIN:,} files, per rank.",
        "",
        machine_line(),
        "",
        command_line("image_check.py"),
        "",
        "| a rank's check | µs a file | whole split (s) | ImageNet train, per rank (s) |",
        "|---|---|---|---|",
    ]
    for label, arm in ARMS.items():
        per_file = results[arm]
        lines.append(
            f"| {label} | {spread(per_file, '.1f')} | "
            f"{spread([v * args.files / 1e6 for v in per_file], '.2f')} | "
            f"{statistics.median(per_file) * IMAGENET_TRAIN / 1e6:.0f} |"
        )
    saving = [read / trusted for read, trusted in zip(results["read"], results["trusted"])]
    lines += ["", f"Trusting the record is {spread(saving, '.0f')} times faster."]
    return "\n".join(lines) + "\n"


def plot(results, args, path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5, 3.5))
    boxplot(axis, {label: results[arm] for label, arm in ARMS.items()}, "µs a file")
    axis.set_yscale("log")
    axis.set_title(f"a rank's check of {args.files} images")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.files < CLASSES or args.rounds < 1:
        parser.error(f"--files >= {CLASSES} and --rounds >= 1")
    measure_and_write("image_check", args, measure, table, plot)


if __name__ == "__main__":
    main()
