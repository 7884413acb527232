"""Shared helpers: run the real command lines in a scratch working directory, and the
lanes the suite is split into (docs/developing.md#lanes)."""

import ast
import atexit
import contextlib
import functools
import io
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import numpy as np
import pytest

if TYPE_CHECKING:  # imported where used: MLflow costs every pytest process 2.6 s to import
    from mlflow import MlflowClient

# Keep test jobs quiet and short unless a test says otherwise: no progress bar, and no
# MLflow models (packaging and MindIR export cost about 1 s a job; the tests of models ask
# for them with tracking.log_models=true).
FAST = ("trainer.progress_bar=never", "tracking.log_models=false")

# --- lanes ---------------------------------------------------------------------------------
# Every test is in one lane. A test marked with none of these is a unit test (marked
# ``unit`` here): in-process, on fabricated files and configs, and it may not start an
# ms_exp job (checked below). The order is the order the lanes are scheduled in: the
# longest work first, so that two workers finish together.
LANES = ("distributed", "server", "browser", "e2e")
_current_test: Optional[pytest.Item] = None


def lane_of(item: pytest.Item) -> str:
    return next((lane for lane in LANES if item.get_closest_marker(lane)), "unit")


_store_cache: Optional[Path] = None  # migrated_store()'s


def pytest_configure(config):
    global _store_cache
    if getattr(config, "cache", None) is not None:  # not under -p no:cacheprovider
        _store_cache = config.cache.mkdir("ms_exp_migrated_store")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark unit tests, and order the lanes: ``-n 2 --dist loadfile`` gives each file to one
    worker whole (so a module's job, a fixture, runs once) in the order its first test
    comes, the longest lanes first."""
    for item in items:
        if lane_of(item) == "unit":
            item.add_marker(pytest.mark.unit)
    items.sort(key=lambda item: (LANES + ("unit",)).index(lane_of(item)))


@pytest.fixture(autouse=True)
def _mindspore_log_levels():
    """A command's preflight sets MindSpore's log levels for the processes it starts
    (ms_exp/boost/options.py); in the test process they stay the session's."""
    before = os.environ.get("MS_SUBMODULE_LOG_v")
    yield
    if before is None:
        os.environ.pop("MS_SUBMODULE_LOG_v", None)
    else:
        os.environ["MS_SUBMODULE_LOG_v"] = before


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    global _current_test
    _current_test = item


def pytest_runtest_teardown(item):
    global _current_test
    _current_test = None


# --- each lane's cost ----------------------------------------------------------------------
# With MS_EXP_LANE_TIMES=<file>, the run writes one line per test, "lane<TAB>seconds<TAB>node
# id" (setup, call and teardown summed), for tools/lane_times.py, which .ci/run ends with.
# Under xdist the workers' reports reach this hook in the controller too, keywords included:
# the controller, which has no items, reads the lane from them.
_seconds_by_test: Dict[str, list] = {}


def pytest_runtest_logreport(report):
    lane = next((lane for lane in LANES if lane in report.keywords), "unit")
    _seconds_by_test.setdefault(report.nodeid, [lane, 0.0])[1] += report.duration


def pytest_sessionfinish(session):
    path = os.environ.get("MS_EXP_LANE_TIMES")
    if path and not hasattr(session.config, "workerinput"):  # the controller, or no xdist
        Path(path).write_text(
            "".join(
                f"{lane}\t{seconds:.3f}\t{nodeid}\n"
                for nodeid, (lane, seconds) in _seconds_by_test.items()
            )
        )


JOB_COMMANDS = ("ms_exp.run", "ms_exp.worker", "ms_exp.eval", "ms_exp.ckpt", "faults.py")
# The programs that can start one: this interpreter (before a test stands something else in
# for sys.executable), and MindSpore's launchers.
JOB_PROGRAMS = (sys.executable, "msrun", "mpirun")


class _LaneGuardedPopen(subprocess.Popen):
    """``subprocess.Popen`` that refuses to start an ms_exp job from a unit test: such a
    test belongs in the end-to-end lane (``@pytest.mark.e2e``), or tests the logic
    in-process (``main_in_process``)."""

    def __init__(self, args, *rest, **kwargs):
        words = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
        if (
            _current_test is not None
            and lane_of(_current_test) == "unit"
            and words[0].endswith(JOB_PROGRAMS)
            and any(word.endswith(JOB_COMMANDS) for word in words[1:])
        ):
            raise AssertionError(
                f"{_current_test.nodeid} is a unit test but starts {shlex_join(words)}: mark "
                f"it @pytest.mark.e2e, or call the command's main() in-process"
            )
        super().__init__(args, *rest, **kwargs)


def shlex_join(words: Sequence[str]) -> str:
    import shlex

    return shlex.join(words)


subprocess.Popen = _LaneGuardedPopen


@contextlib.contextmanager
def chdir(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


class CliResult:
    def __init__(self, completed: subprocess.CompletedProcess, cwd: Path):
        self.rc = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.cwd = cwd

    @property
    def store(self) -> "MlflowClient":
        from mlflow import MlflowClient

        return MlflowClient(f"sqlite:///{self.cwd / 'mlflow.db'}")

    def field(self, prefix: str) -> str:
        """The rest of the first stdout line that starts with ``prefix``."""
        for line in self.stdout.splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise AssertionError(f"no line starting {prefix!r} in:\n{self.stdout[-3000:]}")

    @property
    def run_id(self) -> str:
        return self.field("MLflow run ").split()[0]

    @property
    def run_dir(self) -> Path:
        return Path(self.field("outputs:"))


def point_mindspore_logs_at(stream) -> None:
    """MindSpore's logger keeps the ``sys.stderr`` of the moment it was made (a test's
    capture, closed when that test ends); its warnings go to ``stream`` instead, as they
    would to a process's own stderr. Without this a later test in the same worker gets
    "--- Logging error ---" blocks among its output."""
    import logging

    import mindspore.log

    logger = mindspore.log.GLOBAL_LOGGER
    for handler in getattr(logger, "handlers", []) if logger is not None else []:
        if type(handler) is logging.StreamHandler:
            handler.stream = stream  # setStream would flush the old stream, maybe closed


@pytest.fixture(autouse=True)
def _mindspore_logs_to_this_tests_stderr():
    if "mindspore.log" in sys.modules:
        point_mindspore_logs_at(sys.stderr)
    yield


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """A source file's tree, parsed once per test process: the architecture and security
    scans walk the same files."""
    return ast.parse(path.read_text())


def main_in_process(
    module: str, args: Sequence[str], cwd: Path, env: Optional[Dict[str, str]] = None
) -> CliResult:
    """``python -m module args...`` as its ``main(args)`` called in this process, in ``cwd``
    with ``env`` added: where the process boundary adds nothing to what a test shows (a
    refusal before any job starts, an evaluation, a tiny job)."""
    import importlib

    main = importlib.import_module(module).main
    Path(cwd).mkdir(parents=True, exist_ok=True)
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        chdir(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        for name, value in (env or {}).items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        patch.setattr(sys, "argv", [f"{module}.py", *args])
        try:
            rc = main(list(args))
        except SystemExit as exit_:
            rc = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            # A logger MindSpore made during the call holds ``err``, which is read now.
            if "mindspore.log" in sys.modules:
                point_mindspore_logs_at(sys.__stderr__)
    completed = subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())
    return CliResult(completed, Path(cwd))


def differences(stdout: str) -> List[str]:
    """The lines a ``--from-run`` re-run lists under "differences from run ..." (none: [])."""
    found = re.search(r"differences from run .*\n((?:  - .*\n)*)", stdout)
    return found.group(1).splitlines() if found else []


def run_cli(
    module: str,
    args: Sequence[str],
    cwd: Path,
    env: Optional[Dict[str, str]] = None,
    timeout: int = 300,
    python_flags: Sequence[str] = (),
) -> CliResult:
    Path(cwd).mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    completed = subprocess.run(
        [sys.executable, *python_flags, "-m", module, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(completed, cwd)


@functools.lru_cache(maxsize=None)
def migrated_store() -> Path:
    """An empty MLflow SQLite store with MLflow's migrations applied. A fresh store costs
    MLflow 1.5-3.5 s of migrations on its first use: made once per MLflow version and kept in
    pytest's cache folder (where the cache is off, once per test process)."""
    import mlflow

    name = f"mlflow-{mlflow.__version__}.db"
    if _store_cache is not None and (_store_cache / name).is_file():
        return _store_cache / name
    folder = Path(tempfile.mkdtemp(prefix="ms_exp_store_"))
    atexit.register(shutil.rmtree, folder, True)
    # MLflow's migration log goes to whatever sys.stderr is: not into the first test's capture.
    with contextlib.redirect_stderr(io.StringIO()):
        mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    if _store_cache is None:
        return folder / "mlflow.db"
    # Whole or not at all, also with the other worker writing it too.
    part = _store_cache / f"{name}.{os.getpid()}"
    shutil.copyfile(folder / "mlflow.db", part)
    os.replace(part, _store_cache / name)
    return _store_cache / name


def train(cwd: Path, *overrides: str, env=None, python_flags: Sequence[str] = ()) -> CliResult:
    """``python -m ms_exp.run`` that must succeed. A working directory without a store gets
    a copy of ``migrated_store()`` first (unless the job records elsewhere or nothing): the
    first use of a store is tested where it is the behaviour (run_cli, sweeps, the
    concurrency tests), not paid again by every job."""
    store = Path(cwd) / "mlflow.db"
    if not store.exists() and not any(
        o.startswith(("tracking.uri=", "tracking.enabled=")) for o in overrides
    ):
        store.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_store(), store)
    result = run_cli("ms_exp.run", [*FAST, *overrides], cwd, env, python_flags=python_flags)
    assert result.rc == 0, f"rc={result.rc}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def assert_same_training_state(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> None:
    """Two checkpoints' contents equal bit for bit, but for optimizer state (``moments.*``)
    below float32's smallest normal number: MindSpore's CPU kernels flush such values to
    zero or keep them depending on the machine's load (docs/guides/reproducing.md)."""
    assert a.keys() == b.keys()
    tiny = np.finfo(np.float32).tiny
    for name in a:
        x, y = a[name], b[name]
        if name.startswith("moments."):
            x, y = np.where(np.abs(x) < tiny, 0, x), np.where(np.abs(y) < tiny, 0, y)
        np.testing.assert_array_equal(x, y, err_msg=name)


def free_port() -> int:
    """A port nobody listens on now, so concurrent or leftover jobs never share a master."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def postgres():
    """A PostgreSQL server of the test's own: (URL of its database, password)."""
    with postgres_server() as server:
        yield server


def skip_where_missing(reason: str) -> None:
    """A test that needs a service .ci/run installs is skipped where it is missing, but
    fails under CI (.ci/run sets CI=true): a passing CI run has run it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true, where it must run")
    pytest.skip(reason)


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL server of the caller's own (Debian's postgresql) on a free loopback port,
    its user ``ms_exp`` with a fresh password: yields the URL of its database, which holds
    no password (clients read it from PGPASSWORD, as a team's would), and the password. The
    server refuses to run as root, so under root it runs as the postgres user."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        skip_where_missing(
            "no PostgreSQL server installed (Debian's postgresql; .ci/run installs it)"
        )
    binaries = found[-1].parent
    folder = Path(tempfile.mkdtemp(prefix="ms_exp_pg_"))
    password = secrets.token_hex(12)
    (folder / "password").write_text(password)
    as_server = []
    if os.geteuid() == 0:
        as_server = ["runuser", "-u", "postgres", "--"]
        for path in (folder, folder / "password"):
            shutil.chown(path, "postgres")
    data, port = folder / "data", free_port()
    pg_ctl = [*as_server, str(binaries / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        [
            *as_server,
            str(binaries / "initdb"),
            "-D",
            str(data),
            "-U",
            "ms_exp",
            "-A",
            "scram-sha-256",
            "--pwfile",
            str(folder / "password"),
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *pg_ctl,
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1",
            "-l",
            str(folder / "server.log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://ms_exp@127.0.0.1:{port}/postgres", password
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(
    root: Path, *options: str, env: Optional[Dict[str, str]] = None, start_s: float = 120
):
    """``mlflow server`` on a free loopback port with ``options`` (its stores), logging to
    ``root/mlflow_server.log``: yields its URL once ``/health`` answers, and stops its whole
    process group (it starts uvicorn or gunicorn workers) afterwards."""
    port = free_port()
    log_path = Path(root) / "mlflow_server.log"
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *options,
    ]
    full_env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            command,
            cwd=root,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_s
        while True:
            if server.poll() is not None:
                pytest.fail(
                    f"mlflow server exited with {server.returncode}:\n"
                    f"{log_path.read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server did not answer in {start_s} s:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.25)
        yield url
    finally:
        stop_process_group(server)


def stop_process_group(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# What a wheel is built from: the checkout's sources (conf/experiment stays a symlink).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "ms_exp", "hydra_plugins", "conf", "experiments")


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built (no build isolation: offline) from a copy of its
    sources, so that setuptools' build/ and egg-info never land in the checkout."""
    root = Path(__file__).resolve().parents[1]
    source = tmp_path_factory.mktemp("wheel-source")
    for name in WHEEL_SOURCES:
        path = root / name
        if path.is_dir():
            shutil.copytree(
                path,
                source / name,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = out.glob("ms_exp-*.whl")
    return wheel


@pytest.fixture(scope="session")
def installed_wheel(built_wheel, tmp_path_factory) -> Path:
    """The python of a fresh virtual environment with the wheel installed (not editable);
    it imports the test environment's other packages (MindSpore, Hydra, MLflow, ...) through
    a ``.pth`` line. A path line does not run the editable install's import hook found in
    that folder, so the checkout's ms_exp is not importable there."""
    venv = tmp_path_factory.mktemp("wheel-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # Installed before the .pth exists: pip must not see the test environment's ms_exp.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(built_wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "test_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run_installed(
    python: Path, args: Sequence[str], cwd: Path, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``python args...`` in ``cwd`` with nothing of the checkout on the import path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
