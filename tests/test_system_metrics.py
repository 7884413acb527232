"""System metrics: MLflow's monitor in the job's sidecar, Ascend NPUs through npu-smi, and
MindSpore's device-memory figures."""

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from conftest import migrated_store, train
from mlflow import MlflowClient

from ms_exp.tracking.system_metrics import (
    NPUMonitor,
    _monitor_class,
    parse_npu_smi_info,
    start_system_metrics,
    stop_without_logging,
)
from ms_exp.train.device_memory import DeviceMemory

# `npu-smi info` of an Atlas 800T A2 server (910B: HBM), two NPUs, one process running.
NPU_SMI_910B = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 96.4        37                0    / 0             |
| 0                         | 0000:C1:00.0  | 37          0    / 0          12034/ 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 91.8        36                0    / 0             |
| 0                         | 0000:01:00.0  | 0           0    / 0          3357 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 48213         | python                   | 8677                    |
+===========================+===============+====================================================+
| No running processes found in NPU 1                                                            |
+===========================+===============+====================================================+
"""

# An Atlas 300I Duo (310P3): two chips on one card, no HBM, the chip's memory instead.
NPU_SMI_310P_DUO = """\
+-------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                   Version: 23.0.0                                          |
+---------------------------+-----------------+---------------------------------------------+
| NPU     Name              | Health          | Power(W)     Temp(C)     Hugepages-Usage(page)|
| Chip    Device            | Bus-Id          | AICore(%)    Memory-Usage(MB)                |
+===========================+=================+=============================================+
| 1       310P3             | OK              | NA           52          0     / 0           |
| 0       0                 | 0000:01:00.0    | 12           1782 / 44280                    |
| 1       1                 | 0000:01:00.0    | 0            1709 / 43693                    |
+===========================+=================+=============================================+
"""


def fake_npu_smi(folder: Path, body: str) -> Path:
    """A folder holding an ``npu-smi`` shell script with ``body``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "npu-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def printing(folder: Path, table: str) -> Path:
    (folder / "table.txt").parent.mkdir(parents=True, exist_ok=True)
    (folder / "table.txt").write_text(table)
    return fake_npu_smi(folder, f'cat "{folder / "table.txt"}"\n')


def with_path(folder: Path) -> dict:
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def migrated_copy(folder: Path) -> str:
    """The URI of a copy of conftest's migrated empty store in ``folder``."""
    shutil.copyfile(migrated_store(), folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def system_metrics(result) -> dict:
    run = result.store.get_run(result.run_id)
    return {k: v for k, v in run.data.metrics.items() if k.startswith("system/")}


# -- npu-smi's table --------------------------------------------------------------------------


def test_npu_smi_table_of_a_training_server_gives_ai_core_and_hbm_per_npu():
    assert parse_npu_smi_info(NPU_SMI_910B) == {
        "npu_0": (37.0, 12034.0, 65536.0),
        "npu_1": (0.0, 3357.0, 65536.0),
    }


def test_npu_smi_table_of_a_two_chip_card_names_each_chip_and_reads_its_memory():
    assert parse_npu_smi_info(NPU_SMI_310P_DUO) == {
        "npu_1_chip_0": (12.0, 1782.0, 44280.0),
        "npu_1_chip_1": (0.0, 1709.0, 43693.0),
    }


@pytest.mark.parametrize(
    "body",
    ["echo 'dcmi model initialized failed' >&2; exit 3\n", "echo 'Usage: npu-smi info'\n"],
    ids=["nonzero exit", "no table"],
)
def test_a_broken_npu_smi_is_warned_of_once_and_gives_no_npu_metrics(
    tmp_path, monkeypatch, capsys, body
):
    monkeypatch.setenv("PATH", with_path(fake_npu_smi(tmp_path / "bin", body))["PATH"])
    assert NPUMonitor.if_available() is None
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("ms_exp: warning: `npu-smi info` cannot")


def test_npu_smi_failing_mid_run_is_warned_of_once_then_left_alone(tmp_path, monkeypatch, capsys):
    folder = printing(tmp_path / "bin", NPU_SMI_910B)
    monkeypatch.setenv("PATH", with_path(folder)["PATH"])
    monitor = NPUMonitor.if_available()
    monitor.collect_metrics()
    fake_npu_smi(folder, "exit 9\n")
    monitor.collect_metrics()
    monitor.collect_metrics()
    assert monitor.aggregate_metrics()["npu_0_memory_usage_percentage"] == 18.4
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# -- the monitor, from a run id and a tracking URI (what ms_exp.autolog() uses) ---------------


def test_start_system_metrics_logs_samples_and_a_resumed_run_continues_their_steps(
    tmp_path, monkeypatch
):
    uri = migrated_copy(tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    assert start_system_metrics(run_id, uri, None) is None
    published = threading.Event()
    monitor_class = _monitor_class()
    publish = monitor_class.publish_metrics
    monkeypatch.setattr(
        monitor_class, "publish_metrics", lambda m, metrics: (publish(m, metrics), published.set())
    )
    for resume in (False, True):
        published.clear()
        monitor = start_system_metrics(run_id, uri, 0.2, resume=resume)
        assert published.wait(30)  # a sample taken while it runs, then one at its end
        monitor.finish()
    history = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    steps = [m.step for m in history]
    assert len(steps) >= 4 and steps == sorted(steps) and len(set(steps)) == len(steps)


def test_device_memory_is_not_logged_on_cpu():
    class Tracker:
        logged = []

        def log_metrics(self, metrics, step):
            self.logged.append(metrics)

    callback = DeviceMemory(Tracker(), "CPU")
    callback.on_train_epoch_end(None)
    assert Tracker.logged == []


# -- a job (a job's samples and npu-smi's figures: test_default_run.py, in the default run) --


@pytest.mark.e2e
def test_a_job_with_no_interval_and_no_models_records_neither(workdir):
    result = train(
        workdir,
        "trainer.epochs=1",
        "tracking.system_metrics_interval=null",
        "tracking.log_models=false",
    )
    # The training process's own total stays.
    assert set(system_metrics(result)) == {"system/peak_host_memory_mb"}
    # tracking.log_models=false: no MLflow model, and no model folder in the run directory.
    client = result.store
    experiment_id = client.get_run(result.run_id).info.experiment_id
    assert (
        client.search_logged_models(
            [experiment_id], filter_string=f"source_run_id = '{result.run_id}'"
        )
        == []
    )
    assert not (result.run_dir / "models").exists()


def test_a_monitor_stopped_without_logging_ends_its_thread_and_logs_nothing_more(tmp_path):
    uri = migrated_copy(tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    monitor = start_system_metrics(run_id, uri, 0.2)
    stop_without_logging(monitor)
    monitor._process.join(timeout=10)
    assert not monitor._process.is_alive()
    assert monitor.mlflow_logger.data == []


def test_a_run_shorter_than_the_interval_still_gets_a_sample_at_its_end(tmp_path):
    uri = migrated_copy(tmp_path)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    monitor = start_system_metrics(run_id, uri, 60.0)
    monitor.finish()
    (sample,) = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert sample.step == 0
