"""A run's best and last checkpoints as MLflow models, without pickle.

Each of ``best.ckpt`` (when kept) and the last checkpoint becomes ``<run dir>/models/best|last/``:
``checkpoint.ckpt``, or ``checkpoint.safetensors`` and its digest (hard links where possible),
the resolved ``config.yaml`` the network is built again from, ``model.mindir`` (runs without
ms_exp), and ``MLmodel``, written by the tracker (ms_exp/tracking/mlmodel.py): flavors
``mindspore`` and ``python_function`` (loader :func:`_load_pyfunc`), signature and input
example. The LoggedModel is the tracker's ``log_model``; registering one is
ms_exp/tracking/registry.py.
"""

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, cast

from omegaconf import DictConfig, OmegaConf

from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.mlmodel import flavor_of, save_example
from ms_exp.train.result import JobResult

MODELS_DIR = "models"
FLAVOR = "mindspore"
CHECKPOINT_FILE = "checkpoint.ckpt"  # checkpoint.safetensors for a safetensors run
CONFIG_FILE = "config.yaml"
MINDIR_STEM = "model"
MINDIR_FILE = f"{MINDIR_STEM}.mindir"
# Samples of the input example (and the batch size the MindIR export is traced with): enough
# to show the shape, small enough for MLflow's JSON example of a ResNet image batch.
EXAMPLE_ROWS = 2
# The LoggedModel's name within the experiment is the checkpoint it holds; MLflow refuses
# '.' in a LoggedModel name, which rules out run names such as ``lr=0.01``.
MODEL_TAG = "ms_exp.checkpoint"


@dataclass
class ModelPackage:
    """One model directory and what the tracker logs with it."""

    name: str  # best | last
    directory: Path
    params: Dict[str, str]  # the network's config and the input shape
    metrics: Dict[str, float]  # eval/<metric> the checkpoint scored
    epoch: Optional[int]  # the epoch those metrics were measured after; None: the last
    export_s: float
    mlmodel: Dict[str, object]  # the MLmodel file's flavors, written by the tracker


def log_run_models(
    cfg: DictConfig, run_dir: Path, result: JobResult, tracker: RunTracker, uri: str
) -> Dict[str, str]:
    """Package the run's best and last checkpoints, log them as the run's models and
    register the best (``tracking.register_model``, not for a sweep's job: its parent
    registers the sweep's best). Any failure is one warning. Returns the logged models'
    ids by name, as the store holds them (none while they are only in an offline journal)."""
    tracking = cfg.tracking
    if not (tracking.enabled and tracking.log_models and tracker.enabled):
        return {}
    try:
        from ms_exp.train.context import collector_skips_older_objects

        with collector_skips_older_objects():  # each MindIR export compiles the network
            packages = package_models(cfg, Path(run_dir), result)
        for package in packages:
            tracker.log_model(
                package.name,
                package.directory,
                package.params,
                package.metrics,
                package.epoch,
                {MODEL_TAG: package.name, "ms_exp.run_name": str(tracking.run_name or "")},
                package.mlmodel,
            )
    except Exception as error:  # noqa: BLE001 - never lose the run for its model
        _warn(f"no MLflow model logged for this run ({type(error).__name__}: {error})")
        return {}
    if packages:
        made = ", ".join(f"{p.name} ({p.export_s:.1f} s)" for p in packages)
        print(
            f"MLflow models of the run: {made} in {Path(run_dir).resolve() / MODELS_DIR}",
            flush=True,
        )
    if packages and tracking.register_model:
        from ms_exp.tracking.sweep import parent_run_id

        if parent_run_id(uri, tracking.experiment_name) is None:  # not a sweep's child
            _register(tracker, uri, tracking.register_model)
    if not packages:
        return {}
    # The ids, once everything logged is in the store; the tracker knows them, so the job
    # never opens the store itself (no ``import mlflow``).
    try:
        tracker.flush()
    except Exception as error:  # noqa: BLE001 - the models are logged; only the ids are unsaid
        _warn(f"the ids of the run's MLflow models are not known ({type(error).__name__}: {error})")
        return {}
    return {p.name: tracker.model_ids[p.name] for p in packages if p.name in tracker.model_ids}


def _register(tracker: RunTracker, uri: str, name: str) -> None:
    from ms_exp.tracking.registry import register_run_model

    try:
        tracker.flush()
        if tracker.offline_journal is not None or tracker.run_id is None:
            _warn(
                f"tracking.register_model={name}: not registered, the tracking server did "
                "not answer (the models are in the run's journal)"
            )
            return
        register_run_model(uri, tracker.run_id, name)
    except Exception as error:  # noqa: BLE001 - the run itself is recorded
        _warn(f"tracking.register_model={name}: not registered ({type(error).__name__}: {error})")


def _warn(text: str) -> None:
    print(f"ms_exp: warning: {text}", file=sys.stderr, flush=True)


def package_models(cfg: DictConfig, run_dir: Path, result: JobResult) -> List[ModelPackage]:
    """The model directories of the run's best and last checkpoints (those it has)."""
    from ms_exp.checkpoint.callbacks import BEST_RECORD
    from ms_exp.checkpoint.transform import saves_shares
    from ms_exp.parallel.launcher_config import is_distributed

    wanted: List[Tuple[str, Path, Dict[str, float], Optional[int]]] = []
    best = result.best_checkpoint
    if best is not None and Path(best).is_file():
        record_file = Path(best).with_name(BEST_RECORD)
        record = json.loads(record_file.read_text()) if record_file.is_file() else {}
        metrics = record.get("results") or (
            {f"eval/{result.best_metric}": result.best_value}
            if result.best_value is not None
            else {}
        )
        wanted.append(("best", Path(best), metrics, record.get("epoch")))
    last = result.last_checkpoint
    sliced = is_distributed(cfg.parallel) and not cfg.checkpoint.integrated_save
    part = "slice" if sliced else "share" if saves_shares(cfg) else None
    if last is not None and Path(last).is_file():
        if part is not None:
            print(
                f"no MLflow model of the last checkpoint: {last} is one rank's {part} "
                f"(merge the {part}s with ms_exp.ckpt merge, then evaluate with "
                "ms_exp.eval --checkpoint)",
                flush=True,
            )
        else:
            wanted.append(("last", Path(last), dict(result.final_eval or {}), None))
    if not wanted:
        return []
    builder = NetworkBuilder(cfg)
    return [
        builder.package(name, checkpoint, Path(run_dir) / MODELS_DIR / name, metrics, epoch)
        for name, checkpoint, metrics, epoch in wanted
    ]


class NetworkBuilder:
    """Builds the run's network (once) and writes a model directory per checkpoint."""

    def __init__(self, cfg: DictConfig):
        from ms_exp.config.schema import StandAloneParallel
        from ms_exp.data import create_datasets
        from ms_exp.models import create_network
        from ms_exp.placement.tables import create_placement
        from ms_exp.train.context import init_env

        self.cfg = cfg
        # One process, whatever the run trained with: an integrated checkpoint and best.ckpt
        # hold the whole network.
        init_env(cfg.trainer, OmegaConf.structured(StandAloneParallel), cfg.checkpoint.strategy)
        _, eval_set, self.spec = create_datasets(cfg.dataset)
        self.network = create_network(cfg.model, self.spec, create_placement(cfg.placement))
        self.network.set_train(False)
        # The network's inputs (every column but the label) of the first eval batch's first
        # EXAMPLE_ROWS samples.
        batch = next(eval_set.create_tuple_iterator(num_epochs=1, output_numpy=True))
        self.inputs = [column[:EXAMPLE_ROWS].copy() for column in batch[:-1]]

    def package(
        self,
        name: str,
        checkpoint: Path,
        directory: Path,
        metrics: Dict[str, float],
        epoch: Optional[int],
    ) -> ModelPackage:
        import mindspore as ms

        from ms_exp.checkpoint.files import digest_file, link_or_copy, load_verified
        from ms_exp.tracking.params import flatten, param_value

        started = time.perf_counter()
        not_loaded, _ = ms.load_param_into_net(self.network, load_verified(checkpoint))
        if not_loaded:
            raise ValueError(f"{checkpoint} lacks {', '.join(not_loaded)}")
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        held = directory / Path(CHECKPOINT_FILE).with_suffix(checkpoint.suffix).name
        link_or_copy(checkpoint, held)
        if digest_file(checkpoint).is_file():  # a safetensors file's, checked when read
            link_or_copy(digest_file(checkpoint), digest_file(held))
        OmegaConf.save(self.cfg, directory / CONFIG_FILE, resolve=True)
        tensors = [ms.Tensor(array) for array in self.inputs]
        ms.export(
            self.network, *tensors, file_name=str(directory / MINDIR_STEM), file_format="MINDIR"
        )
        save_example(directory, self.inputs, _as_numpy(self.network(*tensors)))
        # The LoggedModel's params: the ``model`` section flattened, and the input shape.
        section = cast(dict, OmegaConf.to_container(self.cfg.model, resolve=True, enum_to_str=True))
        params = {f"model.{key}": param_value(value) for key, value in flatten(section).items()}
        params["input_shape"] = str(list(self.spec.image_shape))
        # The MLmodel file (ms_exp/tracking/mlmodel.py): flavor ``mindspore`` with this
        # directory's files and MindSpore's version, this module the python_function loader.
        fields = {
            "checkpoint": held.name,
            "config": CONFIG_FILE,
            "mindir": MINDIR_FILE,
            "mindspore_version": ms.__version__,
            "inputs": len(self.inputs),
        }
        return ModelPackage(
            name,
            directory,
            params,
            {k: float(v) for k, v in metrics.items()},
            epoch,
            time.perf_counter() - started,
            {"flavor": FLAVOR, "fields": fields, "loader_module": __name__},
        )


def _as_numpy(output: Any) -> Any:
    if isinstance(output, (tuple, list)):
        output = output[0]
    return output.asnumpy()


# -- reading a model back ---------------------------------------------------------------


def model_files(directory: Path) -> Tuple[Path, Path]:
    """(config.yaml, checkpoint) of the model in ``directory``. Its MLmodel file names them,
    and whoever could write the store wrote it: a path out of the model's folder (absolute,
    or climbing with ``..``) would read the reader's own files, and is refused."""
    flavor = flavor_of(directory, FLAVOR)
    inside = Path(directory).resolve()
    files = []
    for key in ("config", "checkpoint"):
        path = (inside / str(flavor[key])).resolve()
        if inside not in path.parents:
            raise ValueError(
                f"{directory}: its MLmodel names {key} {flavor[key]!r}, outside "
                "the model's folder; expected a file of the model"
            )
        files.append(path)
    return files[0], files[1]


class _PyfuncModel:
    """What ``mlflow.pyfunc.load_model`` wraps: the network rebuilt from config + checkpoint."""

    def __init__(self, directory: Path):
        import mindspore as ms

        from ms_exp.checkpoint.files import load_verified
        from ms_exp.config.run_config import load_run_config
        from ms_exp.data import create_datasets
        from ms_exp.models import create_network
        from ms_exp.placement.tables import create_placement
        from ms_exp.preflight.trust import check_read_back

        config, checkpoint = model_files(directory)
        # A model is read back from a store: its config resolves nothing and builds only
        # trusted targets.
        source = f"the MLflow model in {directory}"
        cfg = load_run_config(config, [], source)
        check_read_back(cfg, source)
        ms.set_context(mode=ms.PYNATIVE_MODE)
        self.inputs = int(flavor_of(directory, FLAVOR).get("inputs", 1))
        _, _, spec = create_datasets(cfg.dataset)  # what the network was sized by
        self.network = create_network(cfg.model, spec, create_placement(cfg.placement))
        ms.load_param_into_net(self.network, load_verified(checkpoint))
        self.network.set_train(False)

    def predict(self, model_input: Any, params: Any = None) -> Any:
        import mindspore as ms
        import numpy as np

        arrays = (
            [model_input[f"input_{i}"] for i in range(self.inputs)]
            if isinstance(model_input, dict)
            else [model_input]
        )
        return _as_numpy(self.network(*[ms.Tensor(np.asarray(a)) for a in arrays]))


def _load_pyfunc(path: str) -> _PyfuncModel:
    """MLflow's python_function loader (``mlflow.pyfunc.load_model``)."""
    return _PyfuncModel(Path(path))
