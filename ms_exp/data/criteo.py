"""Criteo as MindRecord (the converter's output, ms_exp/data/criteo_format.py) with
mindspore.dataset.MindDataset.

Records pack N samples (``criteo_meta.json``), so the reader batches ``batch_size // N``
records and a map flattens them; shuffling and sharding deal in records, as the model zoo.
"""

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Tuple, cast

import numpy as np

from ms_exp.config.errors import ConfigError, require
from ms_exp.data.criteo_format import (
    COLUMNS,
    EVAL_FILE,
    FIELD_SIZE,
    META_FILE,
    META_FORMAT,
    RECONVERT,
    TRAIN_FILE,
    damaged_record_file,
    read_meta,
)


def samples_per_record(cfg: Any, meta: dict) -> int:
    """The N of the converted folder ``cfg.path``, after checking that its meta file is of
    the current format and that ``cfg.batch_size`` is a multiple of N. ConfigError (one
    line) otherwise."""
    found = meta.get("format")
    if found != META_FORMAT:
        detail = " (one sample per record)" if found == 1 else ""
        raise ConfigError(
            "dataset.path",
            cfg.path,
            f"a folder written by this version of the Criteo converter "
            f"({META_FILE} format {META_FORMAT}; this one is format "
            f"{found}{detail}); {RECONVERT}",
        )
    size = meta.get("samples_per_record")
    records = meta.get("train_records")
    valid = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (size, records))
    require(
        valid,
        "dataset.path",
        cfg.path,
        f"a {META_FILE} with positive integers samples_per_record and train_records; {RECONVERT}",
    )
    require(
        cfg.batch_size % size == 0,
        "dataset.batch_size",
        cfg.batch_size,
        f"a multiple of {size}, the samples per record (samples_per_record) of "
        f"{cfg.path}; or convert the data again with a --samples-per-record that "
        "divides the batch size",
    )
    return cast(int, size)  # require refused anything else


def criteo(
    split: str,
    path: str,
    batch_size: int = 1000,
    drop_remainder: bool = True,
    shuffle: bool = True,
    num_shards: Optional[int] = None,
    shard_id: Optional[int] = None,
    num_parallel_workers: int = 1,
) -> Any:
    """Batches of ``split``: its signature names ``batch_size``, as records are batched here."""
    # Imported here: read_meta runs in preflight, before MindSpore may be imported.
    import mindspore.dataset as ds

    # Expanded as validation expands it: MindSpore's readers take "~/criteo" literally.
    root = Path(path).expanduser()
    meta = read_meta(root)
    size = samples_per_record(SimpleNamespace(path=path, batch_size=batch_size), meta)
    records_file = root / (TRAIN_FILE if split == "train" else EVAL_FILE)
    check_record_file(path, records_file, meta)
    # MindSpore's readers and map take lists of column names, not tuples. With shards,
    # MindDataset gives every rank ceil(records / shards) records, repeating a few.
    records = ds.MindDataset(
        str(records_file),
        columns_list=list(COLUMNS),
        shuffle=shuffle,
        num_parallel_workers=num_parallel_workers,
        num_shards=num_shards,
        shard_id=shard_id,
    )
    # Batches of records as batches of samples.
    return records.batch(batch_size // size, drop_remainder=drop_remainder).map(
        _flatten,
        input_columns=list(COLUMNS),
        output_columns=list(COLUMNS),
        num_parallel_workers=num_parallel_workers,
    )


# Record files found whole in this process: (path, size, mtime).
_WHOLE_FILES = set()


def check_record_file(path: str, records_file: Path, meta: dict) -> None:
    """Refuse a record file that differs from what the converter recorded (size, CRC32)
    before MindSpore reads it: a truncated one stops the job mid-epoch with "Failed to
    read file" naming no file, and some flipped bytes kill it with SIGSEGV, printing
    nothing. The CRC reads the whole file once a process (about a second a GB)."""
    stat = records_file.stat()
    key = (str(records_file.resolve()), stat.st_size, stat.st_mtime_ns)
    if key in _WHOLE_FILES:
        return
    problem = damaged_record_file(records_file, meta)
    if problem is not None:
        raise ConfigError(
            "dataset.path",
            path,
            f"a folder written by the Criteo converter, unchanged since; {RECONVERT}",
            problem=f"{records_file} {problem}",
        )
    _WHOLE_FILES.add(key)


def _flatten(
    ids: np.ndarray, vals: np.ndarray, labels: np.ndarray
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[records, N, ...] -> [records * N, ...]."""
    return (ids.reshape(-1, FIELD_SIZE), vals.reshape(-1, FIELD_SIZE), labels.reshape(-1, 1))
