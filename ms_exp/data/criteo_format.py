"""The on-disk Criteo format: what the converter (``python -m ms_exp.data.criteo_convert``)
writes, and what the reader (``ms_exp.data.criteo``) and the checks (``ms_exp.data.checks``)
read: ``train.mindrecord`` and ``eval.mindrecord`` of records packing N samples each, and
``criteo_meta.json``, which says N, the vocabulary size, the sample counts and each record
file's size and CRC32 (MindSpore's reader dies with SIGSEGV on some flipped bytes).

Nothing here imports MindSpore: the checks read the meta file before it may be imported."""

import json
import zlib
from pathlib import Path
from typing import Optional, Union

DENSE_FIELDS = 13
CATEGORICAL_FIELDS = 26
FIELD_SIZE = DENSE_FIELDS + CATEGORICAL_FIELDS
RAW_FIELDS = 1 + FIELD_SIZE
META_FILE = "criteo_meta.json"
TRAIN_FILE = "train.mindrecord"
EVAL_FILE = "eval.mindrecord"
# 2: records of samples_per_record samples ([N, 39]); 1 (one sample per record) is refused
# by the loader, which asks for a new conversion.
META_FORMAT = 2
# The record columns, in the order the network takes them: net(ids, vals, label).
COLUMNS = ("feat_ids", "feat_vals", "label")
RECONVERT = "convert again with `python -m ms_exp.data.criteo_convert RAW OUT_DIR --overwrite`"


def record_schema(samples_per_record: int) -> dict:
    """The MindRecord schema: every column holds ``samples_per_record`` samples."""
    return {
        "feat_ids": {"type": "int32", "shape": [samples_per_record, FIELD_SIZE]},
        "feat_vals": {"type": "float32", "shape": [samples_per_record, FIELD_SIZE]},
        "label": {"type": "float32", "shape": [samples_per_record, 1]},
    }


def read_meta(path: Union[str, Path]) -> dict:
    """The converter's ``criteo_meta.json`` in folder ``path``."""
    return json.loads((Path(path).expanduser() / META_FILE).read_text())


# The meta key of the record files' sizes and CRC32s (absent in folders converted before
# it: those are not verified).
FILES_KEY = "files"
CRC_CHUNK = 1 << 20


def file_digest(path: Path) -> dict:
    """``{"bytes": size, "crc32": CRC32 of the content}`` of ``path``."""
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CRC_CHUNK), b""):
            crc = zlib.crc32(chunk, crc)
    return {"bytes": path.stat().st_size, "crc32": crc}


def damaged_record_file(path: Path, meta: dict) -> Optional[str]:
    """What differs in record file ``path`` from what the converter recorded in ``meta``
    (its size, then its CRC32), None if nothing does or nothing was recorded."""
    recorded = (meta.get(FILES_KEY) or {}).get(path.name)
    if not isinstance(recorded, dict):
        return None
    size = path.stat().st_size
    if size != recorded.get("bytes"):
        return (
            f"is {size} bytes; the converter wrote {recorded.get('bytes')} (truncated "
            "or changed since)"
        )
    if file_digest(path)["crc32"] != recorded.get("crc32"):
        return (
            "has changed since it was converted (its CRC32 differs from the one in "
            f"{META_FILE}: corrupt)"
        )
    return None
