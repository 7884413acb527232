"""Reading Criteo display-advertising text, the converter's input: opening RAW (plain or
gzip), checking each line and counting malformed ones by reason, progress lines on stderr,
and the first pass (``scan``) that learns what the encoding needs (dense maxima,
categorical counts, valid lines). Nothing here imports MindSpore.
"""

import gzip
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import DefaultDict, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

from ms_exp.data.criteo_format import CATEGORICAL_FIELDS, DENSE_FIELDS, RAW_FIELDS

PROGRESS_SECONDS = 2.0
FIRST_LINES_KEPT = 5
GZIP_MAGIC = b"\x1f\x8b"


# Checked in this order; a line is counted under the first reason that applies.
WRONG_FIELD_COUNT = "wrong field count"
BAD_LABEL = "bad label"
BAD_INTEGER = "bad integer"
BAD_CATEGORICAL = "bad categorical"
REASONS = (WRONG_FIELD_COUNT, BAD_LABEL, BAD_INTEGER, BAD_CATEGORICAL)

# Lines are bytes, split on b"\n" only: a stray \r or a byte that is not UTF-8 inside a
# line then fails the field checks of that one line instead of splitting or stopping it.
# One C-level match accepts a valid line; only rejected lines are taken apart in Python.
_VALID_LINE = re.compile(
    rb"[01](?:\t(?:-?[0-9]+)?){%d}(?:\t[0-9a-fA-F]*){%d}" % (DENSE_FIELDS, CATEGORICAL_FIELDS)
)
_INTEGER = re.compile(rb"-?[0-9]+")


def parse_line(line: bytes) -> Tuple[Optional[List[bytes]], Optional[str]]:
    """``(fields, None)`` for a valid line (its 40 fields), ``(None, reason)`` for a
    malformed one. ``line`` may end with ``\\n`` or ``\\r\\n``."""
    line = line.rstrip(b"\r\n")
    if _VALID_LINE.fullmatch(line):
        return line.split(b"\t"), None
    fields = line.split(b"\t")
    if len(fields) != RAW_FIELDS:
        return None, WRONG_FIELD_COUNT
    if fields[0] not in (b"0", b"1"):
        return None, BAD_LABEL
    if any(v and not _INTEGER.fullmatch(v) for v in fields[1 : 1 + DENSE_FIELDS]):
        return None, BAD_INTEGER
    return None, BAD_CATEGORICAL


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
        return {
            "total": self.total,
            "by_reason": dict(self.by_reason),
            "first_lines": {r: list(n) for r, n in self.first_lines.items()},
        }

    def describe(self) -> str:
        """``2 wrong field count (first at lines 5, 17), 1 bad label (line 9)``."""
        parts = []
        for reason in REASONS:
            count = self.by_reason.get(reason, 0)
            if not count:
                continue
            lines = self.first_lines[reason]
            where = (
                f"line {lines[0]}"
                if count == 1
                else "first at lines " + ", ".join(str(n) for n in lines)
            )
            parts.append(f"{count} {reason} ({where})")
        return ", ".join(parts)

    def summary(self, lines: int) -> str:
        return f"skipped {self.total} malformed lines of {lines}: {self.describe()}"


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
            print(
                f"{self.label}: {lines:,} lines read, {rate:,.0f} lines/s",
                file=self.stream or sys.stderr,
                flush=True,
            )


def read_valid(
    path: Path, malformed: Malformed, progress: Optional[Progress] = None
) -> Iterator[List[bytes]]:
    """The fields of each valid line of RAW, in order; malformed lines go to ``malformed``.
    Line numbers count every line, valid or not, from 1."""
    with open(path, "rb") as probe:  # gunzipped by its magic bytes, whatever its name
        compressed = probe.read(2) == GZIP_MAGIC
    with gzip.open(path, "rb") if compressed else open(path, "rb") as lines:
        number = 0
        for number, line in enumerate(lines, 1):
            if progress is not None and not number & 0xFFF:
                progress.update(number)
            fields, reason = parse_line(line)
            if reason is not None:
                malformed.add(number, reason)
            elif fields is not None:  # always, when there is no reason
                yield fields
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
    counts: Optional[Sequence[Dict[bytes, int]]] = None
    malformed: Malformed = field(default_factory=Malformed)


def scan(path: Path, count_categories: bool = True, progress: Optional[Progress] = None) -> Stats:
    """Pass 1. ``count_categories`` False (hash mode) skips the costly counting."""
    stats = Stats()
    counts: Optional[List[DefaultDict[bytes, int]]] = (
        [defaultdict(int) for _ in range(CATEGORICAL_FIELDS)] if count_categories else None
    )
    maxima = stats.dense_max
    dense_range = range(DENSE_FIELDS)
    for fields in read_valid(path, stats.malformed, progress):
        stats.valid += 1
        for i in dense_range:
            text = fields[1 + i]
            if text:
                value = int(text)
                known = maxima[i]
                if known is None or value > known:
                    maxima[i] = value
        if counts is not None:
            for counter, category in zip(counts, fields[1 + DENSE_FIELDS :]):
                if category:
                    counter[category] += 1
    stats.lines = stats.valid + stats.malformed.total
    stats.counts = counts  # defaultdicts: a copy would double the peak memory
    return stats
