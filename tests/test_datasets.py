"""The dataset group end to end: ``python -m ms_exp.run dataset=...`` on data written in the
real file formats (idx files, JPEG folders), checked by what a user sees: exit status,
console lines and the files a run leaves behind.

Each test runs the CLI in a subprocess with the test's tmp_path as working directory, so the
MLflow store (mlflow.db, mlartifacts/) lands there too.
"""
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import pytest
from datafiles import write_image_folder, write_mnist

LOSS_LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is [0-9.]+(?:e-?\d+)?$", re.M)
FINAL_ACCURACY = re.compile(r"final evaluation: .*?eval/accuracy ([0-9.]+)")
FAST = ["trainer.progress_bar=never"]
SUBPROCESS_TIMEOUT_S = 240


def run_cli(cwd: Path, *overrides: str, data_path: Union[str, Path, None] = None,
            epochs: Optional[int] = 1, env: Optional[Dict[str, str]] = None
            ) -> Tuple[int, str, str]:
    """``python -m ms_exp.run`` in ``cwd`` with its run dir at ``cwd/run``; DATA_PATH is set
    to ``data_path`` or removed; ``env`` adds variables. Returns (exit status, stdout,
    stderr)."""
    env = {**os.environ, **(env or {})}
    env.pop("DATA_PATH", None)
    if data_path is not None:
        env["DATA_PATH"] = str(data_path)
    args: List[str] = [f"hydra.run.dir={cwd / 'run'}", *FAST]
    if epochs is not None:
        args.append(f"trainer.epochs={epochs}")
    proc = subprocess.run([sys.executable, "-m", "ms_exp.run", *args, *overrides],
                          cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S)
    return proc.returncode, proc.stdout, proc.stderr


def assert_finished(result: Tuple[int, str, str]) -> str:
    rc, out, err = result
    assert rc == 0, f"exit status {rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert "final evaluation:" in out, out
    return out


def assert_refused(result: Tuple[int, str, str], cwd: Path) -> str:
    """Exit status 2, one ``ms_exp: error:`` line on stderr, no run dir. Returns the line."""
    rc, out, err = result
    assert rc == 2, f"exit status {rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ms_exp: error: "), err
    assert not (cwd / "run").exists()
    return lines[0]


def checkpoints(cwd: Path) -> List[str]:
    return sorted(p.name for p in (cwd / "run" / "checkpoints" / "rank_0").glob("*.ckpt"))


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


TINY_RESNET18 = ["model=resnet", "model.depth=18", "model.width=0.125",
                 "dataset.image_size=32", "dataset.batch_size=4"]


# --- mnist ------------------------------------------------------------------------------

@pytest.mark.e2e
def test_mnist_from_dataset_path_trains_and_checkpoints(tmp_path, data):
    # 96 samples are 3 steps of 32: print the loss every step to see the tutorial's line.
    out = assert_finished(run_cli(tmp_path, "dataset=mnist", f"dataset.path={data['mnist']}",
                                  "trainer.loss_print_interval=1"))
    assert "96 training and 32 held-out samples of shape (1, 28, 28), 10 classes" in out
    assert re.search(r"^epoch: 1 step: \d+, loss is [0-9.]+", out, re.M), out
    assert LOSS_LINE.findall(out) == [("1", "1"), ("1", "2"), ("1", "3")]
    ckpts = checkpoints(tmp_path)
    assert any(re.fullmatch(r"checkpoint-1_\d+\.ckpt", name) for name in ckpts), ckpts
    assert (tmp_path / "mlflow.db").is_file()


@pytest.mark.e2e
def test_mnist_from_data_path_env(tmp_path, data):
    out = assert_finished(run_cli(tmp_path, "dataset=mnist", data_path=data["mnist"]))
    assert "96 training and 32 held-out samples" in out
    assert "checkpoint-1_3.ckpt" in checkpoints(tmp_path)  # 96 / 32 steps, one epoch


@pytest.mark.e2e
def test_mnist_data_path_with_tilde_is_expanded(tmp_path, data):
    home = tmp_path / "home"
    home.mkdir()
    (home / "mnist").symlink_to(data["mnist"], target_is_directory=True)
    out = assert_finished(run_cli(tmp_path, "dataset=mnist", data_path="~/mnist",
                                  env={"HOME": str(home)}))
    assert "96 training and 32 held-out samples" in out


def test_mnist_folder_missing_an_idx_file_is_refused(tmp_path, data):
    line = assert_refused(run_cli(tmp_path, "dataset=mnist",
                                  f"dataset.path={data['mnist_missing']}"), tmp_path)
    assert line.startswith("ms_exp: error: dataset.path="), line
    assert "t10k-labels-idx1-ubyte" in line
    for present in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                    "t10k-images-idx3-ubyte"):
        assert present not in line


@pytest.mark.parametrize("split", ["train", "test"])
def test_mnist_file_with_no_samples_says_so(tmp_path, split):
    """Header and size agree on 0 images: refused for the file, not for dataset.batch_size
    (which the training split's 0 samples used to be blamed on)."""
    counts = {"train": 0, "test": 10} if split == "train" else {"train": 96, "test": 0}
    root = write_mnist(tmp_path / "mnist_empty", **counts)
    line = assert_refused(run_cli(tmp_path, "dataset=mnist", f"dataset.path={root}"),
                          tmp_path)
    images = "train-images-idx3-ubyte" if split == "train" else "t10k-images-idx3-ubyte"
    assert line == (f"ms_exp: error: dataset.path='{root}': not allowed; expected MNIST idx "
                    f"files as MnistDataset reads them ({images} holds no samples: its "
                    "header says 0 images)")


def test_mnist_without_path_or_data_path_is_refused(tmp_path):
    line = assert_refused(run_cli(tmp_path, "dataset=mnist"), tmp_path)
    assert line.startswith("ms_exp: error: dataset.path="), line
    assert "DATA_PATH" in line


# --- imagenet ---------------------------------------------------------------------------

@pytest.mark.e2e
def test_imagenet_folder_trains_with_one_class_per_folder(tmp_path, data):
    # The stray .DS_Store and README.txt are not counted, and do not stop training.
    out = assert_finished(run_cli(tmp_path, "dataset=imagenet",
                                  f"dataset.path={data['images']}", *TINY_RESNET18))
    assert "24 training and 12 held-out samples of shape (3, 32, 32), 3 classes" in out
    assert "checkpoint-1_6.ckpt" in checkpoints(tmp_path)  # 24 / 4 steps


def test_imagenet_without_val_folder_is_refused(tmp_path, data):
    line = assert_refused(run_cli(tmp_path, "dataset=imagenet", *TINY_RESNET18,
                                  data_path=data["images_no_val"]), tmp_path)
    assert "dataset.eval_dir" in line


def test_imagenet_with_empty_class_folders_is_refused(tmp_path, data):
    line = assert_refused(run_cli(tmp_path, "dataset=imagenet", *TINY_RESNET18,
                                  data_path=data["images_empty_val"]), tmp_path)
    assert "dataset.eval_dir='val': not allowed; expected class folders holding images" in line


def test_imagenet_num_classes_below_the_class_folders_is_refused(tmp_path, data):
    line = assert_refused(run_cli(tmp_path, "dataset=imagenet", *TINY_RESNET18,
                                  "dataset.num_classes=2", data_path=data["images"]), tmp_path)
    assert line.endswith("dataset.num_classes=2: not allowed; expected null or at least the 3 "
                         "class folders under train")


# --- synthetic --------------------------------------------------------------------------

@pytest.mark.e2e
def test_synthetic_any_shape_trains_resnet50(tmp_path):
    out = assert_finished(run_cli(
        tmp_path, "dataset=synthetic", "dataset.image_shape=[3,32,32]",
        "dataset.num_classes=4", "dataset.num_samples=128", "dataset.num_eval_samples=32",
        "model=resnet", "model.depth=50", "model.width=0.125"))
    assert "128 training and 32 held-out samples of shape (3, 32, 32), 4 classes" in out


@pytest.mark.e2e
def test_synthetic_is_learnable_by_the_mlp(tmp_path):
    out = assert_finished(run_cli(tmp_path, "dataset=synthetic", "model=mlp", epochs=2))
    assert final_accuracy(out) > 0.5


# --- the model-saving tutorial preset ---------------------------------------------------

@pytest.mark.e2e
def test_model_saving_experiment_on_mnist(tmp_path, data):
    out = assert_finished(run_cli(tmp_path, "+experiment=model_saving",
                                  data_path=data["mnist_1300"]))
    # 1300 samples, batch 32, drop_remainder false: 41 steps, the last one ragged.
    assert "1300 training and 64 held-out samples" in out
    assert "41 steps per epoch" in out
    assert [int(step) for _, step in LOSS_LINE.findall(out)] == [20, 40]
    assert checkpoints(tmp_path) == ["best.ckpt", "checkpoint-1_41.ckpt"]
    assert ("checkpoint=sliced in stand-alone mode: one rank holds every parameter, "
            "so its slice is the full set of weights") in out


# --- pynative mode ----------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("dataset", ["digits", "mnist", "imagenet", "synthetic"])
def test_pynative_mode(tmp_path, data, dataset):
    overrides = {
        "digits": [],
        "mnist": [f"dataset.path={data['mnist']}"],
        "imagenet": [f"dataset.path={data['images']}", *TINY_RESNET18],
        "synthetic": ["dataset.num_samples=128", "dataset.num_eval_samples=32"],
    }[dataset]
    out = assert_finished(run_cli(tmp_path, f"dataset={dataset}", "trainer.mode=pynative",
                                  *overrides))
    assert f"dataset={dataset}:" in out
    assert "mode: pynative" in (tmp_path / "run" / "config.yaml").read_text()
    assert any(re.fullmatch(r"checkpoint-1_\d+\.ckpt", n) for n in checkpoints(tmp_path))
