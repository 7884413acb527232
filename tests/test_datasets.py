"""The dataset group end to end: ``python -m ms_exp.run dataset=...`` on data written in the
real file formats (idx files, JPEG folders), checked by what a user sees: exit status,
console lines and the files a run leaves behind.

The jobs that train run in one sweep (one process, one job per experiment file) with a
working directory of their own, so the MLflow store (mlflow.db, mlartifacts/) lands there
too; the refusals, which come before any work starts, run in this process.
"""

import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import pytest
from conftest import main_in_process
from datafiles import write_image_folder, write_mnist
from training_jobs import Job, experiment_sweep

LOSS_LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is [0-9.]+(?:e-?\d+)?$", re.M)
FINAL_ACCURACY = re.compile(r"final evaluation: .*?eval/accuracy ([0-9.]+)")
FAST = ["trainer.progress_bar=never"]


def run_cli(
    cwd: Path,
    *overrides: str,
    data_path: Union[str, Path, None] = None,
    epochs: Optional[int] = 1,
    env: Optional[Dict[str, Optional[str]]] = None,
) -> Tuple[int, str, str]:
    """``python -m ms_exp.run`` in ``cwd`` with its run dir at ``cwd/run``; DATA_PATH is set
    to ``data_path`` or removed; ``env`` adds variables. In this process: what is run here
    is refused before any work starts. Returns (exit status, stdout, stderr)."""
    env = {**(env or {}), "DATA_PATH": None if data_path is None else str(data_path)}
    args: List[str] = [f"hydra.run.dir={cwd / 'run'}", *FAST]
    if epochs is not None:
        args.append(f"trainer.epochs={epochs}")
    result = main_in_process("ms_exp.run", [*args, *overrides], cwd, env)
    return result.rc, result.stdout, result.stderr


def assert_finished(job: Job) -> str:
    assert job.run.info.status == "FINISHED", job.console[-3000:]
    assert "final evaluation:" in job.console, job.console
    return job.console


def assert_refused(result: Tuple[int, str, str], cwd: Path) -> str:
    """Exit status 2, one ``ms_exp: error:`` line on stderr, no run dir. Returns the line."""
    rc, out, err = result
    assert rc == 2, f"exit status {rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ms_exp: error: "), err
    assert not (cwd / "run").exists()
    return lines[0]


def checkpoints(job: Job) -> List[str]:
    return sorted(p.name for p in (job.run_dir / "checkpoints" / "rank_0").glob("*.ckpt"))


def final_accuracy(out: str) -> float:
    match = FINAL_ACCURACY.search(out)
    assert match, out
    return float(match.group(1))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("data")
    mnist_missing = write_mnist(root / "mnist_missing", train=20, test=10)
    (mnist_missing / "t10k-labels-idx1-ubyte").unlink()
    images = write_image_folder(root / "images")
    # What real folders hold besides images; the reader must skip them.
    (images / "train" / "cat" / ".DS_Store").write_bytes(b"\0\1 not an image")
    (images / "val" / "dog" / "README.txt").write_text("not an image\n")
    images_no_val = write_image_folder(root / "images_no_val", per_class_val=0)
    for folder in sorted((images_no_val / "val").iterdir()):
        folder.rmdir()
    (images_no_val / "val").rmdir()
    images_empty_val = write_image_folder(root / "images_empty_val", per_class_val=0)
    return {
        "mnist": write_mnist(root / "mnist", train=96, test=32),
        # 41 batches of 32 with the model-saving preset (drop_remainder: false).
        "mnist_1300": write_mnist(root / "mnist_1300", train=1300, test=64, seed=1),
        "mnist_missing": mnist_missing,
        "images": images,
        "images_no_val": images_no_val,
        "images_empty_val": images_empty_val,
    }


TINY_RESNET18 = [
    "model=resnet",
    "model.depth=18",
    "model.width=0.125",
    "dataset.image_size=32",
    "dataset.batch_size=4",
]
TINY_RESNET18_YAML = (
    "model: {depth: 18, width: 0.125}\ndataset: {image_size: 32, batch_size: 4, path: %s}\n"
)


def experiment(dataset: str, model: Optional[str] = None, body: str = "") -> str:
    """An experiment file's text: the dataset (and model) option, then ``body``."""
    choices = [f"  - override /dataset: {dataset}"]
    if model:
        choices.append(f"  - override /model: {model}")
    return "defaults:\n" + "\n".join(choices) + "\n" + body


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, data) -> Dict[str, Job]:
    """Every training job of this file, one sweep in one process (tests/training_jobs.py),
    one epoch each. The process's DATA_PATH, ``~/mnist_1300`` with HOME a folder of the
    test's own, is read (and expanded) by the one job that sets no dataset.path: the
    model-saving preset's."""
    root = tmp_path_factory.mktemp("datasets")
    home = root / "home"
    home.mkdir()
    (home / "mnist_1300").symlink_to(data["mnist_1300"], target_is_directory=True)
    experiments = {
        # 96 samples are 3 steps of 32: print the loss every step to see the tutorial's line.
        "mnist": experiment(
            "mnist",
            body=f"dataset: {{path: {data['mnist']}}}\n"
            "trainer: {loss_print_interval: 1, "
            "mode: pynative}\n",
        ),
        "imagenet": experiment("imagenet", "resnet", TINY_RESNET18_YAML % data["images"]),
        "imagenet_pynative": experiment(
            "imagenet",
            "resnet",
            TINY_RESNET18_YAML % data["images"] + "trainer: {mode: pynative}\n",
        ),
        "synthetic_resnet50": experiment(
            "synthetic",
            "resnet",
            "dataset: {image_shape: [3, 32, 32], num_classes: 4, num_samples: 128, "
            "num_eval_samples: 32}\nmodel: {depth: 50, width: 0.125}\n",
        ),
        "synthetic_mlp": experiment("synthetic", "mlp"),
        "synthetic_pynative": experiment(
            "synthetic",
            body="dataset: {num_samples: 128, num_eval_samples: 32}\ntrainer: {mode: pynative}\n",
        ),
    }
    sweep = experiment_sweep(
        root,
        experiments,
        *FAST,
        "tracking.log_models=false",
        "trainer.epochs=1",
        presets=["model_saving"],
        env={"DATA_PATH": "~/mnist_1300", "HOME": str(home)},
    )
    return sweep.jobs


# --- mnist ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_mnist_from_dataset_path_trains_and_checkpoints(jobs):
    job = jobs["mnist"]
    out = assert_finished(job)
    assert "96 training and 32 held-out samples of shape (1, 28, 28), 10 classes" in out
    assert re.search(r"^epoch: 1 step: \d+, loss is [0-9.]+", out, re.M), out
    assert LOSS_LINE.findall(out) == [("1", "1"), ("1", "2"), ("1", "3")]
    ckpts = checkpoints(job)
    assert any(re.fullmatch(r"checkpoint-1_\d+\.ckpt", name) for name in ckpts), ckpts
    assert "checkpoint-1_3.ckpt" in ckpts  # 96 / 32 steps, one epoch
    # The MLflow store and its artifacts are in the working directory.
    workdir = job.run_dir.parents[3]
    assert (workdir / "mlflow.db").is_file()
    assert job.run.info.artifact_uri.startswith(f"file://{workdir}/mlartifacts/"), (
        job.run.info.artifact_uri
    )


@pytest.mark.e2e
def test_mnist_data_path_with_tilde_is_expanded(jobs, data):
    """The preset sets no dataset.path: the job reads DATA_PATH=~/mnist_1300."""
    job = jobs["model_saving"]
    out = assert_finished(job)
    assert "1300 training and 64 held-out samples" in out
    assert "checkpoint-1_41.ckpt" in checkpoints(job)  # 1300 / 32 steps, one epoch


def test_mnist_folder_missing_an_idx_file_is_refused(tmp_path, data):
    line = assert_refused(
        run_cli(tmp_path, "dataset=mnist", f"dataset.path={data['mnist_missing']}"), tmp_path
    )
    assert line.startswith("ms_exp: error: dataset.path="), line
    assert "t10k-labels-idx1-ubyte" in line
    for present in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"):
        assert present not in line


@pytest.mark.parametrize("split", ["train", "test"])
def test_mnist_file_with_no_samples_says_so(tmp_path, split):
    """Header and size agree on 0 images: refused for the file, not for dataset.batch_size
    (which the training split's 0 samples used to be blamed on)."""
    counts = {"train": 0, "test": 10} if split == "train" else {"train": 96, "test": 0}
    root = write_mnist(tmp_path / "mnist_empty", **counts)
    line = assert_refused(run_cli(tmp_path, "dataset=mnist", f"dataset.path={root}"), tmp_path)
    images = "train-images-idx3-ubyte" if split == "train" else "t10k-images-idx3-ubyte"
    assert line == (
        f"ms_exp: error: dataset.path='{root}': not allowed; expected MNIST idx "
        f"files as MnistDataset reads them ({images} holds no samples: its "
        "header says 0 images)"
    )


def test_mnist_without_path_or_data_path_is_refused(tmp_path):
    line = assert_refused(run_cli(tmp_path, "dataset=mnist"), tmp_path)
    assert line.startswith("ms_exp: error: dataset.path="), line
    assert "DATA_PATH" in line


# --- imagenet ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_imagenet_folder_trains_with_one_class_per_folder(jobs):
    # The stray .DS_Store and README.txt are not counted, and do not stop training.
    job = jobs["imagenet"]
    out = assert_finished(job)
    assert "24 training and 12 held-out samples of shape (3, 32, 32), 3 classes" in out
    assert "checkpoint-1_6.ckpt" in checkpoints(job)  # 24 / 4 steps
    assert job.run.data.params["model.depth"] == "18"


def test_imagenet_without_val_folder_is_refused(tmp_path, data):
    line = assert_refused(
        run_cli(tmp_path, "dataset=imagenet", *TINY_RESNET18, data_path=data["images_no_val"]),
        tmp_path,
    )
    assert "dataset.eval_dir" in line


def test_imagenet_with_empty_class_folders_is_refused(tmp_path, data):
    line = assert_refused(
        run_cli(tmp_path, "dataset=imagenet", *TINY_RESNET18, data_path=data["images_empty_val"]),
        tmp_path,
    )
    assert "dataset.eval_dir='val': not allowed; expected class folders holding images" in line


def test_imagenet_num_classes_below_the_class_folders_is_refused(tmp_path, data):
    line = assert_refused(
        run_cli(
            tmp_path,
            "dataset=imagenet",
            *TINY_RESNET18,
            "dataset.num_classes=2",
            data_path=data["images"],
        ),
        tmp_path,
    )
    assert line.endswith(
        "dataset.num_classes=2: not allowed; expected null or at least the 3 "
        "class folders under train"
    )


# --- synthetic --------------------------------------------------------------------------


@pytest.mark.e2e
def test_synthetic_any_shape_trains_resnet50(jobs):
    out = assert_finished(jobs["synthetic_resnet50"])
    assert "128 training and 32 held-out samples of shape (3, 32, 32), 4 classes" in out
    assert jobs["synthetic_resnet50"].run.data.params["model.depth"] == "50"


@pytest.mark.e2e
def test_synthetic_is_learnable_by_the_mlp(jobs):
    out = assert_finished(jobs["synthetic_mlp"])
    assert final_accuracy(out) > 0.5


# --- the model-saving tutorial preset ---------------------------------------------------


@pytest.mark.e2e
def test_model_saving_experiment_on_mnist(jobs):
    job = jobs["model_saving"]
    out = assert_finished(job)
    # 1300 samples, batch 32, drop_remainder false: 41 steps, the last one ragged.
    assert "1300 training and 64 held-out samples" in out
    assert "41 steps per epoch" in out
    assert [int(step) for _, step in LOSS_LINE.findall(out)] == [20, 40]
    assert checkpoints(job) == ["best.ckpt", "checkpoint-1_41.ckpt"]
    assert (
        "checkpoint=sliced in stand-alone mode: one rank holds every parameter, "
        "so its slice is the full set of weights"
    ) in out


# --- pynative mode ----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    "dataset,name",
    [("mnist", "mnist"), ("imagenet", "imagenet_pynative"), ("synthetic", "synthetic_pynative")],
)
def test_pynative_mode(jobs, dataset, name):
    """digits: tests/test_training.py::test_both_context_modes_train[pynative]."""
    job = jobs[name]
    out = assert_finished(job)
    assert f"dataset={dataset}:" in out
    assert "mode: pynative" in (job.run_dir / "config.yaml").read_text()
    assert job.run.data.tags["ms_exp.mode"] == "pynative"
    assert any(re.fullmatch(r"checkpoint-1_\d+\.ckpt", n) for n in checkpoints(job))


# --- digits, read and split without importing scikit-learn --------------------------------


def test_digits_are_load_digits_and_split_as_train_test_split_splits():
    """The images, labels and split a run reads are scikit-learn's, so that runs recorded
    while ms_exp called ``load_digits`` and ``train_test_split`` train on the same samples,
    and their dataset fingerprint is unchanged."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from ms_exp.config.bundled_data import load_digits_arrays
    from ms_exp.data.digits import stratified_split

    bunch = load_digits()
    images, labels = load_digits_arrays()
    assert images.dtype == bunch.images.dtype and images.tobytes() == bunch.images.tobytes()
    assert labels.dtype == bunch.target.dtype and labels.tobytes() == bunch.target.tobytes()
    every = np.arange(len(labels))
    for fraction, seed in [(0.2, 0), (0.2, 7), (0.1, 1), (0.33, 2), (0.9, 3), (0.013, 4)]:
        expected = train_test_split(every, test_size=fraction, random_state=seed, stratify=labels)
        split = stratified_split(labels, fraction, seed)
        assert all(np.array_equal(e, s) for e, s in zip(expected, split)), (fraction, seed)
    with pytest.raises(ValueError, match="eval_fraction=0.001 leaves 1795 training and 2"):
        stratified_split(labels, 0.001, 0)
