"""What a run needs to be traced and re-run: code, environment, command, data.

Recorded on every MLflow run (tags, plus artifacts under ``provenance/``):

- ``ms_exp.git.project.*`` and ``ms_exp.git.workdir.*``: commit and dirty flag of the
  ms_exp checkout and of the working directory, with ``provenance/<which>.diff`` when dirty;
- ``ms_exp.python``, ``ms_exp.version.<package>``, ``provenance/requirements.txt``;
- ``ms_exp.command``: the exact command line;
- the dataset through MLflow's dataset API, its file list in ``provenance/dataset.json``.
"""

import hashlib
import json
import platform
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput
    from omegaconf import DictConfig


# The ms_exp checkout this code runs from (also when installed editable); None when it is
# installed from a wheel, whose site-packages may sit inside some other git tree.
_ROOT = Path(__file__).resolve().parents[2]
PROJECT_DIR = _ROOT if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "conf").is_dir() else None
KEY_PACKAGES = "mindspore hydra-core omegaconf numpy mlflow pandas scikit-learn ms_exp".split()
# Files whose first bytes are hashed into a dataset's fingerprint, and how many bytes.
SAMPLE_FILES = 16
SAMPLE_BYTES = 1 << 16


def git_state(path: Optional[Path]) -> Optional[Dict[str, str]]:
    """Commit, dirty flag and diff of the git tree holding ``path``; None outside git (and
    for no path: ``PROJECT_DIR`` of an installed ms_exp)."""
    if path is None:
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=True
        ).stdout

    try:
        top = git("rev-parse", "--show-toplevel").strip()
        commit = git("rev-parse", "HEAD").strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
        diff = git("diff", "HEAD") if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"top": top, "commit": commit, "dirty": str(dirty).lower(), "diff": diff}


def package_versions() -> Dict[str, str]:
    versions = {}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def requirements() -> str:
    # Each Distribution parses its METADATA file again for every field asked of it.
    fields = [d.metadata for d in metadata.distributions()]
    names = sorted({(m["Name"] or "?", m["Version"]) for m in fields}, key=lambda n: n[0].lower())
    return "".join(f"{name}=={version}\n" for name, version in names)


def command_line(argv: Optional[List[str]] = None) -> str:
    """The command as it can be typed again, every password in it replaced by ***: it is
    recorded in the run."""
    from ms_exp.tracking.store import without_passwords

    return without_passwords(
        shlex.join([sys.executable, "-m", "ms_exp.run", *(sys.argv[1:] if argv is None else argv)])
    )


def dataset_fingerprint(dataset_cfg: "DictConfig") -> Dict[str, Any]:
    """Location and content digest of the data a run reads: the files (paths and sizes) and
    a hash of their first bytes for file datasets; the arrays for digits; the generator's
    settings for synthetic data and for a user's option that reads no ``path``."""
    from omegaconf import OmegaConf

    from ms_exp.config.targets import component_name, target_path

    name = component_name(dataset_cfg)
    digest = hashlib.sha256()
    if name == "digits":
        from ms_exp.config.bundled_data import load_digits_arrays

        images, labels = load_digits_arrays()
        digest.update(images.tobytes())
        digest.update(labels.tobytes())
        source = f"scikit-learn {metadata.version('scikit-learn')} load_digits()"
        files: List[Dict[str, Any]] = []
    elif name == "synthetic":
        settings = {
            k: dataset_cfg[k]
            for k in ("num_samples", "num_eval_samples", "num_classes", "noise", "data_seed")
        }
        settings["image_shape"] = list(dataset_cfg.image_shape)
        digest.update(json.dumps(settings, sort_keys=True).encode())
        source, files = "generated in memory", []
    elif dataset_cfg.get("path") is None:
        # A user's option without a path: what it is called with is what can be traced.
        arguments = OmegaConf.to_container(dataset_cfg, resolve=True)
        digest.update(json.dumps(arguments, sort_keys=True, default=str).encode())
        source, files = f"{target_path(dataset_cfg)}(split=...)", []
    else:
        root = Path(dataset_cfg.path).expanduser().resolve()
        paths = sorted(p for p in root.rglob("*") if p.is_file())
        files = [{"path": str(p.relative_to(root)), "bytes": p.stat().st_size} for p in paths]
        digest.update(json.dumps(files).encode())
        for path in paths[:SAMPLE_FILES]:
            with open(path, "rb") as handle:
                digest.update(handle.read(SAMPLE_BYTES))
        source = str(root)
    return {
        "name": name,
        "source": source,
        "digest": digest.hexdigest()[:16],
        "files": len(files),
        "bytes": sum(int(f["bytes"]) for f in files),
        "file_list": files,
    }


def record(tracker: Any, dataset_cfg: Any, run_dir: Path, command: str) -> None:
    """Write everything above into ``run_dir/provenance`` and log it on the run (for a job,
    in its MLflow sidecar process). ``tracker``: a Tracker, JournalTracker or DisabledTracker
    (whose modules import this one); ``dataset_cfg`` may be plain JSON (the sidecar's)."""
    from omegaconf import OmegaConf

    dataset_cfg = OmegaConf.create(dataset_cfg)
    tags: Dict[str, str] = {"ms_exp.python": platform.python_version(), "ms_exp.command": command}
    folder = Path(run_dir) / "provenance"
    folder.mkdir(exist_ok=True)
    trees = {"project": PROJECT_DIR, "workdir": Path.cwd()}
    seen = set()
    for which, path in trees.items():
        state = git_state(path)
        if state is None or state["top"] in seen:
            continue
        seen.add(state["top"])
        tags[f"ms_exp.git.{which}.commit"] = state["commit"]
        tags[f"ms_exp.git.{which}.dirty"] = state["dirty"]
        if state["diff"]:
            (folder / f"{which}.diff").write_text(state["diff"])
    for name, version in package_versions().items():
        tags[f"ms_exp.version.{name}"] = version
    (folder / "requirements.txt").write_text(requirements())
    fingerprint = dataset_fingerprint(dataset_cfg)
    tags["ms_exp.dataset_fingerprint"] = fingerprint["digest"]
    (folder / "dataset.json").write_text(json.dumps(fingerprint, indent=2))
    if tracker.enabled:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        tracker.set_tags(tags)
        tracker.log_artifacts(folder, "provenance")
        profile = {k: fingerprint[k] for k in ("files", "bytes")}
        dataset = Dataset(
            name=fingerprint["name"],
            digest=fingerprint["digest"],
            source_type="local",
            source=json.dumps({"uri": fingerprint["source"]}),
            profile=json.dumps(profile),
        )
        log_dataset_input(
            tracker.client,
            tracker.run_id,
            DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")]),
        )


DUPLICATE = (
    "UNIQUE constraint failed",
    "duplicate key value violates unique constraint",
    "Duplicate entry",
)


def log_dataset_input(
    client: Any, run_id: Optional[str], dataset_input: "DatasetInput", attempts: int = 3
) -> None:
    """``client.log_inputs`` (an MlflowClient's, or the journal's) that survives jobs of a
    parallel sweep registering the same dataset at once: MLflow's SQL store checks for the
    dataset, then inserts it, so the slower job's insert fails on the UNIQUE constraint; by
    then the dataset exists, and trying again links the run to it."""
    from mlflow.exceptions import MlflowException

    for attempt in range(1, attempts + 1):
        try:
            client.log_inputs(run_id, datasets=[dataset_input])
            return
        except MlflowException as error:
            if not any(words in str(error) for words in DUPLICATE) or attempt == attempts:
                raise
            time.sleep(0.1 * attempt)
