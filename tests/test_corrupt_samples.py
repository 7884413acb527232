"""Damaged image files are named before training, never a silent death.

A JPEG cut off inside its header (before its first scan) makes MindSpore's Decode divide by
zero: the job died with SIGFPE (exit 136), printing nothing, its MLflow run KILLED and
``run.json`` RUNNING. ``ms_exp.data.headers.damaged_image`` reads each file's header and
last bytes; the image folder option checks every file of a split when it is built.
"""

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import main_in_process
from datafiles import write_image_folder

from ms_exp.config.errors import ConfigError
from ms_exp.data.headers import check_image_folder, damaged_image
from ms_exp.data.spec import IMAGE_EXTENSIONS

TINY_RESNET18 = [
    "model=resnet",
    "model.depth=18",
    "model.width=0.125",
    "dataset.image_size=32",
    "dataset.batch_size=4",
]
SIGFPE_EXIT = 128 + 8


def encoded(fmt: str) -> bytes:
    from PIL import Image

    pixels = (np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def first_scan(jpeg: bytes) -> int:
    return jpeg.index(b"\xff\xda")


def problem_of(tmp_path: Path, content: bytes) -> str:
    path = tmp_path / "image.JPEG"
    path.write_bytes(content)
    return damaged_image(path)


def test_whole_images_pass(tmp_path):
    for fmt in ("JPEG", "PNG", "BMP"):
        assert problem_of(tmp_path, encoded(fmt)) is None, fmt
    folder = write_image_folder(tmp_path / "images")
    assert (
        check_image_folder("dataset.train_dir", "train", folder / "train", IMAGE_EXTENSIONS) == 24
    )


def test_a_jpeg_cut_off_in_its_header_is_named(tmp_path):
    jpeg = encoded("JPEG")
    # Every cut before the scan starts: the cuts MindSpore's Decode dies on with SIGFPE
    # (after the frame header) and those it refuses.
    for size in (3, 10, 100, 200, first_scan(jpeg), first_scan(jpeg) + 4):
        problem = problem_of(tmp_path, jpeg[:size])
        assert problem == (
            f"has a cut-off JPEG header ({size} bytes, it ends before its first scan)"
        ), size


def jpeg_variants() -> dict:
    """The JPEGs whose every cut is checked: baseline, progressive, greyscale, and one with
    an EXIF block holding a thumbnail (its end-of-image marker sits inside the header, so
    the end check alone passes a file cut off after it)."""
    from PIL import Image

    baseline = encoded("JPEG")
    image = Image.open(io.BytesIO(baseline))
    variants = {"baseline": baseline}
    for name, save in (("progressive", dict(progressive=True)), ("greyscale", {})):
        out = io.BytesIO()
        (image.convert("L") if name == "greyscale" else image).save(out, "JPEG", **save)
        variants[name] = out.getvalue()
    thumbnail = io.BytesIO()
    image.resize((8, 8)).save(thumbnail, "JPEG")
    exif = b"Exif\x00\x00" + Image.Exif().tobytes() + thumbnail.getvalue()
    variants["exif-thumbnail"] = (
        baseline[:2] + b"\xff\xe1" + (len(exif) + 2).to_bytes(2, "big") + exif + baseline[2:]
    )
    return variants


def scan_data(jpeg: bytes) -> int:
    """Where the first scan's data starts (after its SOS segment)."""
    return first_scan(jpeg) + 2 + int.from_bytes(jpeg[first_scan(jpeg) + 2 :][:2], "big")


def test_every_cut_before_the_scan_is_a_cut_off_header(tmp_path):
    """Each cut of each variant, byte by byte. Cut after the frame header, MindSpore 2.10's
    Decode died with SIGFPE; just after a marker's 0xff byte it hung; in two DHT segments it
    died with SIGSEGV (docs/design.md#damaged-jpeg-headers). A cut at a segment boundary is
    one Pillow's Image.open alone accepts (it stops at the end of the file)."""
    path = tmp_path / "image.JPEG"
    for name, jpeg in jpeg_variants().items():
        assert problem_of(tmp_path, jpeg) is None, name
        for size in range(len(jpeg) - 1, 2, -1):
            os.truncate(path, size)  # cut shorter and shorter (writing each costs 100x)
            problem = damaged_image(path)
            if size < scan_data(jpeg):
                assert problem == (
                    f"has a cut-off JPEG header ({size} bytes, it ends before its first scan)"
                ), (name, size, problem)
            elif name != "exif-thumbnail":
                assert problem == (f"is cut off ({size} bytes, no JPEG end-of-image marker)"), (
                    name,
                    size,
                    problem,
                )


def test_a_jpeg_frame_of_no_pixels_or_none_is_refused(tmp_path):
    """A frame of zero height or width, or none before the scan (MindSpore: SIGSEGV)."""
    jpeg = encoded("JPEG")
    sof = jpeg.index(b"\xff\xc0")
    for height, width in ((0, 40), (40, 0), (0, 0)):
        frame = height.to_bytes(2, "big") + width.to_bytes(2, "big")
        assert problem_of(tmp_path, jpeg[: sof + 5] + frame + jpeg[sof + 9 :]) is not None
    no_frame = jpeg[:sof] + jpeg[sof + 2 + int.from_bytes(jpeg[sof + 2 : sof + 4], "big") :]
    assert problem_of(tmp_path, no_frame) is not None


def test_a_cut_off_or_unreadable_file_is_named(tmp_path):
    jpeg, png, bmp = encoded("JPEG"), encoded("PNG"), encoded("BMP")
    cases = {
        b"": "is empty (0 bytes)",
        b"not an image at all": "is not a JPEG, PNG or BMP image (19 bytes)",
        jpeg[: first_scan(jpeg) + 100]: f"is cut off ({first_scan(jpeg) + 100} bytes, no "
        "JPEG end-of-image marker)",
        png[: len(png) // 2]: f"is cut off ({len(png) // 2} bytes, no PNG IEND chunk)",
        png[:-4]: f"is cut off ({len(png) - 4} bytes, no PNG IEND chunk)",
        bmp[: len(bmp) - 10]: f"is cut off ({len(bmp) - 10} bytes; its header says {len(bmp)})",
    }
    for content, expected in cases.items():
        assert problem_of(tmp_path, content) == expected


def test_a_folder_names_its_first_damaged_file_and_counts_the_rest(tmp_path):
    folder = write_image_folder(tmp_path / "images")
    cat = folder / "train" / "cat" / "cat_train_0003.JPEG"
    dog = folder / "train" / "dog" / "dog_train_0001.JPEG"
    cat.write_bytes(cat.read_bytes()[:200])
    dog.write_bytes(b"")
    with pytest.raises(ConfigError) as refused:
        check_image_folder("dataset.train_dir", "train", folder / "train", IMAGE_EXTENSIONS)
    assert str(refused.value) == (
        f"dataset.train_dir='train': {cat} has a cut-off JPEG header (200 bytes, it ends "
        f"before its first scan); 1 more damaged file in {folder / 'train'}; expected class "
        "folders of whole JPEG, PNG or BMP images; remove or replace the file"
    )


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_a_truncated_jpeg_stops_the_job_before_training_naming_the_file(tmp_path):
    """The job of the report: a folder that trains, with one JPEG cut off inside its header.
    Before: SIGFPE (exit 136), nothing printed, run.json RUNNING."""
    data = write_image_folder(tmp_path / "images")
    bad = data / "train" / "cat" / "cat_train_0003.JPEG"
    bad.write_bytes(bad.read_bytes()[:200])
    work = tmp_path / "work"
    work.mkdir()
    # Refused before any work starts: ms_exp.run's main in this process.
    proc = main_in_process(
        "ms_exp.run",
        [
            f"hydra.run.dir={work / 'run'}",
            "trainer.progress_bar=never",
            "trainer.epochs=1",
            "dataset=imagenet",
            f"dataset.path={data}",
            *TINY_RESNET18,
        ],
        work,
    )
    assert proc.rc == 2, proc.rc  # was SIGFPE_EXIT
    expected = (
        f"dataset.train_dir='train': {bad} has a cut-off JPEG header (200 bytes, it "
        "ends before its first scan); expected class folders of whole JPEG, PNG or "
        "BMP images; remove or replace the file"
    )
    # Refused by the preflight in one line: no run directory, no MLflow store.
    assert proc.stderr.strip() == f"ms_exp: error: {expected}", proc.stderr[-3000:]
    assert not (work / "run").exists() and not (work / "mlflow.db").exists()


# --- Ranks trust the launching process's check of the same files ------------------------


@pytest.fixture
def fresh_process(monkeypatch):
    """Start each call as a new process would: nothing found whole, nothing trusted; counts
    the images read."""
    from ms_exp.data import headers

    read = []

    def counted(path):
        read.append(path)
        return damaged_image(path)

    def start():
        monkeypatch.setattr(headers, "_WHOLE_IMAGE_FOLDERS", {})
        monkeypatch.setattr(headers, "_CHECKED_BY_LAUNCHER", {})
        read.clear()
        return read

    monkeypatch.setattr(headers, "damaged_image", counted)
    return start


def test_a_rank_trusts_the_launching_process_check_of_the_same_files(tmp_path, fresh_process):
    from ms_exp.data.headers import (
        CHECKED_IMAGES,
        image_files,
        listing_digest,
        record_image_checks,
        trust_image_checks,
    )

    train = write_image_folder(tmp_path / "images") / "train"
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def rank():
        read = fresh_process()
        trust_image_checks(run_dir)
        return check_image_folder("dataset.train_dir", "train", train, IMAGE_EXTENSIONS), len(read)

    assert rank() == (24, 24)  # no record: every image read, as before
    read = fresh_process()  # the launching process: the preflight's check, then the record
    assert check_image_folder("dataset.train_dir", "train", train, IMAGE_EXTENSIONS) == 24
    assert len(read) == 24
    record_image_checks(run_dir)
    digest = listing_digest(list(image_files(train, IMAGE_EXTENSIONS)))
    assert json.loads((run_dir / CHECKED_IMAGES).read_text()) == {
        str(train.resolve()): {"images": 24, "sha256": digest}
    }
    assert rank() == (0, 0)  # the same files: none read again
    cat = train / "cat" / "cat_train_0003.JPEG"
    whole, checked = cat.read_bytes(), cat.stat()
    cat.write_bytes(whole[:200])  # changed since: checked again, and named
    with pytest.raises(ConfigError, match=f"{cat} has a cut-off JPEG header"):
        rank()
    cat.write_bytes(whole)  # the bytes and the time checked: trusted
    os.utime(cat, ns=(checked.st_atime_ns, checked.st_mtime_ns))
    assert rank() == (0, 0)
    os.utime(cat, ns=(checked.st_atime_ns, checked.st_mtime_ns + 10**9))  # another time
    assert rank() == (24, 24)
    (train / "cat" / "cat_train_0099.JPEG").write_bytes(whole)  # one more file
    assert rank() == (25, 25)
    (run_dir / CHECKED_IMAGES).write_text("{")  # a damaged record is not trusted
    assert rank() == (25, 25)


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_the_ranks_of_a_job_trust_the_launching_process_check(tmp_path, fresh_process, monkeypatch):
    """The launching process of a distributed job records what it checked before it starts
    the ranks; what each rank runs before MindSpore (ms_exp.worker's checks of the saved
    config) then reads no image, and refuses one changed since in one line."""
    from omegaconf import OmegaConf

    from ms_exp.config.errors import InvalidConfig
    from ms_exp.config.run_config import load_run_config
    from ms_exp.job import distributed
    from ms_exp.preflight.compose import compose_config, hydra_config_of
    from ms_exp.tracking.lifecycle import DisabledTracker
    from ms_exp.worker import read_checked_config

    data = write_image_folder(tmp_path / "images")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = compose_config(
        ["dataset=imagenet", f"dataset.path={data}", "parallel=data", *TINY_RESNET18],
        return_hydra_config=True,
    )
    with hydra_config_of(cfg, str(run_dir)):
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        OmegaConf.save(job, run_dir / "config.yaml", resolve=True)
    read = fresh_process()  # the launching process's checks, of the same config
    read_checked_config(run_dir)
    assert len(read) == 36  # train and val

    def ranks(parallel_cfg, run_dir, env, *hint):  # in place of msrun: what a rank runs first
        read = fresh_process()
        read_checked_config(run_dir)
        raise RuntimeError(f"a rank read {len(read)} images")

    monkeypatch.setattr(distributed, "launch", ranks)
    with pytest.raises(RuntimeError, match="^a rank read 0 images$"):
        distributed.train_with_ranks(
            load_run_config(run_dir / "config.yaml"), run_dir, DisabledTracker(), ""
        )
    dog = data / "val" / "dog" / "dog_val_0001.JPEG"
    dog.write_bytes(b"")
    fresh_process()
    with pytest.raises(InvalidConfig, match=f"{dog} is empty"):
        read_checked_config(run_dir)


# --- MNIST: the idx checks run again when the dataset is built ----------------------------


def test_a_truncated_mnist_file_is_named_when_the_dataset_is_built(tmp_path):
    """A rank or an evaluation builds the dataset without the config checks; MindSpore's
    reader would stop mid-pipeline naming no file."""
    from datafiles import write_mnist

    from ms_exp.data.mnist import mnist

    root = write_mnist(tmp_path / "mnist", train=96, test=32)
    images = root / "train-images-idx3-ubyte"
    os.truncate(images, images.stat().st_size - 5000)
    with pytest.raises(ConfigError) as refused:
        mnist("train", str(root))
    assert str(refused.value) == (
        f"dataset.path='{root}': not allowed; expected MNIST idx files as MnistDataset reads "
        "them (train-images-idx3-ubyte is 70280 bytes; its header says 75280 (truncated or "
        "not an idx file))"
    )


# --- Criteo: record files checked against the sizes and CRC32s the converter recorded -----


@pytest.fixture(scope="module")
def criteo_folder(tmp_path_factory) -> Path:
    from datafiles import write_criteo_text

    from ms_exp.data.criteo_convert import main as convert

    root = tmp_path_factory.mktemp("criteo")
    write_criteo_text(root / "raw.txt", 400)
    assert (
        convert([str(root / "raw.txt"), str(root / "converted"), "--samples-per-record", "10"]) == 0
    )
    return root / "converted"


def damaged_copy(source: Path, target: Path, how: str) -> Path:
    import shutil

    from ms_exp.data.criteo_format import TRAIN_FILE

    shutil.copytree(source, target)
    records = target / TRAIN_FILE
    if how == "truncated":
        os.truncate(records, records.stat().st_size // 2)
    else:  # bytes overwritten inside the first data page, after the 16 MiB header region
        with open(records, "r+b") as f:
            f.seek(16 * 1024 * 1024 + 1000)
            f.write(b"\xff" * 4000)
    return target


def test_the_converter_records_each_record_file(criteo_folder):
    from ms_exp.data.criteo_format import (
        EVAL_FILE,
        TRAIN_FILE,
        damaged_record_file,
        file_digest,
        read_meta,
    )

    meta = read_meta(criteo_folder)
    for name in (TRAIN_FILE, EVAL_FILE):
        assert meta["files"][name] == file_digest(criteo_folder / name)
        assert damaged_record_file(criteo_folder / name, meta) is None
    # Folders converted before the record: nothing to compare, not refused.
    assert damaged_record_file(criteo_folder / TRAIN_FILE, {"format": 2}) is None


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_damaged_record_file_is_named_when_the_dataset_is_built(criteo_folder, tmp_path, how):
    from ms_exp.data.criteo import criteo
    from ms_exp.data.criteo_format import read_meta

    folder = damaged_copy(criteo_folder, tmp_path / how, how)
    records = folder / "train.mindrecord"
    written = read_meta(folder)["files"]["train.mindrecord"]["bytes"]
    problem = (
        f"is {records.stat().st_size} bytes; the converter wrote {written} (truncated "
        "or changed since)"
        if how == "truncated"
        else "has changed since it was converted (its CRC32 differs from the one in "
        "criteo_meta.json: corrupt)"
    )
    with pytest.raises(ConfigError) as refused:
        criteo("train", str(folder), batch_size=10)
    assert str(refused.value) == (
        f"dataset.path='{folder}': {records} {problem}; expected a folder written by the "
        "Criteo converter, unchanged since; convert again with `python -m "
        "ms_exp.data.criteo_convert RAW OUT_DIR --overwrite`"
    )
    criteo("eval", str(folder), batch_size=10)  # the untouched split still builds


def test_overwritten_criteo_records_stop_the_job_before_training_naming_the_file(
    criteo_folder, tmp_path
):
    """Before: SIGSEGV (exit 139) once training read the page, nothing printed."""
    folder = damaged_copy(criteo_folder, tmp_path / "overwritten", "overwritten")
    work = tmp_path / "work"
    work.mkdir()
    proc = main_in_process(
        "ms_exp.run",
        [
            f"hydra.run.dir={work / 'run'}",
            "trainer.progress_bar=never",
            "trainer.epochs=1",
            "model=wide_deep",
            "dataset=criteo",
            f"dataset.path={folder}",
            "dataset.batch_size=10",
        ],
        work,
    )
    assert proc.rc == 2, proc.rc  # was 139 (SIGSEGV)
    (line,) = proc.stderr.strip().splitlines()
    assert (
        line.startswith("ms_exp: error: dataset.path=")
        and f"{folder / 'train.mindrecord'} has changed since it was converted" in line
    ), line
    assert not (work / "run").exists()
