"""A config's ``_target_`` is code (docs/guides/security.md).

- On the command line, a target is refused before it is called when it cannot give what its
  key builds: numpy.load as a callback never unpickles, builtins.open never truncates.
- A config read back from a store or a run directory (``ms_exp.eval --run-id``, ``--model``,
  ``--checkpoint`` of a run directory, ``ms_exp.run --from-run``, a logged model loaded by
  ``mlflow.pyfunc.load_model``) builds only trusted targets: a target planted in it is refused
  in one line naming it, and never runs; the user trusts more with ``--config-dir`` or
  ``MS_EXP_TRUSTED_TARGETS``.

Every store and run here is fabricated (no training): the refusals come before any network
is built.
"""
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import main_in_process
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ms_exp.config.errors import InvalidConfig
from ms_exp.preflight.compose import compose_config, hydra_config_of
from ms_exp.tracking.store import ensure_experiment

pytestmark = pytest.mark.unit

PLANTED = "planted_code.make"
MARKER = "PLANTED_CODE_RAN"


def plant_module(folder: Path) -> Path:
    """``planted_code.make``: a network factory that leaves ``MARKER`` where it runs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "planted_code.py").write_text(
        "from pathlib import Path\n\n\n"
        "def make(**kwargs):\n"
        f"    Path({MARKER!r}).write_text('ran')\n"
        "    raise SystemExit('planted code ran')\n")
    return folder


def one_line(result, prog: str) -> str:
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), result.stderr[-3000:]
    return lines[0][len(f"{prog}: error: "):]


def refusal(key: str, target: str, source: str) -> str:
    return (f"{key}={target!r}: is not trusted in a config read back from {source}; expected "
            "a target of ms_exp's own options, of a config folder you name (--config-dir), of "
            "your own overrides, or one MS_EXP_TRUSTED_TARGETS allows (fnmatch patterns, "
            "comma-separated, e.g. MS_EXP_TRUSTED_TARGETS='my_project.*'); "
            "docs/guides/security.md")


def planted_config(path: Path) -> Path:
    """A run's saved config.yaml (composed and resolved as a job saves it) whose network
    someone with write access to the store replaced by ``PLANTED``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = compose_config(["trainer.epochs=1"], return_hydra_config=True)
    with hydra_config_of(cfg, str(path.parent)):
        job = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg
                                                                 if k != "hydra"]),
                                     resolve=True, enum_to_str=True)
    job["model"]["_target_"] = PLANTED
    path.write_text(yaml.safe_dump(job))
    return path


# ---------------------------------------------------------------------------------------------
# The command line: the kind of a target is checked before it is called

def test_numpy_load_as_a_callback_never_unpickles(tmp_path):
    marker = tmp_path / "UNPICKLED"

    class Detonator:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(Detonator()))
    before = sorted(p.name for p in tmp_path.iterdir())
    result = main_in_process("ms_exp.run", [
        "+trainer.callbacks.x._target_=numpy.load", "+trainer.callbacks.x.file=evil.pkl",
        "+trainer.callbacks.x.allow_pickle=true"], tmp_path)
    assert one_line(result, "ms_exp") == (
        "trainer.callbacks.x._target_='numpy.load': is a function that does not declare what "
        "it returns; expected a mindspore.train.Callback (a class, or a function declared "
        "`-> Callback`)")
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("key", ["+trainer.callbacks.x", "model", "+trainer.metrics.x"])
def test_builtins_open_never_truncates_a_file(tmp_path, key):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    section = key.lstrip("+")
    plus = "+" if key.startswith("+") else ""
    arguments = [f"{key}._target_=builtins.open", f"+{section}.file={victim}",
                 f"+{section}.mode=w"]
    result = main_in_process("ms_exp.run", arguments, tmp_path)
    line = one_line(result, "ms_exp")
    assert line.startswith(f"{section}._target_='builtins.open': is part of Python's standard "
                           "library, not a component; expected "), (plus, line)
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_a_standard_library_target_nested_in_arguments_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    result = main_in_process("ms_exp.run", [
        "+trainer.callbacks.x._target_=mindspore.train.LossMonitor",
        "+trainer.callbacks.x.per_print_times._target_=builtins.open",
        f"+trainer.callbacks.x.per_print_times.file={victim}",
        "+trainer.callbacks.x.per_print_times.mode=w"], tmp_path)
    assert one_line(result, "ms_exp").startswith(
        "trainer.callbacks.x.per_print_times._target_='builtins.open': is part of Python's "
        "standard library, not a component")
    assert victim.read_text() == "precious"


def test_a_function_declared_to_return_a_callback_is_built(tmp_path, monkeypatch):
    (tmp_path / "declared_factories.py").write_text(
        "from mindspore.train import Callback, LossMonitor\n\n\n"
        "def monitor() -> Callback:\n    return LossMonitor(1)\n\n\n"
        "def number() -> int:\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from ms_exp.preflight.components import validate_callbacks

    trainer = OmegaConf.create({"callbacks": {"x": {"_target_": "declared_factories.monitor"}}})
    validate_callbacks(trainer)
    trainer.callbacks.x._target_ = "declared_factories.number"
    with pytest.raises(InvalidConfig, match="is declared to return int"):
        validate_callbacks(trainer)


# ---------------------------------------------------------------------------------------------
# Configs read back from a store or a run directory

@pytest.fixture(scope="module")
def store_with_a_plant(tmp_path_factory):
    """A store whose job run's config/config.yaml artifact names ``PLANTED``, and the same
    run's recorded overrides for ``--from-run``."""
    files = tmp_path_factory.mktemp("planted_store")
    uri = f"sqlite:///{files / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(ensure_experiment(client, "ms_exp"), run_name="job")
    run_id = run.info.run_id
    client.log_artifact(run_id, str(planted_config(files / "config" / "config.yaml")), "config")
    checkpoint = files / "ckpt" / "checkpoint-1_1.ckpt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"not read: the config is refused first")
    client.log_artifact(run_id, str(checkpoint), "checkpoints/rank_0")
    client.set_tag(run_id, "ms_exp.checkpoint.last", "checkpoints/rank_0/checkpoint-1_1.ckpt")
    hydra = files / "hydra"
    hydra.mkdir()
    (hydra / "overrides.yaml").write_text(yaml.safe_dump(
        ["trainer.epochs=1", f"model._target_={PLANTED}"]))
    (hydra / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {
        "runtime": {"config_sources": []}, "job": {"config_name": "config"},
        "overrides": {"hydra": []}}}))
    client.log_artifacts(run_id, str(hydra), "hydra")
    client.set_terminated(run_id)
    return SimpleNamespace(uri=uri, run_id=run_id)


@pytest.fixture
def planted_store(store_with_a_plant, tmp_path):
    """The store, and a working folder of its own holding ``planted_code.py``."""
    cwd = plant_module(tmp_path / "cwd")
    return SimpleNamespace(**vars(store_with_a_plant), cwd=cwd, before=sorted(cwd.iterdir()))


def test_eval_refuses_a_target_planted_in_a_runs_config_artifact(planted_store):
    store = planted_store
    result = main_in_process("ms_exp.eval", ["--run-id", store.run_id, "--tracking-uri",
                                             store.uri], store.cwd)
    assert one_line(result, "ms_exp.eval") == refusal("model._target_", PLANTED,
                                                      f"MLflow run {store.run_id}")
    assert not (store.cwd / MARKER).exists()
    assert sorted(store.cwd.iterdir()) == store.before


@pytest.mark.parametrize("trust", ["variable", "config-dir", "override"])
def test_the_user_trusts_a_target_by_variable_config_dir_or_override(planted_store, trust,
                                                                     monkeypatch):
    store = planted_store
    monkeypatch.syspath_prepend(str(store.cwd))
    args, env = ["--run-id", store.run_id, "--tracking-uri", store.uri], {}
    if trust == "variable":
        env = {"MS_EXP_TRUSTED_TARGETS": "other.*, planted_code.*"}
    elif trust == "config-dir":
        conf = store.cwd / "conf" / "model"
        conf.mkdir(parents=True)
        (conf / "mine.yaml").write_text(f"_target_: {PLANTED}\n")
        args += ["--config-dir", str(store.cwd / "conf")]
    else:
        args += [f"model._target_={PLANTED}"]
    result = main_in_process("ms_exp.eval", args, store.cwd, env)
    # Trusted, it is built: the planted code ran (and stopped the evaluation).
    assert (store.cwd / MARKER).exists(), result.stderr[-2000:]
    assert "is not trusted" not in result.stderr


def test_from_run_refuses_a_target_planted_in_the_recorded_overrides(planted_store):
    store = planted_store
    result = main_in_process("ms_exp.run", ["--from-run", store.run_id,
                                            f"tracking.uri={store.uri}"], store.cwd)
    assert one_line(result, "ms_exp") == refusal(
        "model._target_", PLANTED, f"MLflow run {store.run_id} (--from-run)")
    assert not (store.cwd / MARKER).exists()
    assert sorted(store.cwd.iterdir()) == store.before


def test_eval_of_a_checkpoint_refuses_a_target_planted_in_its_run_directory(tmp_path):
    cwd = plant_module(tmp_path)
    run_dir = tmp_path / "shared" / "run"
    planted_config(run_dir / "config.yaml")
    checkpoint = run_dir / "checkpoints" / "rank_0" / "checkpoint-1_1.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"not read")
    result = main_in_process("ms_exp.eval", ["--checkpoint", str(checkpoint)], cwd)
    assert one_line(result, "ms_exp.eval") == refusal(
        "model._target_", PLANTED, f"the run directory of {checkpoint}")
    assert not (cwd / MARKER).exists()


def test_a_logged_model_with_a_planted_config_is_not_built_by_pyfunc(tmp_path, monkeypatch):
    from ms_exp.job.model_package import _load_pyfunc

    model = tmp_path / "model"
    planted_config(model / "config.yaml")
    (model / "checkpoint.ckpt").write_bytes(b"not read")
    (model / "MLmodel").write_text(yaml.safe_dump({"flavors": {"mindspore": {
        "config": "config.yaml", "checkpoint": "checkpoint.ckpt"}}}))
    plant_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig) as refused:
        _load_pyfunc(str(model))
    assert str(refused.value) == refusal("model._target_", PLANTED,
                                         f"the MLflow model in {model}")
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("option", ["model=mlp", "model=resnet", "model=wide_deep",
                                    "dataset=digits", "dataset=mnist", "dataset=imagenet",
                                    "dataset=synthetic", "dataset=criteo"])
def test_a_config_of_ms_exps_own_options_read_back_is_trusted(option):
    from ms_exp.preflight.trust import check_read_back

    check_read_back(compose_config([option], return_hydra_config=True), "a store")
