"""Convert Criteo display-advertising text to the MindRecord files ``dataset=criteo`` reads.

    python -m ms_exp.data.criteo_convert RAW OUT_DIR [--threshold N | --hash-buckets B]
        [--samples-per-record N] [--eval-fraction F] [--seed S] [--overwrite]

RAW (plain or gzip) holds one sample per line, 40 tab-separated fields: the label (0/1),
13 integer fields I1..I13 (may be negative or empty) and 26 hexadecimal categorical fields
C1..C26 (may be empty). Each sample becomes 39 (id, weight) pairs, as MindSpore's model zoo
(recommend/wide_and_deep/src/preprocess_data.py) builds them:

- dense field i: id i (0..12), weight value / max_i (the field's maximum over the file;
  1.0 where that maximum is <= 0), weight 0 when the field is empty;
- categorical field j: weight 1.0 and, with ``--threshold N`` (the model zoo's mode), an id
  of its own for a value seen more than N times in its field (numbered from 39 in field
  order, then by first appearance), else the field's out-of-vocabulary id 13 + j. With
  ``--hash-buckets B`` nothing is counted: value v of field j gets 39 + j*B +
  zlib.crc32(v) % B (stable across runs, unlike Python's hash): tables of millions of rows,
  the hybrid-training tutorial's scale.

Records hold ``--samples-per-record`` N consecutive samples of their split (default 1000,
as the model zoo; one sample per record would cost MindRecord about 1.4 KB of index memory
per sample). A split's last record is filled up with the split's first samples, in order,
and ``criteo_meta.json`` records the real counts and the padding (``padded_samples``).

Two passes over RAW: the first counts, the second encodes and writes; malformed lines are
skipped and reported by reason (real dumps have a few). The output is written into a sibling
``OUT_DIR.partial-<pid>`` folder and renamed into place once complete, so an interrupted run
never leaves half a dataset where training would read it. Users' guide:
docs/guides/host-device.md.
"""

import argparse
import os
import re
import shlex
import shutil
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, TextIO, Union

from ms_exp.data.criteo_cli import UsageError, _integer, _Parser, check_creatable, usage_error
from ms_exp.data.criteo_encoding import (
    MAX_HASH_BUCKETS,
    HashVocabulary,
    ThresholdVocabulary,
    Vocabulary,
    split_sizes,
)
from ms_exp.data.criteo_records import publish, write_meta, write_records
from ms_exp.data.criteo_text import Progress, scan

PROG = "ms_exp.data.criteo_convert"
DEFAULT_SAMPLES_PER_RECORD = 1000
# A record is about 316 bytes a sample; this keeps one well inside MindRecord's 32 MB page.
MAX_SAMPLES_PER_RECORD = 50000


@dataclass
class Options:
    raw: Path
    out_dir: Path
    threshold: Optional[int]  # None in hash mode
    hash_buckets: Optional[int]
    eval_fraction: float
    seed: int
    overwrite: bool
    samples_per_record: int = DEFAULT_SAMPLES_PER_RECORD


# Characters a Hydra override value may hold unquoted (besides letters and digits).
HYDRA_PLAIN = set("/._-~+:@%")


def hydra_value(value: str) -> str:
    """``value`` as Hydra's override grammar reads it back verbatim: plain, or in single
    quotes with its quotes escaped (and the backslashes before a quote or at the end, the
    only ones Hydra unescapes)."""
    if value and all(c.isalnum() or c in HYDRA_PLAIN for c in value):
        return value
    quoted = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted)
    return f"'{quoted}'"


def train_command(out_dir: Union[str, Path]) -> str:
    """The command that trains on ``out_dir``, printed for the user to paste: the path is
    quoted for Hydra and the whole argument for the shell."""
    command = ["python", "-m", "ms_exp.run", "model=wide_deep", "dataset=criteo"]
    return shlex.join([*command, f"dataset.path={hydra_value(str(out_dir))}"])


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("raw", metavar="RAW", help="Criteo text file, plain or .gz")
    parser.add_argument(
        "out_dir",
        metavar="OUT_DIR",
        help="output folder (train/eval .mindrecord, criteo_meta.json)",
    )
    vocab = parser.add_mutually_exclusive_group()
    vocab.add_argument(
        "--threshold",
        metavar="N",
        help="keep categorical values seen more than N times (default 100)",
    )
    vocab.add_argument(
        "--hash-buckets",
        metavar="B",
        help="hash each categorical field into B ids instead of counting",
    )
    parser.add_argument(
        "--samples-per-record",
        metavar="N",
        default=str(DEFAULT_SAMPLES_PER_RECORD),
        help="samples packed into each record; dataset.batch_size must be a "
        f"multiple of it (default {DEFAULT_SAMPLES_PER_RECORD})",
    )
    parser.add_argument(
        "--eval-fraction",
        metavar="F",
        default="0.1",
        help="share of valid lines held out for evaluation (default 0.1)",
    )
    parser.add_argument(
        "--seed", metavar="S", default="0", help="seed of the train/eval split (default 0)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUT_DIR if it exists and is not empty"
    )
    return parser


def parse_options(argv: Optional[Sequence[str]]) -> Options:
    args = build_parser().parse_args(argv)
    threshold = hash_buckets = None
    if args.hash_buckets is not None:
        hash_buckets = _integer("--hash-buckets", args.hash_buckets, 1, MAX_HASH_BUCKETS)
    else:
        threshold = _integer("--threshold", "100" if args.threshold is None else args.threshold, 0)
    fraction_rule = "a number between 0 and 1 (exclusive)"
    try:
        eval_fraction = float(args.eval_fraction)
    except ValueError:
        raise usage_error(
            "--eval-fraction", args.eval_fraction, "not a number", fraction_rule
        ) from None
    if not 0 < eval_fraction < 1:
        raise usage_error("--eval-fraction", eval_fraction, "not allowed", fraction_rule)
    seed = _integer("--seed", args.seed, 0)
    samples_per_record = _integer(
        "--samples-per-record", args.samples_per_record, 1, MAX_SAMPLES_PER_RECORD
    )
    # RAW readable, OUT_DIR free (or --overwrite) and creatable; nothing is written.
    raw, out_dir = Path(args.raw), Path(args.out_dir)
    text_file = "a readable Criteo text file (plain or .gz)"
    if not raw.exists():
        raise usage_error("RAW", str(raw), "no such file", text_file)
    if raw.is_dir():
        raise usage_error("RAW", str(raw), "is a folder", text_file)
    try:
        with open(raw, "rb") as probe:
            probe.read(1)
    except OSError as error:
        raise usage_error(
            "RAW", str(raw), f"cannot be read ({error.strerror})", text_file
        ) from None
    if out_dir.exists():
        if not out_dir.is_dir():
            raise usage_error(
                "OUT_DIR", str(out_dir), "is a file", "a folder to create, or an empty one"
            )
        if any(out_dir.iterdir()) and not args.overwrite:
            raise usage_error(
                "OUT_DIR",
                str(out_dir),
                "folder exists and is not empty",
                "a new or empty folder, or --overwrite to replace it",
            )
        replaced = out_dir.resolve()
        for what, inside in (("RAW", raw), ("the current folder", Path.cwd())):
            inside = inside.resolve()
            if replaced == inside or replaced in inside.parents:
                raise usage_error(
                    "OUT_DIR",
                    str(out_dir),
                    f"holds {what}, which replacing it would delete",
                    "a folder that holds neither RAW nor the current folder",
                )
    check_creatable("OUT_DIR", out_dir, "folder")
    return Options(
        raw,
        out_dir,
        threshold,
        hash_buckets,
        eval_fraction,
        seed,
        args.overwrite,
        samples_per_record,
    )


def convert(options: Options, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> dict:
    """Both passes; returns the meta written. UsageError before anything is written when
    RAW has no valid line or the split would leave one side empty. ``out`` (summary) and
    ``err`` (progress) default to sys.stdout and sys.stderr as they are at call time."""
    out, err = out or sys.stdout, err or sys.stderr
    raw = options.raw
    hashed = options.hash_buckets is not None
    stats = scan(raw, count_categories=not hashed, progress=Progress("pass 1/2 (counting)", err))
    if stats.valid == 0:
        detail = f" ({stats.malformed.describe()})" if stats.lines else ""
        raise usage_error(
            "RAW",
            str(raw),
            f"no valid line among {stats.lines} lines{detail}",
            "Criteo text: label 0/1, 13 integer and 26 hexadecimal fields, tab-separated",
        )
    sizes = split_sizes(stats.valid, options.eval_fraction, options.seed)
    if min(sizes) == 0:
        raise usage_error(
            "--eval-fraction",
            options.eval_fraction,
            f"splits {stats.valid} valid lines into {sizes[0]} train and "
            f"{sizes[1]} eval samples (seed {options.seed})",
            "a fraction that leaves both splits non-empty",
        )
    vocabulary: Vocabulary
    if options.hash_buckets is not None:  # hashed
        vocabulary = HashVocabulary(options.hash_buckets)
    else:  # a threshold is set whenever hash_buckets is not, and scan counted the categories
        assert options.threshold is not None and stats.counts is not None
        vocabulary = ThresholdVocabulary(stats.counts, options.threshold)
    out_dir = options.out_dir.absolute()
    partial = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir()
    try:
        packers = write_records(
            raw,
            stats,
            vocabulary,
            partial,
            options.eval_fraction,
            options.seed,
            options.samples_per_record,
            Progress("pass 2/2 (writing)", err),
        )
        written = (packers["train"].samples, packers["eval"].samples)
        if written != sizes:
            raise OSError(
                f"{raw} changed while it was converted: {sum(written)} samples "
                f"written, {sum(sizes)} counted in the first pass"
            )
        meta = write_meta(
            partial, raw, stats, vocabulary, packers, options.eval_fraction, options.seed
        )
        publish(partial, out_dir, options.overwrite)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if stats.malformed.total:
        print(stats.malformed.summary(stats.lines), file=out)
    print(
        f"wrote {sizes[0]} train and {sizes[1]} eval samples, vocab_size "
        f"{vocabulary.size} ({vocabulary.mode}), to {options.out_dir}",
        file=out,
    )
    size, padded = meta["samples_per_record"], meta["padded_samples"]
    packing = (
        f"packed {size} sample{'s' if size > 1 else ''} a record: "
        f"{meta['train_records']} train and {meta['eval_records']} eval records"
    )
    if padded["train"] or padded["eval"]:
        packing += (
            f"; last records filled up with their split's first samples (train "
            f"+{padded['train']}, eval +{padded['eval']})"
        )
    print(packing, file=out)
    print(f"train on it: {train_command(options.out_dir)}", file=out)
    return meta


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        options = parse_options(argv)
        convert(options)
    # Bad input exits 2; RAW or OUT_DIR failing midway (OSError, EOFError, zlib.error) 1.
    except (UsageError, OSError, EOFError, zlib.error) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 1
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
