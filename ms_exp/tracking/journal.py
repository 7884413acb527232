"""A run's MLflow calls kept on disk while its tracking server cannot be reached.

``<run dir>/mlflow-offline/<started>-<pid>.jsonl`` holds one JSON line per call (the
sidecar's own requests, ``start`` first and ``finish`` last), flushed line by line, never a
credential; rank 0 appends to its sidecar's file. ``<journal>.delivered`` counts the lines
already in the store, so an upload cut short goes on where it stopped; a damaged line costs
that call only (kept in ``<journal>.damaged``).
"""

import abc
import json
import os
import re
import shlex
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

OFFLINE_DIR = "mlflow-offline"
UPLOAD_MODULE = "ms_exp.tracking.upload"
# Names the job's journal for rank 0 of a distributed job (beside MLflow's MLFLOW_RUN_ID).
JOURNAL_VARIABLE = "MS_EXP_MLFLOW_JOURNAL"


def new_journal_path(run_dir: Path) -> Path:
    """A journal of its own for every job, also for a job resumed in the same directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path(run_dir).absolute() / OFFLINE_DIR / f"{stamp}-{os.getpid()}.jsonl"


def journals_in(run_dir: Path) -> List[Path]:
    return sorted((Path(run_dir) / OFFLINE_DIR).glob("*.jsonl"))


def run_dir_of(journal: Path) -> Path:
    return Path(journal).parent.parent


def upload_command(run_dir: Path) -> str:
    """The command that uploads ``run_dir``'s journals, shell-quoted: it is printed for the
    user to paste, and a run directory may hold spaces, quotes or ``$(...)``."""
    return shlex.join(["python", "-m", UPLOAD_MODULE, str(Path(run_dir).absolute())])


def offline_note(uri: str, journal: Path, run_id: Optional[str]) -> str:
    """The line of a job's report when (some of) its run is only in the journal."""
    upload = upload_command(run_dir_of(journal))
    if run_id is None:
        return (
            f"MLflow run not recorded yet: {uri} was unreachable; kept in {journal}; "
            f"upload with: {upload}"
        )
    return (
        f"{uri} stopped answering during the run: the calls since are kept in "
        f"{journal}; upload with: {upload}"
    )


class Journal:
    """Appends calls to a journal file, creating it with its ``start`` line if new."""

    def __init__(self, path: Path, start: Mapping[str, object]) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
            self.created = True
        except FileExistsError:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self.created = False
        self.path = path
        self._file = os.fdopen(fd, "a", buffering=1 << 20)
        if self.created:
            self.write("start", **start)

    def write(self, call: str, **arguments: Any) -> None:
        self._file.write(json.dumps({"call": call, **arguments}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class CallWriter(abc.ABC):
    """The recording calls of :class:`ms_exp.tracking.interface.RunTracker` as the JSON
    requests the sidecar takes and the journal keeps (``_send`` writes one), spelled out:
    provenance.record passes Path objects and positional arguments."""

    @abc.abstractmethod
    def _send(self, call: str, **arguments: Any) -> None:
        """Deliver one request: to the sidecar's stdin, or a line of the journal."""

    def _submit(self) -> None:
        """Send the metrics collected so far (none are, here)."""

    def log_params(self, params: Mapping[str, object]) -> None:
        self._send("log_params", params=dict(params))

    def set_tags(self, tags: Mapping[str, object]) -> None:
        self._send("set_tags", tags={k: str(v) for k, v in tags.items()})

    def log_artifact(self, path: Path, artifact_path: Optional[str] = None) -> None:
        self._send("log_artifact", path=str(Path(path).absolute()), artifact_path=artifact_path)

    def log_artifacts(self, directory: Path, artifact_path: Optional[str] = None) -> None:
        self._send(
            "log_artifacts", directory=str(Path(directory).absolute()), artifact_path=artifact_path
        )

    def log_artifact_to(
        self, run_id: Optional[str], path: Path, artifact_path: Optional[str] = None
    ) -> None:
        self._send(
            "log_artifact_to",
            run_id=run_id,
            path=str(Path(path).absolute()),
            artifact_path=artifact_path,
        )

    def log_model(
        self,
        name: str,
        directory: Path,
        params: Mapping[str, object],
        metrics: Mapping[str, float],
        epoch: Optional[int] = None,
        tags: Optional[Mapping[str, object]] = None,
        mlmodel: Optional[Mapping[str, object]] = None,
    ) -> None:
        # The run's metrics first: they place the model's (Tracker.log_model). The model's
        # directory stays in the run directory until it is logged.
        self._submit()
        self._send(
            "log_model",
            name=name,
            directory=str(Path(directory).absolute()),
            params={k: str(v) for k, v in params.items()},
            metrics={k: float(v) for k, v in metrics.items()},
            epoch=epoch,
            tags={k: str(v) for k, v in (tags or {}).items()},
            mlmodel=dict(mlmodel) if mlmodel else None,
        )


class JournalTracker(CallWriter):
    """The recording calls of :class:`ms_exp.tracking.tracker.Tracker`, kept in a journal;
    ``__getattr__`` answers the calls RunTracker lacks (``log_metric_rows``)."""

    enabled = True
    run_id = None  # unknown until the journal is delivered
    experiment_id = None
    model_ids: Mapping[str, str] = MappingProxyType({})  # ids are the store's to give

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.client = _JournalClient(journal)

    def __getattr__(self, call: str) -> Callable[..., None]:
        if call.startswith("_"):
            raise AttributeError(call)
        return lambda **arguments: self.journal.write(call, **arguments)

    def _send(self, call: str, **arguments: Any) -> None:
        self.journal.write(call, **arguments)

    def record_provenance(self, dataset_cfg: Any, run_dir: Path, command: str) -> None:
        from ms_exp.tracking import provenance

        provenance.record(self, dataset_cfg, Path(run_dir), command)

    @property
    def offline_journal(self) -> Path:
        return self.journal.path

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.journal.write(
            "log_metrics", metrics={k: float(v) for k, v in metrics.items()}, step=int(step)
        )

    def wait_for_run(self) -> None:
        """Nothing to wait for: the journal is open."""

    def flush(self) -> None:
        """Nothing to wait for: every line is flushed as it is written."""

    def finish(self, status: Optional[str]) -> None:
        self.journal.write("finish", status=status)


class _JournalClient:
    """The one MLflow client call provenance.record makes itself (the dataset input)."""

    def __init__(self, journal: Journal):
        self.journal = journal

    def log_inputs(self, run_id: Optional[str], datasets: Sequence[Any]) -> None:
        from google.protobuf import json_format

        for dataset_input in datasets:
            self.journal.write(
                "log_dataset", dataset_input=json_format.MessageToDict(dataset_input.to_proto())
            )


Call = Dict[str, Any]


class Damage(NamedTuple):
    """A line of a journal that is not a call: its number (from 1) and its bytes."""

    number: int
    text: bytes
    cut_off: bool  # the last line, without its newline: its job ended while writing it

    def held(self) -> str:
        """What the line seems to have held, as far as its text tells."""
        text = self.text.decode("utf-8", "replace")
        named = re.match(r'\s*\{\s*"call"\s*:\s*"(\w+)"', text)
        if named is None:
            return "what it held cannot be told from its text"
        call = named.group(1)
        rows = text.count('["') if call == "log_metric_rows" else 0  # ["key", value, ...]
        if rows:
            return f"{call}, {rows} metric value{'' if rows == 1 else 's'}"
        status = self.finish_status()
        return f"{call}, status {status}" if status else f"a {call} call"

    def finish_status(self) -> Optional[str]:
        """The status a damaged ``finish`` line still spells out in full, else None."""
        text = self.text.decode("utf-8", "replace")
        if not re.match(r'\s*\{\s*"call"\s*:\s*"finish"', text):
            return None
        status = re.search(r'"status"\s*:\s*"(FINISHED|FAILED|KILLED)"', text)
        return status.group(1) if status else None


def _call(line: bytes) -> Optional[Call]:
    try:
        call = json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        return None
    return call if isinstance(call, dict) and isinstance(call.get("call"), str) else None


def parse(path: Path) -> Tuple[List[Optional[Call]], List[Damage]]:
    """The journal's calls, one for each line, ``None`` for a damaged one, and its lines
    that are not calls; a last line cut off by a killed job is damage, not a call."""
    *lines, last = Path(path).read_bytes().split(b"\n")
    calls: List[Optional[Call]] = []
    damage = []
    for number, line in enumerate(lines + ([last] if last else []), 1):
        call, cut_off = _call(line), number > len(lines)
        if call is None:
            damage.append(Damage(number, line, cut_off))
        if not (cut_off and call is None):
            calls.append(call)
    return calls, damage


def read(path: Path) -> List[Optional[Call]]:
    return parse(path)[0]


def keep_damaged(journal: Path, damaged: Sequence[Damage]) -> Path:
    """Write the damaged lines, each after its number, to ``<journal>.damaged``."""
    kept = Path(str(journal) + ".damaged")
    kept.write_bytes(b"".join(b"line %d: %s\n" % (line.number, line.text) for line in damaged))
    return kept


class Progress:
    """How many lines of a journal are in the store already, and in which run."""

    def __init__(self, journal: Path) -> None:
        self.path = Path(str(journal) + ".delivered")
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.run_id: Optional[str] = saved.get("run_id")
        self.lines: int = saved.get("lines", 0)

    def save(self, run_id: Optional[str], lines: int) -> None:
        self.run_id, self.lines = run_id, lines
        part = self.path.with_suffix(".part")
        part.write_text(json.dumps({"run_id": run_id, "lines": lines}))
        os.replace(part, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
