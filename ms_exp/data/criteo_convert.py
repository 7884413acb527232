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
  of its own for a value seen more than N times in its field, else the field's
  out-of-vocabulary id 13 + j. Kept values are numbered from 39 in field order, then by
  first appearance in the file, so the same file always gives the same ids. With
  ``--hash-buckets B`` nothing is counted: value v of field j gets
  39 + j*B + zlib.crc32(v) % B (crc32 of v's bytes, not Python's salted hash, so ids are
  stable across runs and machines). That is how tables of millions of rows (the
  hybrid-training tutorial's scale) are made.

Records hold ``--samples-per-record`` N consecutive samples of their split (default 1000,
the model zoo's line_per_sample): ``feat_ids`` int32 [N, 39], ``feat_vals`` float32
[N, 39], ``label`` float32 [N, 1]. One sample per record would cost MindRecord about 1.4 KB
of index memory per sample when the file is committed (some 57 GB for the full 45 million
lines) and about 0.45 KB per sample in a shuffling reader; packed, those costs are per
record (measured: peak memory of a conversion no longer grows with the line count).
Training's ``dataset.batch_size`` must be a multiple of N. A split whose sample count is not
a multiple of N gets its last record filled up with the split's first samples, in order
(over and over when the split has fewer than N): nothing is dropped, fewer than N extra
samples of a split are read an epoch (training and evaluation alike), and
``criteo_meta.json`` records the real counts (``train_samples``, ``eval_samples``), the
records (``train_records``, ``eval_records``) and the padding (``padded_samples``) of each
split; the summary line says how many samples were added.

For a try without the 11 GB download, ``python -m ms_exp.data.criteo_sample`` writes
Criteo-format text with a learnable click signal (not Criteo data).

Two passes over RAW: the first counts (dense maxima, categorical values, valid lines), the
second encodes and writes. Malformed lines are skipped in both and reported by reason with
their line numbers; they are not fatal, because real dumps have a few. The output is written
into a sibling ``OUT_DIR.partial-<pid>`` folder and renamed into place once complete, so an
interrupted or failed run never leaves half a dataset where training would read it.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import sys
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

import numpy as np

PROG = "ms_exp.data.criteo_convert"
DENSE_FIELDS = 13
CATEGORICAL_FIELDS = 26
FIELD_SIZE = DENSE_FIELDS + CATEGORICAL_FIELDS
RAW_FIELDS = 1 + FIELD_SIZE
FIRST_CATEGORY_ID = DENSE_FIELDS + CATEGORICAL_FIELDS  # after the dense and OOV ids
META_FILE = "criteo_meta.json"
TRAIN_FILE = "train.mindrecord"
EVAL_FILE = "eval.mindrecord"
# 2: records of samples_per_record samples ([N, 39]); 1 (one sample per record) is refused
# by the loader, which asks for a new conversion.
META_FORMAT = 2
DEFAULT_SAMPLES_PER_RECORD = 1000
# A record is about 316 bytes a sample; this keeps one well inside MindRecord's 32 MB page.
MAX_SAMPLES_PER_RECORD = 50000
# Valid lines per write_raw_data call and per draw of split uniforms: MindRecord's writer
# costs about 60 us a sample in lists of this size, and far more per call in small ones.
BATCH_LINES = 10000
PROGRESS_SECONDS = 2.0
# feat_ids are int32: the largest id, 38 + 26 * buckets, must fit (82,595,523 buckets).
MAX_HASH_BUCKETS = (2 ** 31 - 1 - FIRST_CATEGORY_ID) // CATEGORICAL_FIELDS
FIRST_LINES_KEPT = 5
GZIP_MAGIC = b"\x1f\x8b"


def record_schema(samples_per_record: int) -> dict:
    """The MindRecord schema: every column holds ``samples_per_record`` samples."""
    return {
        "feat_ids": {"type": "int32", "shape": [samples_per_record, FIELD_SIZE]},
        "feat_vals": {"type": "float32", "shape": [samples_per_record, FIELD_SIZE]},
        "label": {"type": "float32", "shape": [samples_per_record, 1]},
    }


# Checked in this order; a line is counted under the first reason that applies.
WRONG_FIELD_COUNT = "wrong field count"
BAD_LABEL = "bad label"
BAD_INTEGER = "bad integer"
BAD_CATEGORICAL = "bad categorical"
REASONS = (WRONG_FIELD_COUNT, BAD_LABEL, BAD_INTEGER, BAD_CATEGORICAL)

# Lines are bytes, split on b"\n" only: a stray \r or a byte that is not UTF-8 inside a
# line then fails the field checks of that one line instead of splitting or stopping it.
# One C-level match accepts a valid line; only rejected lines are taken apart in Python.
_VALID_LINE = re.compile(rb"[01](?:\t(?:-?[0-9]+)?){%d}(?:\t[0-9a-fA-F]*){%d}"
                         % (DENSE_FIELDS, CATEGORICAL_FIELDS))
_INTEGER = re.compile(rb"-?[0-9]+")


class UsageError(ValueError):
    """Bad command-line input, refused before anything is written; the message is one
    line."""


def usage_error(name: str, value, problem: str, allowed: str) -> UsageError:
    """``name=value: problem; expected allowed``, the shape of ms_exp's config errors."""
    shown = repr(value) if isinstance(value, str) else value
    return UsageError(f"{name}={shown}: {problem}; expected {allowed}")


# --- parsing ---------------------------------------------------------------------------


def parse_line(line: bytes) -> Tuple[Optional[List[bytes]], Optional[str]]:
    """``(fields, None)`` for a valid line (its 40 fields), ``(None, reason)`` for a
    malformed one. ``line`` may end with ``\\n`` or ``\\r\\n``."""
    line = line.rstrip(b"\r\n")
    if _VALID_LINE.fullmatch(line):
        return line.split(b"\t"), None
    return None, malformed_reason(line.split(b"\t"))


def malformed_reason(fields: Sequence[bytes]) -> str:
    if len(fields) != RAW_FIELDS:
        return WRONG_FIELD_COUNT
    if fields[0] not in (b"0", b"1"):
        return BAD_LABEL
    if any(v and not _INTEGER.fullmatch(v) for v in fields[1:1 + DENSE_FIELDS]):
        return BAD_INTEGER
    return BAD_CATEGORICAL


@dataclass
class Malformed:
    """Skipped lines: how many for each reason, and the first line numbers (1-based)."""

    by_reason: Dict[str, int] = field(default_factory=dict)
    first_lines: Dict[str, List[int]] = field(default_factory=dict)

    def add(self, line_number: int, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        first = self.first_lines.setdefault(reason, [])
        if len(first) < FIRST_LINES_KEPT:
            first.append(line_number)

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def to_json(self) -> dict:
        return {"total": self.total, "by_reason": dict(self.by_reason),
                "first_lines": {r: list(n) for r, n in self.first_lines.items()}}

    def describe(self) -> str:
        """``2 wrong field count (first at lines 5, 17), 1 bad label (line 9)``."""
        parts = []
        for reason in REASONS:
            count = self.by_reason.get(reason, 0)
            if not count:
                continue
            lines = self.first_lines[reason]
            where = (f"line {lines[0]}" if count == 1
                     else "first at lines " + ", ".join(str(n) for n in lines))
            parts.append(f"{count} {reason} ({where})")
        return ", ".join(parts)

    def summary(self, lines: int) -> str:
        return f"skipped {self.total} malformed lines of {lines}: {self.describe()}"


# --- reading ---------------------------------------------------------------------------


def open_lines(path: Path) -> BinaryIO:
    """RAW in binary, gunzipped when it starts with gzip's magic bytes (whatever its
    name)."""
    with open(path, "rb") as probe:
        compressed = probe.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if compressed else open(path, "rb")


class Progress:
    """A stderr line about every PROGRESS_SECONDS: lines read and lines per second."""

    def __init__(self, label: str, stream: Optional[TextIO] = None):
        self.label, self.stream = label, stream
        self.start = self.last = time.monotonic()

    def update(self, lines: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            rate = lines / max(now - self.start, 1e-9)
            print(f"{self.label}: {lines:,} lines read, {rate:,.0f} lines/s",
                  file=self.stream or sys.stderr, flush=True)


def read_valid(path: Path, malformed: Malformed, progress: Optional[Progress] = None
               ) -> Iterator[List[bytes]]:
    """The fields of each valid line of RAW, in order; malformed lines go to ``malformed``.
    Line numbers count every line, valid or not, from 1."""
    with open_lines(path) as lines:
        number = 0
        for number, line in enumerate(lines, 1):
            if progress is not None and not number & 0xFFF:
                progress.update(number)
            fields, reason = parse_line(line)
            if reason is None:
                yield fields
            else:
                malformed.add(number, reason)
        if progress is not None:
            progress.update(number)


@dataclass
class Stats:
    """What the first pass learns: line counts, dense maxima, categorical counts."""

    lines: int = 0
    valid: int = 0
    # Maximum of each dense field over the valid lines; None while the field was empty.
    dense_max: List[Optional[int]] = field(default_factory=lambda: [None] * DENSE_FIELDS)
    # Per categorical field: value -> count, in order of first appearance (empties left out).
    counts: Optional[List[Dict[bytes, int]]] = None
    malformed: Malformed = field(default_factory=Malformed)


def scan(path: Path, count_categories: bool = True, progress: Optional[Progress] = None
         ) -> Stats:
    """Pass 1. ``count_categories`` False (hash mode) skips the costly counting."""
    stats = Stats()
    counts = [defaultdict(int) for _ in range(CATEGORICAL_FIELDS)] if count_categories else None
    maxima = stats.dense_max
    dense_range = range(DENSE_FIELDS)
    for fields in read_valid(path, stats.malformed, progress):
        stats.valid += 1
        for i in dense_range:
            text = fields[1 + i]
            if text:
                value = int(text)
                if maxima[i] is None or value > maxima[i]:
                    maxima[i] = value
        if counts is not None:
            for counter, value in zip(counts, fields[1 + DENSE_FIELDS:]):
                if value:
                    counter[value] += 1
    stats.lines = stats.valid + stats.malformed.total
    stats.counts = counts  # defaultdicts: a copy would double the peak memory
    return stats


def dense_divisors(dense_max: Sequence[Optional[float]]) -> List[float]:
    """The model zoo's minmax_scale_value divides by the field's maximum; a maximum <= 0
    (or a field that is always empty) would flip signs or divide by zero, so 1.0 then."""
    return [float(m) if m is not None and m > 0 else 1.0 for m in dense_max]


# --- vocabulary ------------------------------------------------------------------------


def oov_id(field_index: int) -> int:
    """The out-of-vocabulary id of categorical field ``field_index`` (0-based: C1 is 0)."""
    return DENSE_FIELDS + field_index


class ThresholdVocabulary:
    """The model zoo's cat2id: a value seen more than ``threshold`` times in its field gets
    an id; ids from 39 on in field order, then by first appearance."""

    mode = "threshold"

    def __init__(self, counts: Sequence[Dict[bytes, int]], threshold: int):
        self.threshold = threshold
        self.tables: List[Dict[bytes, int]] = []
        next_id = FIRST_CATEGORY_ID
        for field_counts in counts:
            table = {}
            for value, count in field_counts.items():
                if count > threshold and value:
                    table[value] = next_id
                    next_id += 1
            self.tables.append(table)
        self.size = next_id

    def ids(self, categories: Sequence[bytes]) -> List[int]:
        return [table.get(value, oov) for table, value, oov in
                zip(self.tables, categories, _OOV_IDS)]

    def meta(self) -> dict:
        return {"vocab_mode": self.mode, "threshold": self.threshold}


class HashVocabulary:
    """Value v of field j -> 39 + j*buckets + crc32(v) % buckets; empty -> OOV id."""

    mode = "hash"

    def __init__(self, buckets: int):
        self.buckets = buckets
        self.offsets = [FIRST_CATEGORY_ID + j * buckets for j in range(CATEGORICAL_FIELDS)]
        self.size = FIRST_CATEGORY_ID + CATEGORICAL_FIELDS * buckets

    def ids(self, categories: Sequence[bytes]) -> List[int]:
        b, crc = self.buckets, zlib.crc32
        return [offset + crc(value) % b if value else oov
                for offset, value, oov in zip(self.offsets, categories, _OOV_IDS)]

    def meta(self) -> dict:
        return {"vocab_mode": self.mode, "hash_buckets": self.buckets}


_OOV_IDS = [oov_id(j) for j in range(CATEGORICAL_FIELDS)]
_DENSE_IDS = list(range(DENSE_FIELDS))
_CATEGORY_WEIGHTS = [1.0] * CATEGORICAL_FIELDS


def encode(fields: Sequence[bytes], vocabulary, divisors: Sequence[float]
           ) -> Tuple[List[int], List[float], float]:
    """``(feat_ids, feat_vals, label)`` of one valid line's 40 fields."""
    dense = fields[1:1 + DENSE_FIELDS]
    values = [int(v) / d if v else 0.0 for v, d in zip(dense, divisors)]
    return (_DENSE_IDS + vocabulary.ids(fields[1 + DENSE_FIELDS:]),
            values + _CATEGORY_WEIGHTS, float(fields[0] == b"1"))


# --- split -----------------------------------------------------------------------------


def eval_draws(valid: int, eval_fraction: float, seed: int) -> Iterator[np.ndarray]:
    """For each batch of BATCH_LINES valid lines in file order, a bool array: True where
    the line goes to the eval split (one uniform draw per valid line)."""
    rng = np.random.default_rng(seed)
    for start in range(0, valid, BATCH_LINES):
        yield rng.random(min(BATCH_LINES, valid - start)) < eval_fraction


def split_sizes(valid: int, eval_fraction: float, seed: int) -> Tuple[int, int]:
    """``(train, eval)`` sample counts the split will give, without reading RAW again."""
    evaluation = sum(int(mask.sum()) for mask in eval_draws(valid, eval_fraction, seed))
    return valid - evaluation, evaluation


# --- writing ---------------------------------------------------------------------------


COLUMNS = ("feat_ids", "feat_vals", "label")


class RecordPacker:
    """Packs one split's samples, in order, into records of ``samples_per_record`` and
    writes them; ``close`` fills the last record up with the split's first samples."""

    def __init__(self, writer, samples_per_record: int):
        self.writer, self.size = writer, samples_per_record
        self.pending: List[Tuple[np.ndarray, ...]] = []  # samples not yet in a record
        self.pending_count = 0
        self.head: List[Tuple[np.ndarray, ...]] = []  # the split's first samples (<= size)
        self.head_count = 0
        self.samples = self.records = self.padded = 0

    def add(self, columns: Tuple[np.ndarray, ...]) -> None:
        """``columns``: feat_ids [k, 39], feat_vals [k, 39], label [k, 1] of k samples."""
        count = len(columns[0])
        if not count:
            return
        self.samples += count
        if self.head_count < self.size:
            take = min(count, self.size - self.head_count)
            self.head.append(tuple(c[:take] for c in columns))
            self.head_count += take
        self.pending.append(columns)
        self.pending_count += count
        if self.pending_count >= self.size:
            self._write_whole_records()

    def _joined(self) -> Tuple[np.ndarray, ...]:
        return tuple(np.concatenate([part[i] for part in self.pending])
                     for i in range(len(COLUMNS)))

    def _write_whole_records(self) -> None:
        joined = self._joined()
        whole = self.pending_count // self.size * self.size
        records = [{name: column[start:start + self.size]
                    for name, column in zip(COLUMNS, joined)}
                   for start in range(0, whole, self.size)]
        self.writer.write_raw_data(records)
        self.records += len(records)
        self.pending = [tuple(column[whole:] for column in joined)]
        self.pending_count -= whole

    def close(self) -> None:
        """Write the last, partial record (padded), if any, and commit the file."""
        if self.pending_count:
            self.padded = self.size - self.pending_count
            head = tuple(np.concatenate([part[i] for part in self.head])
                         for i in range(len(COLUMNS)))
            # Cyclic: a split of fewer samples than a record repeats all of them.
            repeat = np.arange(self.padded) % self.head_count
            self.pending.append(tuple(column[repeat] for column in head))
            self.pending_count += self.padded
            self._write_whole_records()
        self.writer.commit()


def write_records(path: Path, stats: Stats, vocabulary, folder: Path, eval_fraction: float,
                  seed: int, samples_per_record: int, progress: Optional[Progress] = None
                  ) -> Dict[str, RecordPacker]:
    """Pass 2: encode every valid line into ``folder``'s train and eval MindRecord files,
    ``samples_per_record`` samples a record. Returns each split's packer (its counts of
    samples, records and padded samples)."""
    from mindspore.mindrecord import FileWriter

    packers = {}
    for split, name in (("train", TRAIN_FILE), ("eval", EVAL_FILE)):
        writer = FileWriter(str(folder / name), shard_num=1)
        writer.add_schema(record_schema(samples_per_record), f"criteo_{split}")
        packers[split] = RecordPacker(writer, samples_per_record)
    divisors = dense_divisors(stats.dense_max)
    masks = eval_draws(stats.valid, eval_fraction, seed)
    batch: List[Tuple[List[int], List[float], float]] = []

    def flush():
        ids = np.array([row[0] for row in batch], np.int32)
        vals = np.array([row[1] for row in batch], np.float32)
        labels = np.array([[row[2]] for row in batch], np.float32)
        to_eval = next(masks)
        for split, rows in (("train", np.flatnonzero(~to_eval)),
                            ("eval", np.flatnonzero(to_eval))):
            packers[split].add((ids[rows], vals[rows], labels[rows]))
        batch.clear()

    for fields in read_valid(path, Malformed(), progress):
        batch.append(encode(fields, vocabulary, divisors))
        if len(batch) == BATCH_LINES:
            flush()
    if batch:
        flush()
    for packer in packers.values():
        packer.close()
    # MindRecord's commit makes its files owner-only (0600); give them the mode any new
    # file gets here (the umask's), so that a shared data folder stays readable.
    mode = 0o666 & ~_umask()
    for item in folder.iterdir():
        item.chmod(mode)
    return packers


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def write_meta(folder: Path, raw: Path, stats: Stats, vocabulary,
               packers: Dict[str, RecordPacker], eval_fraction: float, seed: int) -> dict:
    train, evaluation = packers["train"], packers["eval"]
    meta = {
        "format": META_FORMAT,
        "samples_per_record": train.size,
        "field_size": FIELD_SIZE,
        "dense_fields": DENSE_FIELDS,
        "categorical_fields": CATEGORICAL_FIELDS,
        "vocab_size": vocabulary.size,
        **vocabulary.meta(),
        # The divisor of each dense field (its maximum, or 1.0 where that is <= 0 or the
        # field is always empty): weight = value / dense_max[i].
        "dense_max": dense_divisors(stats.dense_max),
        "lines": stats.lines,
        # Real samples of each split; their records hold these plus padded_samples (the
        # split's first samples again, filling up its last record).
        "train_samples": train.samples,
        "eval_samples": evaluation.samples,
        "train_records": train.records,
        "eval_records": evaluation.records,
        "padded_samples": {"train": train.padded, "eval": evaluation.padded},
        "malformed": stats.malformed.to_json(),
        "source": str(raw),
        "eval_fraction": eval_fraction,
        "seed": seed,
    }
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def publish(partial: Path, out_dir: Path, overwrite: bool) -> None:
    """Move the complete ``partial`` folder to ``out_dir``; an old ``out_dir`` (empty, or
    replaced with --overwrite) is removed only once the new one is in place."""
    old = None
    if out_dir.exists():
        # Checked again: something may have been written there during the two passes.
        if any(out_dir.iterdir()) and not overwrite:
            raise usage_error("OUT_DIR", str(out_dir), "folder was filled during the "
                              "conversion", "a new or empty folder, or --overwrite")
        old = out_dir.with_name(f"{out_dir.name}.old-{os.getpid()}")
        out_dir.rename(old)
    try:
        partial.rename(out_dir)
    except OSError:
        if old is not None:
            old.rename(out_dir)
        raise
    if old is not None:
        shutil.rmtree(old)


# --- command line ----------------------------------------------------------------------


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


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (no usage block), raised as UsageError."""

    def error(self, message):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("raw", metavar="RAW", help="Criteo text file, plain or .gz")
    parser.add_argument("out_dir", metavar="OUT_DIR",
                        help="output folder (train/eval .mindrecord, criteo_meta.json)")
    vocab = parser.add_mutually_exclusive_group()
    vocab.add_argument("--threshold", metavar="N",
                       help="keep categorical values seen more than N times (default 100)")
    vocab.add_argument("--hash-buckets", metavar="B",
                       help="hash each categorical field into B ids instead of counting")
    parser.add_argument("--samples-per-record", metavar="N",
                        default=str(DEFAULT_SAMPLES_PER_RECORD),
                        help="samples packed into each record; dataset.batch_size must be a "
                             f"multiple of it (default {DEFAULT_SAMPLES_PER_RECORD})")
    parser.add_argument("--eval-fraction", metavar="F", default="0.1",
                        help="share of valid lines held out for evaluation (default 0.1)")
    parser.add_argument("--seed", metavar="S", default="0",
                        help="seed of the train/eval split (default 0)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUT_DIR if it exists and is not empty")
    return parser


def _integer(name: str, text: str, minimum: int, maximum: Optional[int] = None) -> int:
    allowed = (f"an integer >= {minimum}" if maximum is None
               else f"an integer from {minimum} to {maximum}")
    try:
        value = int(text)
    except ValueError:
        raise usage_error(name, text, "not an integer", allowed) from None
    if value < minimum or (maximum is not None and value > maximum):
        raise usage_error(name, value, "not allowed", allowed)
    return value


def parse_options(argv: Optional[Sequence[str]]) -> Options:
    args = build_parser().parse_args(argv)
    threshold = hash_buckets = None
    if args.hash_buckets is not None:
        hash_buckets = _integer("--hash-buckets", args.hash_buckets, 1, MAX_HASH_BUCKETS)
    else:
        threshold = _integer("--threshold", "100" if args.threshold is None
                             else args.threshold, 0)
    fraction_rule = "a number between 0 and 1 (exclusive)"
    try:
        eval_fraction = float(args.eval_fraction)
    except ValueError:
        raise usage_error("--eval-fraction", args.eval_fraction, "not a number",
                          fraction_rule) from None
    if not 0 < eval_fraction < 1:
        raise usage_error("--eval-fraction", eval_fraction, "not allowed", fraction_rule)
    seed = _integer("--seed", args.seed, 0)
    samples_per_record = _integer("--samples-per-record", args.samples_per_record, 1,
                                  MAX_SAMPLES_PER_RECORD)
    options = Options(Path(args.raw), Path(args.out_dir), threshold, hash_buckets,
                      eval_fraction, seed, args.overwrite, samples_per_record)
    check_paths(options)
    return options


def check_paths(options: Options) -> None:
    """RAW readable, OUT_DIR free (or --overwrite) and creatable; nothing is written."""
    raw, out_dir = options.raw, options.out_dir
    text_file = "a readable Criteo text file (plain or .gz)"
    if not raw.exists():
        raise usage_error("RAW", str(raw), "no such file", text_file)
    if raw.is_dir():
        raise usage_error("RAW", str(raw), "is a folder", text_file)
    try:
        with open(raw, "rb") as probe:
            probe.read(1)
    except OSError as error:
        raise usage_error("RAW", str(raw), f"cannot be read ({error.strerror})",
                          text_file) from None
    if out_dir.exists():
        if not out_dir.is_dir():
            raise usage_error("OUT_DIR", str(out_dir), "is a file",
                              "a folder to create, or an empty one")
        if any(out_dir.iterdir()) and not options.overwrite:
            raise usage_error("OUT_DIR", str(out_dir), "folder exists and is not empty",
                              "a new or empty folder, or --overwrite to replace it")
        replaced = out_dir.resolve()
        for what, inside in (("RAW", raw), ("the current folder", Path.cwd())):
            inside = inside.resolve()
            if replaced == inside or replaced in inside.parents:
                raise usage_error("OUT_DIR", str(out_dir), f"holds {what}, which replacing "
                                  "it would delete", "a folder that holds neither RAW nor "
                                  "the current folder")
    check_creatable("OUT_DIR", out_dir, "folder")


def check_creatable(name: str, path: Path, kind: str) -> None:
    """Refuse ``path`` unless its nearest existing ancestor is a folder we can write in."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise usage_error(name, str(path), f"cannot be created ({parent} is not a "
                          "writable folder)", f"a {kind} path under a writable folder")


def convert(options: Options, out: Optional[TextIO] = None, err: Optional[TextIO] = None
            ) -> dict:
    """Both passes; returns the meta written. UsageError before anything is written when
    RAW has no valid line or the split would leave one side empty. ``out`` (summary) and
    ``err`` (progress) default to sys.stdout and sys.stderr as they are at call time."""
    out, err = out or sys.stdout, err or sys.stderr
    raw = options.raw
    hashed = options.hash_buckets is not None
    stats = scan(raw, count_categories=not hashed, progress=Progress("pass 1/2 (counting)", err))
    if stats.valid == 0:
        detail = f" ({stats.malformed.describe()})" if stats.lines else ""
        raise usage_error("RAW", str(raw), f"no valid line among {stats.lines} lines{detail}",
                          "Criteo text: label 0/1, 13 integer and 26 hexadecimal fields, "
                          "tab-separated")
    sizes = split_sizes(stats.valid, options.eval_fraction, options.seed)
    if min(sizes) == 0:
        raise usage_error("--eval-fraction", options.eval_fraction,
                          f"splits {stats.valid} valid lines into {sizes[0]} train and "
                          f"{sizes[1]} eval samples (seed {options.seed})",
                          "a fraction that leaves both splits non-empty")
    vocabulary = (HashVocabulary(options.hash_buckets) if hashed
                  else ThresholdVocabulary(stats.counts, options.threshold))
    out_dir = options.out_dir.absolute()
    partial = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir()
    try:
        packers = write_records(raw, stats, vocabulary, partial, options.eval_fraction,
                                options.seed, options.samples_per_record,
                                Progress("pass 2/2 (writing)", err))
        written = (packers["train"].samples, packers["eval"].samples)
        if written != sizes:
            raise OSError(f"{raw} changed while it was converted: {sum(written)} samples "
                          f"written, {sum(sizes)} counted in the first pass")
        meta = write_meta(partial, raw, stats, vocabulary, packers, options.eval_fraction,
                          options.seed)
        publish(partial, out_dir, options.overwrite)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if stats.malformed.total:
        print(stats.malformed.summary(stats.lines), file=out)
    print(f"wrote {sizes[0]} train and {sizes[1]} eval samples, vocab_size "
          f"{vocabulary.size} ({vocabulary.mode}), to {options.out_dir}", file=out)
    print(packing_summary(meta), file=out)
    print(f"train on it: python -m ms_exp.run model=wide_deep dataset=criteo "
          f"dataset.path={options.out_dir}", file=out)
    return meta


def packing_summary(meta: dict) -> str:
    """``packed 16 samples a record: 225 train and 26 eval records; last records filled up
    with their split's first samples (train +15, eval +1)``."""
    size, padded = meta["samples_per_record"], meta["padded_samples"]
    line = (f"packed {size} sample{'s' if size > 1 else ''} a record: "
            f"{meta['train_records']} train and "
            f"{meta['eval_records']} eval records")
    if padded["train"] or padded["eval"]:
        line += (f"; last records filled up with their split's first samples (train "
                 f"+{padded['train']}, eval +{padded['eval']})")
    return line


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        options = parse_options(argv)
        convert(options)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except (OSError, EOFError, zlib.error) as error:  # RAW or OUT_DIR failed midway
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
