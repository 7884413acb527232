"""Encoding valid Criteo lines as the model zoo does: the dense fields' divisors, the two
categorical vocabularies (``ThresholdVocabulary`` counts, ``HashVocabulary`` hashes),
``encode`` (one line's 40 fields to ``(feat_ids, feat_vals, label)``) and the seeded
train/eval split. The same file and options must always give the same ids and the same
split. Nothing here imports MindSpore.
"""

import zlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ms_exp.data.criteo_format import CATEGORICAL_FIELDS, DENSE_FIELDS

FIRST_CATEGORY_ID = DENSE_FIELDS + CATEGORICAL_FIELDS  # after the dense and OOV ids
# Valid lines per write_raw_data call and per draw of split uniforms: MindRecord's writer
# costs about 60 us a sample in lists of this size, and far more per call in small ones.
BATCH_LINES = 10000
# feat_ids are int32: the largest id, 38 + 26 * buckets, must fit (82,595,523 buckets).
MAX_HASH_BUCKETS = (2**31 - 1 - FIRST_CATEGORY_ID) // CATEGORICAL_FIELDS


def dense_divisors(dense_max: Sequence[Optional[float]]) -> List[float]:
    """The model zoo's minmax_scale_value divides by the field's maximum; a maximum <= 0
    (or a field that is always empty) would flip signs or divide by zero, so 1.0 then."""
    return [float(m) if m is not None and m > 0 else 1.0 for m in dense_max]


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
        return [
            table.get(value, oov) for table, value, oov in zip(self.tables, categories, _OOV_IDS)
        ]

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
        return [
            offset + crc(value) % b if value else oov
            for offset, value, oov in zip(self.offsets, categories, _OOV_IDS)
        ]

    def meta(self) -> dict:
        return {"vocab_mode": self.mode, "hash_buckets": self.buckets}


Vocabulary = Union[ThresholdVocabulary, HashVocabulary]
# The out-of-vocabulary id of each categorical field (C1 first).
_OOV_IDS = [DENSE_FIELDS + j for j in range(CATEGORICAL_FIELDS)]
_DENSE_IDS = list(range(DENSE_FIELDS))
_CATEGORY_WEIGHTS = [1.0] * CATEGORICAL_FIELDS


def encode(
    fields: Sequence[bytes], vocabulary: Vocabulary, divisors: Sequence[float]
) -> Tuple[List[int], List[float], float]:
    """``(feat_ids, feat_vals, label)`` of one valid line's 40 fields."""
    dense = fields[1 : 1 + DENSE_FIELDS]
    values = [int(v) / d if v else 0.0 for v, d in zip(dense, divisors)]
    return (
        _DENSE_IDS + vocabulary.ids(fields[1 + DENSE_FIELDS :]),
        values + _CATEGORY_WEIGHTS,
        float(fields[0] == b"1"),
    )


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
