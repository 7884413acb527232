"""Every run records what produced it; ``--from-run`` produces it again, bit for bit."""

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FAST, assert_same_training_state, differences, main_in_process, train
from datafiles import write_mnist

# Momentum 0.5, not the default 0.9: within 4 epochs (176 steps) the momentum of weights
# whose gradient became 0 decays below float32's smallest normal number (1.2e-38), where
# MindSpore's CPU kernels flush some values to zero and keep others depending on the
# machine's load (docs/guides/reproducing.md). With 0.9 that takes about 16 epochs.
JOB = ("trainer.epochs=4", "optimizer.momentum=0.5")
LAST = "checkpoint-4_44.ckpt"


def weights(result, name, rank=0):
    import mindspore as ms

    path = result.run_dir / "checkpoints" / f"rank_{rank}" / name
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return train(tmp_path_factory.mktemp("repro"), *JOB)


@pytest.mark.e2e
def test_run_records_code_packages_command_and_data(original):
    run = original.store.get_run(original.run_id)
    tags = run.data.tags
    assert re.fullmatch(r"[0-9a-f]{40}", tags["ms_exp.git.project.commit"])
    assert tags["ms_exp.git.project.dirty"] in ("true", "false")
    for package in ("mindspore", "hydra-core", "omegaconf", "numpy", "mlflow"):
        assert tags[f"ms_exp.version.{package}"][0].isdigit()
    assert tags["ms_exp.python"].count(".") == 2
    assert tags["ms_exp.device_target"] == "CPU"
    assert tags["ms_exp.command"].endswith(" ".join(("-m ms_exp.run", *FAST, *JOB)))
    (dataset_input,) = run.inputs.dataset_inputs
    assert dataset_input.dataset.name == "digits"
    assert dataset_input.dataset.digest == tags["ms_exp.dataset_fingerprint"]
    assert "load_digits" in dataset_input.dataset.source
    files = {a.path for a in original.store.list_artifacts(original.run_id, "provenance")}
    assert {"provenance/requirements.txt", "provenance/dataset.json"} <= files
    requirements = (original.run_dir / "provenance" / "requirements.txt").read_text()
    assert re.search(r"^mindspore==2\.10\.0$", requirements, re.M)


def _busy_cores(count: int):
    """Processes that keep ``count`` cores busy until stopped."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


@pytest.mark.e2e
def test_from_run_on_a_loaded_machine_reproduces_the_weights_bit_for_bit_and_links_the_runs(
    original,
):
    """What docs/guides/reproducing.md promises: MindSpore's CPU kernels flush some values
    below float32's smallest normal number to zero and keep others, depending on how the
    work was split among threads, so momentum values under 1.2e-38 may be 0.0 in one run
    and a denormal in another; the weights they update are the same. The re-run trains
    while two busy processes load the cores; the original did not. It trains one epoch
    more: an override on top of the run's config, not reported as drift, where a package
    that changed since the run is listed before re-running it."""
    client = original.store
    numpy_then = client.get_run(original.run_id).data.tags["ms_exp.version.numpy"]
    client.set_tag(original.run_id, "ms_exp.version.numpy", "0.0.1")
    busy = _busy_cores(2)
    try:
        again = train(original.cwd, "--from-run", original.run_id, "trainer.epochs=5")
    finally:
        for process in busy:
            process.kill()
            process.wait()
        client.set_tag(original.run_id, "ms_exp.version.numpy", numpy_then)
    assert f"re-running MLflow run {original.run_id}" in again.stdout
    listed = differences(again.stdout)
    assert any("numpy 0.0.1 then, " in line for line in listed), listed
    # Besides it only the tree's uncommitted changes, where it has some, then and now.
    assert all("numpy 0.0.1" in line or "uncommitted changes" in line for line in listed)
    assert "config trainer.epochs" not in again.stdout
    assert again.store.get_run(again.run_id).data.params["trainer.epochs"] == "5"
    assert (again.run_dir / "checkpoints/rank_0/checkpoint-5_44.ckpt").is_file()
    then, now = weights(original, LAST), weights(again, LAST)
    # The optimizer state went through the range where the flush depends on the load:
    # values decaying 0.5 a step, some already below 1e-30 at the end.
    moments = np.abs(
        np.concatenate([v.ravel() for k, v in then.items() if k.startswith("moments.")])
    )
    assert np.any((moments > 0) & (moments < 1e-30))
    assert_same_training_state(then, now)
    run = again.store.get_run(again.run_id)
    assert run.data.tags["ms_exp.rerun_of"] == original.run_id
    assert run.data.params["tracking.rerun_of"] == original.run_id


def test_changed_packages_and_data_are_listed_before_rerunning(tmp_path):
    """What a re-run lists (ms_exp/preflight/rerun.py) from the run's tags and the data
    as it is now; the listing in a real re-run: the test above."""
    from omegaconf import OmegaConf

    from ms_exp.preflight.compose import compose_config
    from ms_exp.preflight.rerun import list_differences
    from ms_exp.tracking import provenance

    data = write_mnist(tmp_path / "mnist", train=64, test=32)
    overrides = ["dataset=mnist", f"dataset.path={data}", "trainer.epochs=1"]
    cfg = compose_config(overrides)
    # The run's config as its config/config.yaml artifact holds it.
    recorded = OmegaConf.create(OmegaConf.to_container(cfg, enum_to_str=True))
    before = provenance.dataset_fingerprint(cfg.dataset)["digest"]
    tags = {"ms_exp.version.numpy": "0.0.1", "ms_exp.dataset_fingerprint": before}
    assert not [
        line
        for line in list_differences(tags, recorded, cfg, [])
        if "dataset" in line or "config " in line
    ]
    write_mnist(data, train=64, test=32, seed=5)  # same files, other pixels
    section = "\n".join(list_differences(tags, recorded, cfg, []))
    assert "numpy 0.0.1 then, " in section
    assert f"dataset fingerprint {before} then, " in section
    # What the re-run records of the data it read.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    provenance.record(SimpleNamespace(enabled=False), cfg.dataset, run_dir, "command")
    dataset = json.loads((run_dir / "provenance" / "dataset.json").read_text())
    assert dataset["files"] == 4 and dataset["source"] == str(data.resolve())
    assert dataset["digest"] != before


@pytest.mark.e2e
def test_unknown_run_id_or_store_is_one_line(original, tmp_path):
    result = main_in_process("ms_exp.run", ["--from-run", "0" * 32], tmp_path)
    assert result.rc == 2
    assert result.stderr.strip().splitlines() == [
        f"ms_exp: error: --from-run={'0' * 32}: no MLflow store at {tmp_path / 'mlflow.db'}; "
        "expected the id of a run in an existing store (name the run's store with "
        "tracking.uri=...)"
    ]
    assert list(tmp_path.iterdir()) == []
    result = main_in_process("ms_exp.run", ["--from-run", "0" * 32], original.cwd)
    assert result.rc == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"ms_exp: error: --from-run={'0' * 32}: no such run in sqlite:///")


@pytest.mark.parametrize(
    "refusal",
    [
        "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
        "datasets.name, datasets.digest",
        # A team server on PostgreSQL, as its answer reads (a concurrent sweep hit it there).
        "BAD_REQUEST: (psycopg.errors.UniqueViolation) duplicate key value violates unique "
        'constraint "dataset_pk"',
    ],
)
def test_a_dataset_registered_by_two_jobs_at_once_is_retried_not_fatal(refusal):
    """The race a joblib sweep hit: MLflow's SQL store checks for the dataset, then inserts
    it, so the second of two concurrent jobs failed on the UNIQUE constraint."""
    from mlflow.exceptions import MlflowException

    from ms_exp.tracking.provenance import log_dataset_input

    class RacingClient:
        calls = 0

        def log_inputs(self, run_id, datasets):
            self.calls += 1
            if self.calls == 1:
                raise MlflowException(refusal)

    client = RacingClient()
    log_dataset_input(client, "run", object())
    assert client.calls == 2

    class BrokenClient:
        def log_inputs(self, run_id, datasets):
            raise MlflowException("something else")

    with pytest.raises(MlflowException, match="something else"):
        log_dataset_input(BrokenClient(), "run", object())
