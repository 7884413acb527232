"""Write a Criteo-format sample with a learnable click signal: text the converter
(``ms_exp.data.criteo_convert``) reads, for trying the pipeline, and for tests and
benchmarks, without the 11 GB download. It is NOT Criteo data: every value is drawn here.

    python -m ms_exp.data.criteo_sample OUT_FILE --lines N [--seed S] [--malformed M]
        [--overwrite]

OUT_FILE gets N valid lines (gzipped when its name ends in ``.gz``) plus M malformed ones of
the converter's four kinds, spread evenly; the same N, S and M give the same lines. Clicks
follow a logistic model of C1..C4 and I1 (``criteo_lines``). Written under a temporary name
and renamed into place; about 170 bytes of memory a line, whatever N is."""

import argparse
import gzip
import os
import shlex
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import BinaryIO, ContextManager, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from ms_exp.data.criteo_cli import UsageError, _integer, _Parser, check_creatable, usage_error
from ms_exp.data.criteo_format import DENSE_FIELDS

PROG = "ms_exp.data.criteo_sample"
# Distinct values per categorical field: small ones (fields C1..C4 carry the click signal)
# to ones of thousands, whose rare values fall under the converter's threshold.
CRITEO_VOCAB = (
    *(8, 6, 10, 12, 3, 25, 60, 150, 400, 1000, 2500, 5000, 30),  # C1..C13
    *(80, 200, 700, 4, 15, 90, 3000, 6, 40, 120, 350, 9, 1500),  # C14..C26
)
CRITEO_SIGNAL_FIELDS = 4
CRITEO_EMPTY_RATE = 0.05
CRITEO_DENSE_EMPTY_RATE = 0.1
# The converter's reasons (criteo_text.REASONS), in the order the file cycles through.
CRITEO_MALFORMED_KINDS = ("wrong field count", "bad label", "bad integer", "bad categorical")
# Lines formatted at a time while writing.
CHUNK_LINES = 50000


@dataclass
class CriteoColumns:
    """Drawn values of ``count`` lines, compact: text is made a chunk at a time."""

    count: int
    labels: np.ndarray  # bool
    dense: List[np.ndarray]  # int32 per integer field
    dense_empty: List[np.ndarray]  # bool per integer field
    # Per categorical field: its value names with "" appended, and int32 picks into them
    # (-1, the appended "", where the field is empty).
    names: List[np.ndarray]
    picks: List[np.ndarray]

    def lines(self, start: int = 0, stop: Optional[int] = None) -> List[str]:
        """Lines ``start`` to ``stop`` (no newline)."""
        part = slice(start, self.count if stop is None else stop)
        labels = np.where(self.labels[part], "1", "0").astype(object)
        dense = []
        for values, empty in zip(self.dense, self.dense_empty):
            text = values[part].astype(str).astype(object)
            text[empty[part]] = ""
            dense.append(text)
        categories = [names[picks[part]] for names, picks in zip(self.names, self.picks)]
        return ["\t".join(row) for row in zip(labels, *dense, *categories)]


def draw_columns(count: int, rng: np.random.Generator) -> CriteoColumns:
    """The values of ``count`` lines; see ``criteo_lines``."""
    logit = np.full(count, -0.5)
    names, picks = [], []
    for j, size in enumerate(CRITEO_VOCAB):
        drawn = np.array([f"{v:08x}" for v in rng.integers(0, 2**32, size)], dtype=object)
        names.append(np.append(drawn, ""))
        p = 1.0 / np.arange(1, size + 1) ** 1.1
        chosen = rng.choice(size, count, p=p / p.sum())
        if j < CRITEO_SIGNAL_FIELDS:
            logit += rng.normal(0.0, 1.2, size)[chosen]
        chosen = chosen.astype(np.int32)
        chosen[rng.random(count) < CRITEO_EMPTY_RATE] = -1
        picks.append(chosen)
    signal = rng.integers(0, 13, count)
    logit += 0.25 * (signal - 6)
    dense = [signal] + [rng.integers(-3, 5, count)]
    dense += [rng.geometric(1.0 / (5 + 20 * i), count) - 1 for i in range(DENSE_FIELDS - 2)]
    dense = [column.astype(np.int32) for column in dense]
    dense_empty = [rng.random(count) < CRITEO_DENSE_EMPTY_RATE for _ in dense]
    labels = rng.random(count) < 1.0 / (1.0 + np.exp(-logit))
    return CriteoColumns(count, labels, dense, dense_empty, names, picks)


def criteo_lines(count: int, rng: np.random.Generator) -> List[str]:
    """``count`` valid Criteo lines (no newline) with a learnable click signal.

    The click logit is a sum of per-value effects of C1..C4 (each value its own effect,
    N(0, 1.2)) and 0.25 * (I1 - 6), I1 in 0..12; labels are drawn from its sigmoid, so
    a model of these fields ranks clicks with an AUC of about 0.8. Categorical values are
    random 8-digit hex strings, frequencies Zipf-like (p ~ 1/rank^1.1) so that counting
    matters; 5% of categorical and 10% of integer fields are empty, and I2 is often
    negative, as in the real data."""
    return draw_columns(count, rng).lines()


def malformed_criteo_line(kind: str, valid: str) -> str:
    """A bad variant of ``valid`` of the given kind (one of CRITEO_MALFORMED_KINDS)."""
    fields = valid.split("\t")
    if kind == "wrong field count":
        return "\t".join(fields[:-3])
    if kind == "bad label":
        fields[0] = "2"
    elif kind == "bad integer":
        fields[3] = "1.5"
    elif kind == "bad categorical":
        fields[1 + DENSE_FIELDS + 4] = "xyz01234"
    else:
        raise ValueError(kind)
    return "\t".join(fields)


def malformed_positions(lines: int, malformed: int) -> Dict[int, str]:
    """{1-based line number in the file: kind} of the malformed lines, spread evenly."""
    total = lines + malformed
    return {
        (k + 1) * total // (malformed + 1): CRITEO_MALFORMED_KINDS[k % len(CRITEO_MALFORMED_KINDS)]
        for k in range(malformed)
    }


def sample_lines(lines: int, seed: int = 0, malformed: int = 0) -> Iterator[str]:
    """The file's lines in order (no newline): ``lines`` valid ones from ``seed`` and, at
    ``malformed_positions``, a broken copy of the valid line at the same index modulo
    ``lines``."""
    columns = draw_columns(lines, np.random.default_rng(seed))
    positions = malformed_positions(lines, malformed)
    valid_index = 0
    chunk: List[str] = []
    chunk_start = 0
    for number in range(1, lines + malformed + 1):
        kind = positions.get(number)
        if kind is not None:
            source = (number - 1) % lines
            yield malformed_criteo_line(kind, columns.lines(source, source + 1)[0])
            continue
        if valid_index - chunk_start >= len(chunk):
            chunk_start = valid_index
            chunk = columns.lines(valid_index, min(valid_index + CHUNK_LINES, lines))
        yield chunk[valid_index - chunk_start]
        valid_index += 1


def write_criteo_text(path: Path, lines: int, seed: int = 0, malformed: int = 0) -> dict:
    """The file OUT_FILE of the module's docstring at ``path`` (parent folders created);
    returns {1-based line number: kind} of the malformed lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as raw:
            with _text_sink(raw, path) as sink:
                text = sample_lines(lines, seed, malformed)
                while chunk := list(islice(text, CHUNK_LINES)):
                    sink.write(("\n".join(chunk) + "\n").encode("ascii"))
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return malformed_positions(lines, malformed)


def _text_sink(raw: BinaryIO, path: Path) -> Union[ContextManager[BinaryIO], gzip.GzipFile]:
    if path.suffix != ".gz":
        return nullcontext(raw)  # closing is left to its owner
    # mtime 0 and the final name in the header: the same arguments give the same bytes.
    return gzip.GzipFile(filename=path.name, mode="wb", fileobj=raw, compresslevel=6, mtime=0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "out_file", metavar="OUT_FILE", help="text file to write; gzipped when its name ends in .gz"
    )
    parser.add_argument("--lines", metavar="N", required=True, help="valid lines to write")
    parser.add_argument(
        "--seed", metavar="S", default="0", help="seed of the drawn values (default 0)"
    )
    parser.add_argument(
        "--malformed",
        metavar="M",
        default="0",
        help="malformed lines to add, for trying the converter's report (default 0)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace OUT_FILE if it exists")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        lines = _integer("--lines", args.lines, 1)
        seed = _integer("--seed", args.seed, 0)
        malformed = _integer("--malformed", args.malformed, 0)
        out_file = Path(args.out_file)
        if out_file.is_dir():
            raise usage_error("OUT_FILE", str(out_file), "is a folder", "a file name")
        if out_file.exists() and not args.overwrite:
            raise usage_error(
                "OUT_FILE",
                str(out_file),
                "file exists",
                "a new file name, or --overwrite to replace it",
            )
        check_creatable("OUT_FILE", out_file, "file")
        write_criteo_text(out_file, lines, seed, malformed)
    except (UsageError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 1
    size = out_file.stat().st_size
    bad = f" and {malformed} malformed" if malformed else ""
    print(
        f"wrote {lines} valid{bad} lines (seed {seed}, {size:,} bytes) to {out_file}; "
        "a Criteo-format sample, not Criteo data"
    )
    print(f"convert it: python -m ms_exp.data.criteo_convert {shlex.quote(str(out_file))} OUT_DIR")
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
