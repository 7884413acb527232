"""Every tracker declares every member of ``RunTracker`` (ms_exp/tracking/interface.py) with
the same parameter names; ``DisabledTracker`` and ``JournalTracker`` work when called."""

import inspect
from typing import Dict, List, Union

import pytest

from ms_exp.tracking.interface import RunTracker
from ms_exp.tracking.journal import Journal, JournalTracker, read
from ms_exp.tracking.lifecycle import DisabledTracker
from ms_exp.tracking.sidecar import SidecarTracker
from ms_exp.tracking.tracker import Tracker

ATTRIBUTES = {"enabled", "run_id", "experiment_id", "offline_journal", "model_ids"}
METHODS = {
    "log_params",
    "log_metrics",
    "set_tags",
    "log_artifact",
    "log_artifacts",
    "log_artifact_to",
    "record_provenance",
    "log_model",
    "wait_for_run",
    "flush",
    "finish",
}
SYNTHETIC = {
    "name": "synthetic",
    "num_samples": 8,
    "num_eval_samples": 4,
    "num_classes": 2,
    "noise": 0.1,
    "data_seed": 1,
    "image_shape": [1, 2, 2],
}


def declared() -> Dict[str, object]:
    """What RunTracker declares: name -> its function (a method) or property (an attribute)."""
    return {
        name: value
        for name, value in vars(RunTracker).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }


def interface_gaps(tracker: Union[type, object]) -> List[str]:
    """What ``tracker`` (a class, or an instance for attributes set in ``__init__``) lacks of
    RunTracker. Looked up statically: a ``__getattr__`` that answers any name (DisabledTracker,
    JournalTracker) does not count as declaring a member."""
    gaps = []
    for name, member in declared().items():
        try:
            found = inspect.getattr_static(tracker, name)
        except AttributeError:
            gaps.append(f"{name}: missing")
            continue
        if isinstance(member, property):
            if inspect.isfunction(found):
                gaps.append(f"{name}: a method, not an attribute")
            continue
        if not inspect.isfunction(found):
            gaps.append(f"{name}: not a method")
            continue
        wanted = inspect.signature(member).parameters
        got = inspect.signature(found).parameters
        if list(got) != list(wanted):
            gaps.append(f"{name}: parameters {list(got)}, not {list(wanted)}")
            continue
        for parameter in wanted.values():
            other = got[parameter.name]
            if other.kind != parameter.kind:
                gaps.append(f"{name}: {parameter.name} is {other.kind}, not {parameter.kind}")
            if (
                parameter.default is not inspect.Parameter.empty
                and other.default is inspect.Parameter.empty
            ):
                gaps.append(f"{name}: {parameter.name} has no default")
    return gaps


def test_the_interface_is_what_the_training_code_calls():
    members = declared()
    assert {n for n, m in members.items() if isinstance(m, property)} == ATTRIBUTES
    assert {n for n, m in members.items() if inspect.isfunction(m)} == METHODS


@pytest.fixture
def journal_tracker(tmp_path):
    journal = Journal(
        tmp_path / "run" / "mlflow-offline" / "job.jsonl",
        {
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "experiment_name": "interface",
            "run_name": "journaled",
            "tags": {},
            "parent_run_id": None,
            "run_id": None,
        },
    )
    yield JournalTracker(journal)
    journal.close()


# Looked at on an instance where one is cheap, so attributes that __init__ sets count too;
# SidecarTracker as a class (an instance starts its sidecar process): its are on the class.
IMPLEMENTATIONS = {
    "Tracker": lambda journal_tracker: Tracker(None, "run", "0"),
    "SidecarTracker": lambda journal_tracker: SidecarTracker,
    "JournalTracker": lambda journal_tracker: journal_tracker,
    "DisabledTracker": lambda journal_tracker: DisabledTracker(),
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_every_tracker_declares_the_whole_interface(implementation, journal_tracker):
    tracker = IMPLEMENTATIONS[implementation](journal_tracker)
    assert interface_gaps(tracker) == []
    if not isinstance(tracker, type):
        assert isinstance(tracker, RunTracker)


def test_a_member_renamed_or_gone_is_caught():
    """__getattr__ copied along: it does not hide what is missing."""
    members = {
        name: value
        for name, value in vars(DisabledTracker).items()
        if name not in ("__dict__", "__weakref__")
    }
    assert "__getattr__" in members and interface_gaps(type("Same", (), members)) == []
    renamed = {**members, "flush_all": members["flush"]}
    del renamed["flush"]
    assert interface_gaps(type("Renamed", (), renamed)) == ["flush: missing"]

    def finish(self, state):
        pass

    assert interface_gaps(type("Reworded", (), {**members, "finish": finish})) == [
        "finish: parameters ['self', 'state'], not ['self', 'status']"
    ]


def test_disabled_tracker_does_nothing_but_write_the_provenance(workdir):
    tracker = DisabledTracker()
    assert (tracker.enabled, tracker.run_id, tracker.experiment_id, tracker.offline_journal) == (
        False,
        None,
        None,
        None,
    )
    artifact = workdir / "file.txt"
    artifact.write_text("x")
    assert tracker.log_params({"a": 1}) is None
    assert tracker.log_metrics({"train/loss": 1.0}, step=1) is None
    assert tracker.set_tags({"t": "v"}) is None
    assert tracker.log_artifact(artifact, "files") is None
    assert tracker.log_artifacts(workdir, "folder") is None
    assert tracker.log_artifact_to("other", artifact, "pca") is None
    assert tracker.wait_for_run() is None
    assert tracker.flush() is None
    tracker.record_provenance(SYNTHETIC, workdir, "python -m ms_exp.run")
    # (and project.diff when the checkout has changes)
    assert {p.name for p in (workdir / "provenance").iterdir()} >= {
        "requirements.txt",
        "dataset.json",
    }
    assert tracker.finish("FINISHED") is None
    assert tracker.finish(None) is None
    assert {p.name for p in workdir.iterdir()} == {"file.txt", "provenance"}


def test_journal_tracker_keeps_every_call_as_a_call_tracker_takes(
    journal_tracker, tmp_path, monkeypatch
):
    tracker = journal_tracker
    path = tracker.journal.path
    run_dir = path.parent.parent
    artifact = run_dir / "config.yaml"
    artifact.write_text("a: 1\n")
    (run_dir / "hydra").mkdir()
    assert (tracker.enabled, tracker.run_id, tracker.experiment_id) == (True, None, None)
    assert tracker.offline_journal == path
    tracker.wait_for_run()
    tracker.log_params({"optimizer.lr": 0.1})
    tracker.log_metrics({"train/loss": 0.5}, step=3)
    tracker.set_tags({"ms_exp.loop": "model"})
    tracker.log_artifact(artifact, "config")
    tracker.log_artifacts(run_dir / "hydra", "hydra")
    tracker.log_artifact_to(None, artifact, "pca")
    monkeypatch.chdir(tmp_path)
    tracker.record_provenance(SYNTHETIC, str(run_dir), "python -m ms_exp.run")
    tracker.flush()
    tracker.finish("FINISHED")
    tracker.journal.close()
    calls = read(path)
    assert [call["call"] for call in calls] == [
        "start",
        "log_params",
        "log_metrics",
        "set_tags",
        "log_artifact",
        "log_artifacts",
        "log_artifact_to",
        "set_tags",
        "log_artifacts",
        "log_dataset",
        "finish",
    ]
    assert calls[2] == {"call": "log_metrics", "metrics": {"train/loss": 0.5}, "step": 3}
    assert calls[4]["path"] == str(artifact.absolute())
    # The upload replays each line as Tracker.<call>(**arguments) (recorder.replay).
    for call in calls[1:]:
        arguments = {k: v for k, v in call.items() if k != "call"}
        inspect.signature(getattr(Tracker, call["call"])).bind(None, **arguments)
