"""Criteo end to end: raw text (written in the real format by ``ms_exp.data.criteo_sample``)
through ``python -m ms_exp.data.criteo_convert`` to MindRecord records of several samples,
then ``create_datasets`` of ``dataset=criteo`` and the ``dataset=criteo`` validation.

Conversions run in-process through ``main()`` where a test looks at ids and files, and as a
subprocess where it looks at what a user sees (exit status, the one-line error, stdout).
"""

import contextlib
import gzip
import io
import json
import zlib
from collections import Counter
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
from conftest import run_cli
from datafiles import write_criteo_text
from omegaconf import OmegaConf

from ms_exp.config.errors import ConfigError
from ms_exp.config.schema import CriteoDataset
from ms_exp.data import create_datasets, criteo_convert, criteo_text
from ms_exp.data.build import declared_shape
from ms_exp.data.checks import validate_dataset
from ms_exp.data.criteo_convert import main, split_sizes
from ms_exp.data.criteo_format import read_meta
from ms_exp.data.criteo_sample import sample_lines
from ms_exp.data.spec import Shard

PROG = "ms_exp.data.criteo_convert"
LINES = 4000
MALFORMED = 8
# The module's conversion packs 16 samples a record (3,585 train samples: 225 records, the
# last one filled up with 15 samples from the start; 415 eval: 26 records, +1).
PER_RECORD = 16
PACK = ("--samples-per-record", str(PER_RECORD))

Row = Tuple[Tuple[int, ...], Tuple[float, ...], float]


def records(folder: Path, split: str) -> List[Row]:
    """Every sample of every record of ``<folder>/<split>.mindrecord`` in file order,
    padding included."""
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(folder / f"{split}.mindrecord"))
    try:
        return [
            (tuple(ids), tuple(vals), label[0])
            for r in reader.get_next()
            for ids, vals, label in zip(
                r["feat_ids"].tolist(), r["feat_vals"].tolist(), r["label"].tolist()
            )
        ]
    finally:
        reader.close()


def samples(folder: Path, split: str) -> List[Row]:
    """The real samples of a split: its records without the padding at the end."""
    return records(folder, split)[: read_meta(folder)[f"{split}_samples"]]


def convert(raw: Path, out: Path, *options: str) -> dict:
    assert main([str(raw), str(out), *options]) == 0
    return json.loads((out / "criteo_meta.json").read_text())


def assert_refused(capsys, argv, out: Path) -> str:
    """Exit status 2, one ``ms_exp.data.criteo_convert: error:`` line, nothing written
    (no OUT_DIR unless it was there before, no partial folder). Returns the line."""
    existed = out.exists()
    assert main([str(a) for a in argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{PROG}: error: "), lines[0]
    assert out.exists() == existed
    assert not list(out.parent.glob(f"{out.name}.partial-*"))
    return lines[0]


def dataset_cfg(path, **overrides):
    return OmegaConf.structured(CriteoDataset(path=str(path), **overrides))


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Tuple[Path, dict]:
    path = tmp_path_factory.mktemp("raw") / "train.txt"
    return path, write_criteo_text(path, LINES, malformed=MALFORMED)


@pytest.fixture(scope="module")
def cli(raw, tmp_path_factory):
    """The converter run as a user runs it, once for the module."""
    work = tmp_path_factory.mktemp("cli")
    result = run_cli(PROG, [str(raw[0]), "criteo_mr", "--threshold", "20", *PACK], work)
    return result, work / "criteo_mr"


@pytest.fixture(scope="module")
def converted(raw, tmp_path_factory) -> Path:
    """The same conversion as ``cli``'s, in this process (the command's start-up is tested
    once, by the end-to-end test that reads ``cli``)."""
    out = tmp_path_factory.mktemp("converted") / "criteo_mr"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        convert(raw[0], out, "--threshold", "20", *PACK)
    return out


# --- the converter as a command ---------------------------------------------------------


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_cli_converts_and_reports_malformed_lines_by_reason(raw, cli):
    result, out = cli
    assert result.rc == 0, result.stderr
    positions = raw[1]
    lines = {
        kind: [n for n, k in sorted(positions.items()) if k == kind] for kind in positions.values()
    }
    assert result.field("skipped ") == (
        f"8 malformed lines of {LINES + MALFORMED}: "
        f"2 wrong field count (first at lines {lines['wrong field count'][0]}, "
        f"{lines['wrong field count'][1]}), "
        f"2 bad label (first at lines {lines['bad label'][0]}, {lines['bad label'][1]}), "
        f"2 bad integer (first at lines {lines['bad integer'][0]}, {lines['bad integer'][1]}), "
        f"2 bad categorical (first at lines {lines['bad categorical'][0]}, "
        f"{lines['bad categorical'][1]})"
    )
    meta = read_meta(out)
    assert result.field("wrote ") == (
        f"{meta['train_samples']} train and "
        f"{meta['eval_samples']} eval samples, vocab_size "
        f"{meta['vocab_size']} (threshold), to criteo_mr"
    )
    assert result.field("packed ") == (
        "16 samples a record: 225 train and 26 eval records; last records filled up with "
        "their split's first samples (train +15, eval +1)"
    )
    assert (
        "python -m ms_exp.run model=wide_deep dataset=criteo dataset.path=criteo_mr"
        in result.stdout
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "criteo_meta.json",
        "eval.mindrecord",
        "eval.mindrecord.db",
        "train.mindrecord",
        "train.mindrecord.db",
    ]
    # MindRecord leaves its files owner-only (0600); the converter gives them the umask's mode.
    modes = {p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert modes == {(out / "criteo_meta.json").stat().st_mode & 0o777}
    assert meta["lines"] == LINES + MALFORMED
    assert meta["train_samples"] + meta["eval_samples"] == LINES
    assert meta["malformed"] == {
        "total": MALFORMED,
        "by_reason": {kind: 2 for kind in lines},
        "first_lines": lines,
    }
    assert (
        meta["format"],
        meta["field_size"],
        meta["dense_fields"],
        meta["categorical_fields"],
    ) == (2, 39, 13, 26)
    assert (meta["train_samples"], meta["eval_samples"]) == (3585, 415)
    assert (
        meta["samples_per_record"],
        meta["train_records"],
        meta["eval_records"],
        meta["padded_samples"],
    ) == (16, 225, 26, {"train": 15, "eval": 1})
    assert (meta["vocab_mode"], meta["threshold"], meta["eval_fraction"], meta["seed"]) == (
        "threshold",
        20,
        0.1,
        0,
    )
    assert "hash_buckets" not in meta


def test_missing_raw_file_is_one_line_and_writes_nothing(tmp_path):
    result = run_cli(PROG, ["nowhere.txt", "out"], tmp_path)
    assert result.rc == 2
    assert result.stderr.strip() == (
        f"{PROG}: error: RAW='nowhere.txt': no such file; "
        "expected a readable Criteo text file (plain or .gz)"
    )
    assert list(tmp_path.iterdir()) == []


# --- ids and weights, exactly -----------------------------------------------------------

SAME = "0b153874"  # C4..C26 of every hand-written line, unless replaced


def hand_written_lines():
    """Three lines: labels, I1..I13, C1..C26; see the expected ids in the tests."""

    def line(label, i1, i2, dense, c1, c2, c3, c26):
        cats = [c1, c2, c3] + [SAME] * 22 + [c26]
        return "\t".join([label, i1, i2, ""] + [dense] * 10 + cats)

    return [
        line("1", "5", "-1", "2", "68fd1e64", "80e26c9b", "", SAME),
        line("0", "10", "-3", "4", "68fd1e64", "fb936136", "aaaaaaaa", SAME),
        line("1", "0", "", "8", "05db9164", "80e26c9b", "aaaaaaaa", "ABCDEF12"),
    ]


# I1 by its max 10; I2's max is -1 <= 0, so divided by 1; I3 always empty; I4..I13 by 8.
HAND_DENSE = [
    [0.5, -1.0, 0.0] + [0.25] * 10,
    [1.0, -3.0, 0.0] + [0.5] * 10,
    [0.0, 0.0, 0.0] + [1.0] * 10,
]
HAND_LABELS = [1.0, 0.0, 1.0]


def convert_hand_written(tmp_path, *options) -> Tuple[dict, List[Row]]:
    raw = tmp_path / "three.txt"
    raw.write_text("\n".join(hand_written_lines()) + "\n")
    # The seed that puts at least one of the three lines in each split.
    seed = next(s for s in range(100) if min(split_sizes(3, 0.5, s)) > 0)
    meta = convert(raw, tmp_path / "out", "--eval-fraction", "0.5", "--seed", str(seed), *options)
    rows = samples(tmp_path / "out", "train") + samples(tmp_path / "out", "eval")
    return meta, sorted(rows)


def expected_rows(categorical_ids) -> List[Row]:
    return sorted(
        (tuple(range(13)) + tuple(ids), tuple(dense) + (1.0,) * 26, label)
        for ids, dense, label in zip(categorical_ids, HAND_DENSE, HAND_LABELS)
    )


def test_threshold_ids_and_weights_of_three_lines(tmp_path):
    meta, rows = convert_hand_written(tmp_path, "--threshold", "1")
    # Seen more than once: C1 68fd1e64 -> 39, C2 80e26c9b -> 40, C3 aaaaaaaa -> 41, C4..C26
    # 0b153874 -> 42..64 (C26's twice). The rest is its field's OOV id 13 + j.
    same = list(range(42, 64))
    assert rows == expected_rows(
        [[39, 40, 15] + same + [64], [39, 14, 41] + same + [64], [13, 40, 41] + same + [38]]
    )
    assert meta["vocab_size"] == 65
    assert meta["dense_max"] == [10.0, 1.0, 1.0] + [8.0] * 10
    assert meta["train_samples"] + meta["eval_samples"] == 3


def test_a_split_smaller_than_a_record_repeats_its_samples_in_turn(tmp_path):
    """The default 1,000 samples a record: each split's one record holds its 1 or 2
    samples over and over, in order, and the meta says how many are padding."""
    meta, _ = convert_hand_written(tmp_path)
    assert meta["samples_per_record"] == 1000
    for split in ("train", "eval"):
        real = samples(tmp_path / "out", split)
        assert len(real) == meta[f"{split}_samples"] and meta[f"{split}_samples"] >= 1
        assert (meta[f"{split}_records"], meta["padded_samples"][split]) == (1, 1000 - len(real))
        assert records(tmp_path / "out", split) == [real[i % len(real)] for i in range(1000)]


def test_higher_threshold_sends_everything_to_oov(tmp_path):
    meta, rows = convert_hand_written(tmp_path, "--threshold", "2")
    # Only 0b153874 of C4..C25 is seen more than twice.
    same = list(range(39, 61))
    assert rows == expected_rows(
        [[13, 14, 15] + same + [38], [13, 14, 15] + same + [38], [13, 14, 15] + same + [38]]
    )
    assert meta["vocab_size"] == 61


def test_hash_ids_of_three_lines(tmp_path):
    meta, rows = convert_hand_written(tmp_path, "--hash-buckets", "10")

    def hashed(j, value):
        return 13 + j if value == "" else 39 + 10 * j + zlib.crc32(value.encode()) % 10

    expected = [
        [hashed(j, v) for j, v in enumerate(line.split("\t")[14:])] for line in hand_written_lines()
    ]
    assert rows == expected_rows(expected)
    assert expected[0][0] == 39 + zlib.crc32(b"68fd1e64") % 10 == 46  # stable, not hash()
    assert expected[0][2] == 15  # empty C3: its OOV id
    assert (meta["vocab_size"], meta["vocab_mode"], meta["hash_buckets"]) == (
        39 + 26 * 10,
        "hash",
        10,
    )
    assert "threshold" not in meta


def test_crlf_is_a_line_end_and_stray_bytes_fail_only_their_line(tmp_path):
    first, second, third = (line.encode() for line in hand_written_lines())
    raw = tmp_path / "mixed.txt"
    # A Windows line end; a \r and a byte that is not UTF-8 inside categorical fields.
    raw.write_bytes(
        first
        + b"\r\n"
        + second.replace(b"aaaaaaaa", b"aa\raa")
        + b"\n"
        + third.replace(b"05db9164", b"05db\xff164")
        + b"\n"
        + first
        + b"\n"
        + third
        + b"\n"
    )
    meta = convert(raw, tmp_path / "out", "--eval-fraction", "0.5", "--seed", "1", *PACK)
    assert meta["lines"] == 5
    assert meta["train_samples"] + meta["eval_samples"] == 3
    assert meta["malformed"]["first_lines"] == {"bad categorical": [2, 3]}


# --- malformed lines, split, determinism, gzip ------------------------------------------


def test_malformed_lines_do_not_change_the_training_data(tmp_path, raw, converted):
    clean = tmp_path / "clean.txt"
    assert write_criteo_text(clean, LINES) == {}
    meta = convert(clean, tmp_path / "out", "--threshold", "20", *PACK)
    for split in ("train", "eval"):
        assert records(tmp_path / "out", split) == records(converted, split)
    assert meta["vocab_size"] == read_meta(converted)["vocab_size"]
    assert meta["malformed"] == {"total": 0, "by_reason": {}, "first_lines": {}}


def test_same_seed_same_files_other_seed_other_split(tmp_path, raw, converted):
    meta = convert(raw[0], tmp_path / "again", "--threshold", "20", *PACK)
    for name in ("train.mindrecord", "eval.mindrecord"):
        assert (tmp_path / "again" / name).read_bytes() == (converted / name).read_bytes()
    assert meta == read_meta(converted)
    other = convert(raw[0], tmp_path / "seed1", "--threshold", "20", "--seed", "1", *PACK)
    assert records(tmp_path / "seed1", "eval") != records(converted, "eval")
    assert other["vocab_size"] == meta["vocab_size"]  # the split does not touch the counts


def test_eval_fraction_sets_the_split(tmp_path, raw):
    meta = convert(raw[0], tmp_path / "out", "--eval-fraction", "0.25", "--seed", "3")
    assert (meta["train_samples"], meta["eval_samples"]) == split_sizes(LINES, 0.25, 3)
    assert 900 < meta["eval_samples"] < 1100
    assert len(samples(tmp_path / "out", "eval")) == meta["eval_samples"]
    # The default 1,000 samples a record: nothing lost, less than a record added.
    for split in ("train", "eval"):
        real, padded = meta[f"{split}_samples"], meta["padded_samples"][split]
        assert meta[f"{split}_records"] * 1000 == real + padded and 0 <= padded < 1000


def test_gzip_input_gives_the_same_records(tmp_path, converted):
    raw = tmp_path / "train.txt.gz"
    write_criteo_text(raw, LINES, malformed=MALFORMED)
    meta = convert(raw, tmp_path / "out", "--threshold", "20", *PACK)
    assert records(tmp_path / "out", "train") == records(converted, "train")
    assert meta["source"] == str(raw)


def test_progress_lines_go_to_stderr(tmp_path, raw, capsys, monkeypatch):
    monkeypatch.setattr(criteo_text, "PROGRESS_SECONDS", 0.0)
    convert(raw[0], tmp_path / "out", "--hash-buckets", "1000")
    captured = capsys.readouterr()
    assert f"pass 1/2 (counting): {LINES + MALFORMED:,} lines read" in captured.err
    assert f"pass 2/2 (writing): {LINES + MALFORMED:,} lines read" in captured.err
    assert "lines/s" in captured.err
    assert "vocab_size 26039 (hash)" in captured.out


def test_the_data_carries_a_learnable_signal(converted):
    """Per-id click rates from the train split rank the eval split well above chance, so
    a model that learns per-id weights (the wide part) has something to learn."""

    def arrays(split):
        rows = samples(converted, split)
        return np.array([r[0] for r in rows]), np.array([r[2] for r in rows])

    train_ids, train_labels = arrays("train")
    eval_ids, eval_labels = arrays("eval")
    prior = train_labels.mean()
    size = read_meta(converted)["vocab_size"]
    clicks = np.bincount(train_ids.ravel(), np.repeat(train_labels, 39), minlength=size)
    seen = np.bincount(train_ids.ravel(), minlength=size)
    rate = (clicks + 10 * prior) / (seen + 10)
    log_odds = np.log(rate / (1 - rate)) - np.log(prior / (1 - prior))
    scores = log_odds[eval_ids].sum(axis=1)
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positive = eval_labels == 1
    n1, n0 = positive.sum(), (~positive).sum()
    auc = (ranks[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)
    assert auc > 0.75


# --- refusals: one line, nothing written -------------------------------------------------


def test_non_empty_out_dir_is_kept_without_overwrite(tmp_path, raw, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    line = assert_refused(capsys, [raw[0], out], out)
    assert line == (
        f"{PROG}: error: OUT_DIR='{out}': folder exists and is not empty; "
        "expected a new or empty folder, or --overwrite to replace it"
    )
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "old"


def test_overwrite_replaces_the_old_folder(tmp_path, raw):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    convert(raw[0], out, "--overwrite", "--hash-buckets", "100")
    assert not (out / "keep.txt").exists()
    assert read_meta(out)["vocab_size"] == 39 + 26 * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_conversion_leaves_the_old_folder_and_no_partial(
    tmp_path, raw, capsys, monkeypatch
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(criteo_convert, "write_meta", disk_full)
    assert main([str(raw[0]), str(out), "--overwrite"]) == 1
    assert capsys.readouterr().err.strip() == f"{PROG}: error: [Errno 28] No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_overwrite_never_deletes_the_raw_file(tmp_path, capsys):
    raw = tmp_path / "data" / "train.txt"
    write_criteo_text(raw, 20)
    line = assert_refused(capsys, [raw, tmp_path / "data", "--overwrite"], tmp_path / "data")
    assert line == (
        f"{PROG}: error: OUT_DIR='{tmp_path / 'data'}': holds RAW, which "
        "replacing it would delete; expected a folder that holds neither RAW nor "
        "the current folder"
    )
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["train.txt"]


def test_empty_out_dir_is_used(tmp_path, raw):
    (tmp_path / "out").mkdir()
    meta = convert(raw[0], tmp_path / "out", "--hash-buckets", "100")
    assert meta["lines"] == LINES + MALFORMED


@pytest.mark.parametrize(
    "options,message",
    [
        (
            ["--eval-fraction", "1.5"],
            "--eval-fraction=1.5: not allowed; expected a number between 0 and 1 (exclusive)",
        ),
        (
            ["--eval-fraction", "0"],
            "--eval-fraction=0.0: not allowed; expected a number between 0 and 1 (exclusive)",
        ),
        (
            ["--eval-fraction", "tenth"],
            "--eval-fraction='tenth': not a number; expected a number between 0 and 1 (exclusive)",
        ),
        (["--threshold", "-1"], "--threshold=-1: not allowed; expected an integer >= 0"),
        (
            ["--hash-buckets", "0"],
            "--hash-buckets=0: not allowed; expected an integer from 1 to 82595523",
        ),
        (
            ["--hash-buckets", "82595524"],
            "--hash-buckets=82595524: not allowed; expected an integer from 1 to 82595523",
        ),
        (["--seed", "x"], "--seed='x': not an integer; expected an integer >= 0"),
        (
            ["--samples-per-record", "0"],
            "--samples-per-record=0: not allowed; expected an integer from 1 to 50000",
        ),
        (
            ["--threshold", "5", "--hash-buckets", "9"],
            "argument --hash-buckets: not allowed with argument --threshold",
        ),
    ],
    ids=[
        "fraction-above-1",
        "fraction-0",
        "fraction-word",
        "threshold",
        "buckets-0",
        "buckets-beyond-int32",
        "seed",
        "per-record-0",
        "both-modes",
    ],
)
def test_bad_options_are_refused(tmp_path, raw, capsys, options, message):
    line = assert_refused(capsys, [raw[0], tmp_path / "out", *options], tmp_path / "out")
    assert line == f"{PROG}: error: {message}"


def test_raw_folder_is_refused(tmp_path, capsys):
    line = assert_refused(capsys, [tmp_path, tmp_path / "out"], tmp_path / "out")
    assert f"RAW='{tmp_path}': is a folder" in line


def test_all_lines_malformed_is_refused(tmp_path, capsys):
    raw = tmp_path / "bad.txt"
    raw.write_text("1\t2\t3\n" + "x" * 50 + "\n")
    line = assert_refused(capsys, [raw, tmp_path / "out"], tmp_path / "out")
    assert line == (
        f"{PROG}: error: RAW='{raw}': no valid line among 2 lines (2 wrong field "
        "count (first at lines 1, 2)); expected Criteo text: label 0/1, 13 integer "
        "and 26 hexadecimal fields, tab-separated"
    )


def test_split_with_an_empty_side_is_refused(tmp_path, capsys):
    raw = tmp_path / "three.txt"
    raw.write_text("\n".join(hand_written_lines()) + "\n")
    line = assert_refused(
        capsys, [raw, tmp_path / "out", "--eval-fraction", "0.01"], tmp_path / "out"
    )
    assert line == (
        f"{PROG}: error: --eval-fraction=0.01: splits 3 valid lines into 3 train "
        "and 0 eval samples (seed 0); expected a fraction that leaves both splits "
        "non-empty"
    )


# --- the loader -------------------------------------------------------------------------


def batches(dataset) -> List[List[Row]]:
    """Each batch of ``dataset`` as its rows."""
    return [
        [
            (tuple(i), tuple(v), label[0])
            for i, v, label in zip(ids.tolist(), vals.tolist(), labels.tolist())
        ]
        for ids, vals, labels in dataset.create_tuple_iterator(output_numpy=True)
    ]


def in_records(rows: List[Row]) -> List[Tuple[Row, ...]]:
    """Rows in groups of PER_RECORD, as the records hold them."""
    assert len(rows) % PER_RECORD == 0
    return [tuple(rows[i : i + PER_RECORD]) for i in range(0, len(rows), PER_RECORD)]


@pytest.fixture(scope="module")
def unpacked(raw, tmp_path_factory) -> Path:
    """The module's raw text converted one sample a record: the samples as encoded."""
    out = tmp_path_factory.mktemp("unpacked") / "mr"
    meta = convert(raw[0], out, "--threshold", "20", "--samples-per-record", "1")
    assert meta["padded_samples"] == {"train": 0, "eval": 0}
    return out


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_packing_round_trip_in_order_with_the_padded_tail(converted, unpacked):
    """Unshuffled, the loader yields the encoded samples of each split in file order,
    then the split's first samples again up to the end of its last record."""
    meta = read_meta(converted)
    cfg = dataset_cfg(converted, batch_size=96, shuffle=False, drop_remainder=False)
    train, evaluation, spec = create_datasets(cfg)
    assert (spec.train_size, spec.eval_size) == (225 * 16, 26 * 16)
    for split, dataset in (("train", train), ("eval", evaluation)):
        encoded = records(unpacked, split)
        assert len(encoded) == meta[f"{split}_samples"]
        padded = meta["padded_samples"][split]
        rows = [row for batch in batches(dataset) for row in batch]
        assert rows == encoded + encoded[:padded]
        assert rows == records(converted, split)


def test_batches_of_records_come_out_as_batches_of_samples(converted):
    meta = read_meta(converted)
    cfg = dataset_cfg(converted, batch_size=96)  # 6 records; shuffle, drop_remainder
    train, evaluation, spec = create_datasets(cfg)
    assert (spec.image_shape, spec.num_classes, spec.vocab_size) == ((39,), 2, meta["vocab_size"])
    assert train.get_col_names() == evaluation.get_col_names() == ["feat_ids", "feat_vals", "label"]
    ids, vals, labels = next(train.create_tuple_iterator(output_numpy=True))
    assert (ids.shape, ids.dtype) == ((96, 39), np.int32)
    assert (vals.shape, vals.dtype) == ((96, 39), np.float32)
    assert (labels.shape, labels.dtype) == ((96, 1), np.float32)
    assert 0 <= ids.min() and ids.max() < meta["vocab_size"]
    # Training drops the last 3 of 225 records; evaluation keeps a last batch of 2 records.
    train_batches = batches(train)
    assert train.get_dataset_size() == len(train_batches) == 225 // 6
    assert {len(batch) for batch in train_batches} == {96}
    assert [len(batch) for batch in batches(evaluation)] == [96] * 4 + [32]
    # Shuffling deals out whole records, in a new order.
    stored = in_records(records(converted, "train"))
    read = [record for batch in train_batches for record in in_records(batch)]
    assert len(set(read)) == len(read) == 222 and set(read) <= set(stored)
    assert read != stored[:222]


def test_two_shards_deal_out_whole_records(converted):
    stored = Counter(in_records(records(converted, "train")))
    cfg = dataset_cfg(converted, batch_size=32, drop_remainder=False)
    read = Counter()
    for shard_id in range(2):
        train, _, spec = create_datasets(cfg, Shard(2, shard_id))
        assert spec.train_size == 113 * 16  # ceil(225 / 2) records
        rows = [row for batch in batches(train) for row in batch]
        assert len(rows) == spec.train_size
        got = Counter(in_records(rows))
        assert set(got) <= set(stored)
        read.update(got)
    assert not stored - read  # every record is read by one of the ranks
    assert sum((read - stored).values()) == 1  # 225 records: one is read twice


# --- validation -------------------------------------------------------------------------


def test_validation_accepts_the_converted_folder(converted):
    validate_dataset(dataset_cfg(converted, batch_size=96))
    assert declared_shape(dataset_cfg(converted)) == ((39,), 2)


def refusal(cfg) -> str:
    with pytest.raises(ConfigError) as error:
        validate_dataset(cfg)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_validation_refuses_a_missing_folder(tmp_path):
    message = refusal(dataset_cfg(tmp_path / "nowhere"))
    assert (
        message == f"dataset.path='{tmp_path / 'nowhere'}': not allowed; expected a "
        "folder that exists"
    )
    assert "DATA_PATH" in refusal(OmegaConf.structured(CriteoDataset()))


def test_validation_names_the_missing_files_and_the_converter(tmp_path, converted):
    (tmp_path / "criteo_meta.json").write_text((converted / "criteo_meta.json").read_text())
    (tmp_path / "train.mindrecord").write_bytes(b"")
    message = refusal(dataset_cfg(tmp_path))
    assert message == (
        f"dataset.path='{tmp_path}': not allowed; expected a folder written "
        "by the Criteo converter (eval.mindrecord missing); convert raw text "
        "with `python -m ms_exp.data.criteo_convert RAW OUT_DIR`"
    )


@pytest.mark.parametrize(
    "content,problem",
    [
        ("{not json", "a readable criteo_meta.json (Expecting property name"),
        (
            '{"train_samples": 10}',
            "criteo_meta.json with positive integers vocab_size and "
            "train_samples (vocab_size missing or not one)",
        ),
    ],
)
def test_validation_refuses_a_bad_meta_file(tmp_path, content, problem):
    for name in ("train.mindrecord", "eval.mindrecord"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "criteo_meta.json").write_text(content)
    assert problem in refusal(dataset_cfg(tmp_path))


def test_validation_refuses_a_batch_larger_than_the_training_set(converted):
    message = refusal(dataset_cfg(converted, batch_size=226 * 16))
    assert message.startswith(
        f"dataset.batch_size=3616: not allowed; expected at most the "
        f"3600 training samples (225 records of 16) in {converted}"
    )
    validate_dataset(dataset_cfg(converted, batch_size=226 * 16, drop_remainder=False))


def test_a_batch_size_not_a_multiple_of_the_records_is_refused(converted):
    cfg = dataset_cfg(converted, batch_size=100)
    assert refusal(cfg) == (
        f"dataset.batch_size=100: not allowed; expected a multiple of 16, "
        f"the samples per record (samples_per_record) of {converted}; or "
        "convert the data again with a --samples-per-record that divides "
        "the batch size"
    )
    with pytest.raises(ConfigError, match="^dataset.batch_size=100: "):
        create_datasets(cfg, Shard())


def test_a_folder_of_the_first_format_asks_for_a_new_conversion(tmp_path, converted):
    meta = read_meta(converted)
    meta["format"] = 1
    for key in ("samples_per_record", "train_records", "eval_records", "padded_samples"):
        del meta[key]
    (tmp_path / "criteo_meta.json").write_text(json.dumps(meta))
    for name in ("train.mindrecord", "eval.mindrecord"):
        (tmp_path / name).write_bytes(b"")
    cfg = dataset_cfg(tmp_path)
    message = refusal(cfg)
    assert message == (
        f"dataset.path='{tmp_path}': not allowed; expected a folder written "
        "by this version of the Criteo converter (criteo_meta.json format 2; "
        "this one is format 1 (one sample per record)); convert again with "
        "`python -m ms_exp.data.criteo_convert RAW OUT_DIR --overwrite`"
    )
    with pytest.raises(ConfigError) as error:
        create_datasets(cfg, Shard())
    assert str(error.value) == message


# --- the Criteo-format sample as a command ----------------------------------------------

SAMPLE = "ms_exp.data.criteo_sample"


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_sample_cli_writes_the_generator_lines_through_a_temporary_file(tmp_path):
    result = run_cli(
        SAMPLE, ["s/sample.txt.gz", "--lines", "50", "--seed", "3", "--malformed", "2"], tmp_path
    )
    assert result.rc == 0, result.stderr
    out = tmp_path / "s" / "sample.txt.gz"
    assert result.field("wrote ") == (
        f"50 valid and 2 malformed lines (seed 3, "
        f"{out.stat().st_size:,} bytes) to s/sample.txt.gz; a "
        "Criteo-format sample, not Criteo data"
    )
    assert "python -m ms_exp.data.criteo_convert s/sample.txt.gz OUT_DIR" in result.stdout
    assert gzip.decompress(out.read_bytes()).decode().splitlines() == list(sample_lines(50, 3, 2))
    assert [p.name for p in out.parent.iterdir()] == ["sample.txt.gz"]  # no temporary left
    for argv, message in (
        (
            ["s/sample.txt.gz", "--lines", "5"],
            "OUT_FILE='s/sample.txt.gz': file exists; "
            "expected a new file name, or --overwrite to replace it",
        ),
        (["other.txt", "--lines", "0"], "--lines=0: not allowed; expected an integer >= 1"),
        (
            ["other.txt", "--lines", "5", "--malformed", "-1"],
            "--malformed=-1: not allowed; expected an integer >= 0",
        ),
    ):
        refused = run_cli(SAMPLE, argv, tmp_path)
        assert (refused.rc, refused.stderr.strip()) == (2, f"{SAMPLE}: error: {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    assert run_cli(SAMPLE, ["s/sample.txt.gz", "--lines", "5", "--overwrite"], tmp_path).rc == 0
    assert len(gzip.decompress(out.read_bytes()).splitlines()) == 5
