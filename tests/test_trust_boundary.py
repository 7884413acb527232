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
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import main_in_process, migrated_store
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
        "    raise SystemExit('planted code ran')\n"
    )
    return folder


def one_line(result, prog: str) -> str:
    assert result.rc == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), result.stderr[-3000:]
    return lines[0][len(f"{prog}: error: ") :]


def refusal(key: str, target: str, source: str) -> str:
    return (
        f"{key}={target!r}: is not trusted in a config read back from {source}; expected "
        "a target of ms_exp's own options, of a config folder you name (--config-dir), of "
        "your own overrides, or one MS_EXP_TRUSTED_TARGETS allows (fnmatch patterns, "
        "comma-separated, e.g. MS_EXP_TRUSTED_TARGETS='my_project.*'); "
        "docs/guides/security.md"
    )


def migrated_copy(folder: Path) -> Path:
    """``folder/mlflow.db``, a copy of the migrated empty store: a fresh store's migrations
    (seconds, in each xdist worker that builds a module fixture) are not what is tested."""
    shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return folder / "mlflow.db"


def planted_config(path: Path, key: str = "model._target_", value: str = PLANTED) -> Path:
    """A run's saved config.yaml (composed and resolved as a job saves it) in which someone
    with write access to the store set ``key`` to ``value`` (by default: its network
    replaced by ``PLANTED``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = compose_config(["trainer.epochs=1"], return_hydra_config=True)
    with hydra_config_of(cfg, str(path.parent)):
        job = OmegaConf.to_container(
            OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]),
            resolve=True,
            enum_to_str=True,
        )
    section, _, name = key.rpartition(".")
    node = job
    for part in section.split(".") if section else ():
        node = node[part]
    node[name] = value
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
    result = main_in_process(
        "ms_exp.run",
        [
            "+trainer.callbacks.x._target_=numpy.load",
            "+trainer.callbacks.x.file=evil.pkl",
            "+trainer.callbacks.x.allow_pickle=true",
        ],
        tmp_path,
    )
    assert one_line(result, "ms_exp") == (
        "trainer.callbacks.x._target_='numpy.load': is a function that does not declare what "
        "it returns; expected a mindspore.train.Callback (a class, or a function declared "
        "`-> Callback`)"
    )
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("key", ["+trainer.callbacks.x", "model", "+trainer.metrics.x"])
def test_builtins_open_never_truncates_a_file(tmp_path, key):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    section = key.lstrip("+")
    plus = "+" if key.startswith("+") else ""
    arguments = [f"{key}._target_=builtins.open", f"+{section}.file={victim}", f"+{section}.mode=w"]
    result = main_in_process("ms_exp.run", arguments, tmp_path)
    line = one_line(result, "ms_exp")
    assert line.startswith(
        f"{section}._target_='builtins.open': is part of Python's standard "
        "library, not a component; expected "
    ), (plus, line)
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_a_standard_library_target_nested_in_arguments_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    result = main_in_process(
        "ms_exp.run",
        [
            "+trainer.callbacks.x._target_=mindspore.train.LossMonitor",
            "+trainer.callbacks.x.per_print_times._target_=builtins.open",
            f"+trainer.callbacks.x.per_print_times.file={victim}",
            "+trainer.callbacks.x.per_print_times.mode=w",
        ],
        tmp_path,
    )
    assert one_line(result, "ms_exp").startswith(
        "trainer.callbacks.x.per_print_times._target_='builtins.open': is part of Python's "
        "standard library, not a component"
    )
    assert victim.read_text() == "precious"


def test_a_function_declared_to_return_a_callback_is_built(tmp_path, monkeypatch):
    (tmp_path / "declared_factories.py").write_text(
        "from mindspore.train import Callback, LossMonitor\n\n\n"
        "def monitor() -> Callback:\n    return LossMonitor(1)\n\n\n"
        "def number() -> int:\n    return 1\n"
    )
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
    uri = f"sqlite:///{migrated_copy(files)}"
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
    (hydra / "overrides.yaml").write_text(
        yaml.safe_dump(["trainer.epochs=1", f"model._target_={PLANTED}"])
    )
    (hydra / "hydra.yaml").write_text(
        yaml.safe_dump(
            {
                "hydra": {
                    "runtime": {"config_sources": []},
                    "job": {"config_name": "config"},
                    "overrides": {"hydra": []},
                }
            }
        )
    )
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
    result = main_in_process(
        "ms_exp.eval", ["--run-id", store.run_id, "--tracking-uri", store.uri], store.cwd
    )
    assert one_line(result, "ms_exp.eval") == refusal(
        "model._target_", PLANTED, f"MLflow run {store.run_id}"
    )
    assert not (store.cwd / MARKER).exists()
    assert sorted(store.cwd.iterdir()) == store.before


@pytest.mark.parametrize("trust", ["variable", "config-dir", "override"])
def test_the_user_trusts_a_target_by_variable_config_dir_or_override(
    planted_store, trust, monkeypatch
):
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
    result = main_in_process(
        "ms_exp.run", ["--from-run", store.run_id, f"tracking.uri={store.uri}"], store.cwd
    )
    assert one_line(result, "ms_exp") == refusal(
        "model._target_", PLANTED, f"MLflow run {store.run_id} (--from-run)"
    )
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
        "model._target_", PLANTED, f"the run directory of {checkpoint}"
    )
    assert not (cwd / MARKER).exists()


def test_a_logged_model_with_a_planted_config_is_not_built_by_pyfunc(tmp_path, monkeypatch):
    from ms_exp.job.model_package import _load_pyfunc

    model = tmp_path / "model"
    planted_config(model / "config.yaml")
    (model / "checkpoint.ckpt").write_bytes(b"not read")
    (model / "MLmodel").write_text(
        yaml.safe_dump(
            {"flavors": {"mindspore": {"config": "config.yaml", "checkpoint": "checkpoint.ckpt"}}}
        )
    )
    plant_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig) as refused:
        _load_pyfunc(str(model))
    assert str(refused.value) == refusal("model._target_", PLANTED, f"the MLflow model in {model}")
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize(
    "option",
    [
        "model=mlp",
        "model=resnet",
        "model=wide_deep",
        "dataset=digits",
        "dataset=mnist",
        "dataset=imagenet",
        "dataset=synthetic",
        "dataset=criteo",
    ],
)
def test_a_config_of_ms_exps_own_options_read_back_is_trusted(option):
    from ms_exp.preflight.trust import check_read_back

    check_read_back(compose_config([option], return_hydra_config=True), "a store")


# ---------------------------------------------------------------------------------------------
# A record is data (ms_exp/config/record.py): a config read back holds no interpolation; a
# re-run applies none of Hydra's settings, no resolver that reads this machine, and no config
# folder the user does not name

SECRET_VARIABLE = "MS_EXP_TEST_SECRET"


def interpolations(victim: Path) -> dict:
    """Interpolations planted in a saved config, each of which would run when its section is
    built: write ``victim`` with numpy.save, or copy the reader's secret into the store."""
    return {
        "oc.create": (
            "model",
            f"${{oc.create:{{_target_: numpy.save, file: '{victim}', arr: 1}}}}",
        ),
        "oc.decode": (
            "model",
            f"${{oc.decode:'{{_target_: numpy.save, file: {victim}, arr: 1}}'}}",
        ),
        "oc.env": ("tracking.run_name", f"${{oc.env:{SECRET_VARIABLE}}}"),
    }


def interpolation_refusal(key: str, value: str, source: str) -> str:
    return (
        f"{key}={value!r}: is an interpolation in a config read back from {source}; "
        "expected a plain value: a job saves its config resolved, so a config read back "
        "resolves nothing (docs/guides/security.md)"
    )


def log_job(
    client, experiment: str, folder: Path, config: Path, overrides=("trainer.epochs=1",), hydra=None
) -> str:
    """A job's run as ms_exp records it: its config, its Hydra record, its last checkpoint."""
    run_id = client.create_run(experiment, run_name=folder.name).info.run_id
    client.log_artifact(run_id, str(config), "config")
    checkpoint = folder / "checkpoint-1_1.ckpt"
    checkpoint.write_bytes(b"not read: the config is refused first")
    client.log_artifact(run_id, str(checkpoint), "checkpoints/rank_0")
    client.set_tag(run_id, "ms_exp.checkpoint.last", "checkpoints/rank_0/checkpoint-1_1.ckpt")
    (folder / "hydra").mkdir()
    (folder / "hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    (folder / "hydra" / "hydra.yaml").write_text(
        yaml.safe_dump(
            {
                "hydra": {
                    "runtime": {"config_sources": []},
                    "job": {"config_name": "config"},
                    "overrides": {"hydra": []},
                    **(hydra or {}),
                }
            }
        )
    )
    client.log_artifacts(run_id, str(folder / "hydra"), "hydra")
    client.set_terminated(run_id)
    return run_id


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """A store with one job run per planted interpolation, and runs whose recorded
    overrides or Hydra record name what a re-run must not take from them."""
    files = tmp_path_factory.mktemp("records")
    victim = files / "victim.npy"
    uri = f"sqlite:///{migrated_copy(files)}"
    client = MlflowClient(uri)
    experiment = ensure_experiment(client, "ms_exp")
    runs, planted = {}, interpolations(victim)
    for name, (key, value) in planted.items():
        folder = files / name
        config = planted_config(folder / "config" / "config.yaml", key, value)
        runs[name] = log_job(client, experiment, folder, config)
    clean = planted_config(files / "clean" / "config.yaml", "trainer.epochs", 1)
    for name, overrides, hydra in [
        ("env_set", ["trainer.epochs=1", f"+hydra.job.env_set.PYTHONPATH={files}"], None),
        ("launcher", ["trainer.epochs=1", "hydra/launcher=basic"], None),
        (
            "resolver",
            ["trainer.epochs=1", f"tracking.run_name=${{oc.env:{SECRET_VARIABLE}}}"],
            None,
        ),
        (
            "plain",
            [
                "trainer.epochs=1",
                "tracking.run_name=seed-${trainer.seed}",
                "tracking.uri=http://127.0.0.1:9/planted",
            ],
            None,
        ),
        (
            "searchpath",
            ["trainer.epochs=1"],
            {"overrides": {"hydra": ["hydra.searchpath=[pkg://planted_pkg]"]}},
        ),
        (
            "config_dir",
            ["trainer.epochs=1"],
            {
                "runtime": {
                    "config_sources": [
                        {"provider": "command-line", "schema": "file", "path": str(files)}
                    ]
                }
            },
        ),
    ]:
        folder = files / name
        folder.mkdir()
        runs[name] = log_job(client, experiment, folder, clean, overrides, hydra)
    return SimpleNamespace(
        uri=uri, runs=runs, planted=planted, victim=victim, files=files, client=client
    )


@pytest.mark.parametrize("name", ["oc.create", "oc.decode", "oc.env"])
@pytest.mark.parametrize("reader", ["--run-id", "--checkpoint", "pyfunc"])
def test_an_interpolation_in_a_config_read_back_is_refused_before_it_resolves(
    records, name, reader, tmp_path
):
    key, value = records.planted[name]
    runs_before = len(
        records.client.search_runs([records.client.get_experiment_by_name("ms_exp").experiment_id])
    )
    env = {SECRET_VARIABLE: "the-readers-secret"}
    if reader == "pyfunc":
        from ms_exp.job.model_package import _load_pyfunc

        model = tmp_path / "model"
        planted_config(model / "config.yaml", key, value)
        (model / "checkpoint.ckpt").write_bytes(b"not read")
        (model / "MLmodel").write_text(
            yaml.safe_dump(
                {
                    "flavors": {
                        "mindspore": {"config": "config.yaml", "checkpoint": "checkpoint.ckpt"}
                    }
                }
            )
        )
        with pytest.raises(InvalidConfig) as refused:
            _load_pyfunc(str(model))
        line, source = str(refused.value), f"the MLflow model in {model}"
    else:
        if reader == "--run-id":
            args, source = ["--run-id", records.runs[name]], f"MLflow run {records.runs[name]}"
        else:
            checkpoint = tmp_path / "run" / "checkpoints" / "rank_0" / "checkpoint-1_1.ckpt"
            planted_config(tmp_path / "run" / "config.yaml", key, value)
            checkpoint.parent.mkdir(parents=True)
            checkpoint.write_bytes(b"not read")
            args, source = ["--checkpoint", str(checkpoint)], f"the run directory of {checkpoint}"
        result = main_in_process(
            "ms_exp.eval", [*args, "--tracking-uri", records.uri], tmp_path / "cwd", env
        )
        line = one_line(result, "ms_exp.eval")
    assert line == interpolation_refusal(key, value, source)
    assert not records.victim.exists()
    assert (
        len(
            records.client.search_runs(
                [records.client.get_experiment_by_name("ms_exp").experiment_id]
            )
        )
        == runs_before
    )


def test_a_server_named_by_a_run_folders_config_is_not_sent_the_readers_credentials(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "rank_0" / "checkpoint-1_1.ckpt"
    planted_config(tmp_path / "run" / "config.yaml", "tracking.uri", "http://127.0.0.1:9/x")
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"not read")
    result = main_in_process(
        "ms_exp.eval",
        ["--checkpoint", str(checkpoint)],
        tmp_path / "cwd",
        {"MLFLOW_TRACKING_PASSWORD": "the-readers-password"},
    )
    assert one_line(result, "ms_exp.eval") == (
        "tracking.uri='http://127.0.0.1:9/x': is a server named by the config read back from "
        f"the run directory of {checkpoint}; expected --tracking-uri naming the server to "
        "record the evaluation in"
    )


@pytest.mark.parametrize(
    "name, line",
    [
        (
            "env_set",
            "hydra.job.env_set.PYTHONPATH='<files>': overrides Hydra itself, recorded in "
            "MLflow run <run> (--from-run); expected overrides of the job's own keys with "
            "plain values or ${key} references (docs/guides/security.md); a setting of "
            "Hydra is yours to name on the command line",
        ),
        (
            "launcher",
            "hydra/launcher='basic': overrides Hydra itself, recorded in MLflow run <run> "
            "(--from-run); expected overrides of the job's own keys with plain values or "
            "${key} references (docs/guides/security.md); a setting of Hydra is yours to "
            "name on the command line",
        ),
        (
            "resolver",
            "tracking.run_name='${oc.env:MS_EXP_TEST_SECRET}': calls the resolver oc.env, "
            "which reads the environment of whoever re-runs it, a secret included, in an "
            "override recorded in MLflow run <run> (--from-run); expected overrides of the "
            "job's own keys with plain values or ${key} references "
            "(docs/guides/security.md)",
        ),
        (
            "searchpath",
            "--from-run=<run>: the run was composed with "
            "'hydra.searchpath=[pkg://planted_pkg]' (its hydra/hydra.yaml); a config "
            "folder is code, so a re-run takes it only from your command line; expected: "
            "python -m ms_exp.run --from-run <run> 'hydra.searchpath=[pkg://planted_pkg]'",
        ),
        (
            "config_dir",
            "--from-run=<run>: the run was composed with --config-dir <files> (its "
            "hydra/hydra.yaml); a config folder is code, so a re-run takes it only from "
            "your command line; expected: python -m ms_exp.run --from-run <run> "
            "--config-dir <files>",
        ),
    ],
)
def test_from_run_reapplies_the_jobs_own_keys_and_nothing_of_hydras(records, name, line, tmp_path):
    run_id = records.runs[name]
    result = main_in_process(
        "ms_exp.run",
        ["--from-run", run_id, f"tracking.uri={records.uri}"],
        tmp_path,
        {SECRET_VARIABLE: "the-readers-secret"},
    )
    assert one_line(result, "ms_exp") == line.replace("<run>", run_id).replace(
        "<files>", str(records.files)
    )
    assert list(tmp_path.iterdir()) == []


def test_from_run_keeps_plain_references_and_records_beside_the_original(
    records, tmp_path, monkeypatch
):
    from ms_exp.preflight.rerun import rerun_arguments

    monkeypatch.chdir(tmp_path)
    overrides = rerun_arguments(records.runs["plain"], [f"tracking.uri={records.uri}"])
    assert "tracking.run_name=seed-${trainer.seed}" in overrides
    # The recorded server is not where the re-run records: the store it was read from is.
    assert [o for o in overrides if o.startswith("tracking.uri=")] == [
        f"tracking.uri={records.uri}",
        f"tracking.uri={records.uri}",
    ]
    # The folder named on the command line is the user's own: the re-run composes with it.
    record = records.runs["config_dir"]
    assert "--config-dir" in rerun_arguments(
        record, ["--config-dir", str(records.files), f"tracking.uri={records.uri}"]
    )


def test_every_registered_resolver_has_a_rule_for_text_read_back_from_a_record(records):
    """Walks the resolvers registered in this process (OmegaConf's, Hydra's, ms_exp's, after
    a composition): each is allowed in a recorded override with its reason, or refused; none
    is allowed in a saved config."""
    from omegaconf.basecontainer import BaseContainer

    from ms_exp.config.record import (
        RECORDED_OVERRIDE_RESOLVERS,
        check_recorded_overrides,
        refuse_interpolations,
    )

    compose_config([], return_hydra_config=True)
    registered = set(BaseContainer._resolvers)  # OmegaConf keeps no public list
    assert registered <= set(RECORDED_OVERRIDE_RESOLVERS), registered - set(
        RECORDED_OVERRIDE_RESOLVERS
    )
    for name in sorted(registered):
        allowed, why = RECORDED_OVERRIDE_RESOLVERS[name]
        text = f"${{{name}:x}}"
        assert why
        if allowed:
            check_recorded_overrides([f"tracking.run_name={text}"], "a record")
        else:
            with pytest.raises(InvalidConfig, match=f"calls the resolver {name}, which "):
                check_recorded_overrides([f"tracking.run_name={text}"], "a record")
        with pytest.raises(InvalidConfig, match="is an interpolation in a config read back"):
            refuse_interpolations({"tracking": {"run_name": text}}, "a record")
    with pytest.raises(
        InvalidConfig,
        match="calls the resolver my.own, which ms_exp does not know, so it may run any code",
    ):
        check_recorded_overrides(["model.x=${my.own:1}"], "a record")
