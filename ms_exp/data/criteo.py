"""Criteo as MindRecord (the converter's output) with mindspore.dataset.MindDataset.

Each sample is 39 (id, weight) pairs plus a float label, the layout of MindSpore's
Wide&Deep model zoo. The converter packs ``samples_per_record`` N consecutive samples of a
split into each record (``criteo_meta.json`` says N; 1000 unless converted with
``--samples-per-record``), so the reader batches ``batch_size // N`` records and a map
flattens them: batches come out as ``feat_ids`` int32 [batch_size, 39], ``feat_vals``
float32 [batch_size, 39], ``label`` float32 [batch_size, 1], in that order because the
network is called as ``net(ids, vals, label)``. ``dataset.batch_size`` must therefore be a
multiple of N (validation refuses others).

Consequences of packing: ``dataset.shuffle`` shuffles records, not samples (the N samples
of a record stay together and in file order, as in the model zoo); sharding deals out
records; and each split's last record was filled up by the converter with the split's first
samples, so an epoch reads at most N - 1 samples of a split twice (``padded_samples`` in
the meta). Evaluation reads every record, keeping a last batch of fewer records. The
vocabulary size also comes from ``criteo_meta.json``.
"""

from pathlib import Path
from types import SimpleNamespace
from typing import cast

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


def samples_per_record(cfg, meta: dict) -> int:
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
    num_shards=None,
    shard_id=None,
    num_parallel_workers: int = 1,
):
    """Batches of ``split`` (its signature names ``batch_size``: records are batched here,
    ``batch_size // N`` at a time, then flattened to samples)."""
    # Imported here: read_meta runs in preflight, before MindSpore may be imported.
    import mindspore.dataset as ds

    # Expanded as validation expands it: MindSpore's readers take "~/criteo" literally.
    root = Path(path).expanduser()
    meta = read_meta(root)
    size = samples_per_record(SimpleNamespace(path=path, batch_size=batch_size), meta)
    records_file = root / (TRAIN_FILE if split == "train" else EVAL_FILE)
    check_record_file(path, records_file, meta)
    workers = num_parallel_workers
    # MindSpore's readers and map take lists of column names, not tuples. With shards,
    # MindDataset gives every rank ceil(records / shards) records, repeating a few.
    records = ds.MindDataset(
        str(records_file),
        columns_list=list(COLUMNS),
        shuffle=shuffle,
        num_parallel_workers=workers,
        num_shards=num_shards,
        shard_id=shard_id,
    )
    return unpack(records.batch(batch_size // size, drop_remainder=drop_remainder), workers)


# Record files found whole in this process: (path, size, mtime) -> True.
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


def _flatten(ids, vals, labels):
    """[records, N, ...] -> [records * N, ...]."""
    return (ids.reshape(-1, FIELD_SIZE), vals.reshape(-1, FIELD_SIZE), labels.reshape(-1, 1))


def unpack(dataset, workers: int):
    """Batches of records as batches of samples."""
    return dataset.map(
        _flatten,
        input_columns=list(COLUMNS),
        output_columns=list(COLUMNS),
        num_parallel_workers=workers,
    )
