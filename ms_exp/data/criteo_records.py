"""Writing a converted Criteo folder: the second pass (``write_records``) encodes RAW's
valid lines into the train and eval MindRecord files, ``write_meta`` writes
``criteo_meta.json``, ``publish`` moves the complete folder into place. The only part of the
converter that imports MindSpore (the MindRecord writer, at call time) or writes a file."""

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ms_exp.data.criteo_cli import usage_error
from ms_exp.data.criteo_encoding import BATCH_LINES, Vocabulary, dense_divisors, encode, eval_draws
from ms_exp.data.criteo_format import (
    CATEGORICAL_FIELDS,
    COLUMNS,
    DENSE_FIELDS,
    EVAL_FILE,
    FIELD_SIZE,
    FILES_KEY,
    META_FILE,
    META_FORMAT,
    TRAIN_FILE,
    file_digest,
    record_schema,
)
from ms_exp.data.criteo_text import Malformed, Progress, Stats, read_valid


class RecordPacker:
    """Packs one split's samples, in order, into records of ``samples_per_record`` and
    writes them; ``close`` fills the last record up with the split's first samples."""

    def __init__(self, writer: Any, samples_per_record: int) -> None:
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

    @staticmethod
    def _joined(parts: List[Tuple[np.ndarray, ...]]) -> Tuple[np.ndarray, ...]:
        return tuple(np.concatenate([part[i] for part in parts]) for i in range(len(COLUMNS)))

    def _write_whole_records(self) -> None:
        joined = self._joined(self.pending)
        whole = self.pending_count // self.size * self.size
        records = [
            {name: column[start : start + self.size] for name, column in zip(COLUMNS, joined)}
            for start in range(0, whole, self.size)
        ]
        self.writer.write_raw_data(records)
        self.records += len(records)
        self.pending = [tuple(column[whole:] for column in joined)]
        self.pending_count -= whole

    def close(self) -> None:
        """Write the last, partial record (padded), if any, and commit the file."""
        if self.pending_count:
            self.padded = self.size - self.pending_count
            # Cyclic: a split of fewer samples than a record repeats all of them.
            repeat = np.arange(self.padded) % self.head_count
            self.pending.append(tuple(column[repeat] for column in self._joined(self.head)))
            self.pending_count += self.padded
            self._write_whole_records()
        self.writer.commit()


def write_records(
    path: Path,
    stats: Stats,
    vocabulary: Vocabulary,
    folder: Path,
    eval_fraction: float,
    seed: int,
    samples_per_record: int,
    progress: Optional[Progress] = None,
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

    def flush() -> None:
        ids = np.array([row[0] for row in batch], np.int32)
        vals = np.array([row[1] for row in batch], np.float32)
        labels = np.array([[row[2]] for row in batch], np.float32)
        to_eval = next(masks)
        for split, rows in (("train", np.flatnonzero(~to_eval)), ("eval", np.flatnonzero(to_eval))):
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
    umask = os.umask(0o022)
    os.umask(umask)
    mode = 0o666 & ~umask
    for item in folder.iterdir():
        item.chmod(mode)
    return packers


def write_meta(
    folder: Path,
    raw: Path,
    stats: Stats,
    vocabulary: Vocabulary,
    packers: Dict[str, RecordPacker],
    eval_fraction: float,
    seed: int,
) -> dict:
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
        # The finished record files, so that a file damaged later is named before training.
        FILES_KEY: {name: file_digest(folder / name) for name in (TRAIN_FILE, EVAL_FILE)},
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
            raise usage_error(
                "OUT_DIR",
                str(out_dir),
                "folder was filled during the conversion",
                "a new or empty folder, or --overwrite",
            )
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
