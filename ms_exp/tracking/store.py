"""Where runs are recorded: the MLflow tracking URI and the experiment.

The default store is ``sqlite:///mlflow.db`` in the working directory, made absolute so it
does not move when a job changes directory. New experiments keep their artifacts in
``mlartifacts/`` beside it: MLflow's ``./mlruns`` would read as its old file store
(docs/design.md#mlflow-default-store, docs/design.md#mlflow-file-store).
"""

import fcntl
import functools
import os
import re
import shlex
import shutil
import sqlite3
import sys
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional
from urllib.parse import urlparse, urlsplit, urlunsplit
from urllib.request import url2pathname

if TYPE_CHECKING:  # MLflow is imported where a store is opened, not by every job
    from mlflow import MlflowClient

DEFAULT_DB_NAME = "mlflow.db"
# What an experiment holds, for MLflow versions that choose the UI's view from it (3.17 reads
# the address instead: ms_exp.tracking.ui_links).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"


def resolve_tracking_uri(uri: Optional[str], workdir: Optional[Path] = None) -> str:
    if uri:
        return uri
    base = Path(workdir or os.getcwd()).resolve()
    return f"sqlite:///{base / DEFAULT_DB_NAME}"


# ``scheme://user:password@`` anywhere in a text, the password up to the last ``@`` of the
# word: a password may hold ``/``, ``?``, ``#`` or ``@`` unencoded, as a hurried user types it
# (SQLAlchemy reads it so; urlsplit then ends the host before it).
CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s'\":/?#@]*:)[^\s'\"]*@")
# Names that carry a credential as ``name=value``: a query parameter (SQLAlchemy hands
# ``?password=`` to the database driver) or a keyword of libpq's ``host=x password=y`` string.
CREDENTIAL_NAMES = "password passwd pwd token access_token secret api_key sslpassword".split()


def _named_credential(value: str) -> "re.Pattern[str]":
    """``name=`` (group 1) and its value, for a name of CREDENTIAL_NAMES at the start of a
    parameter or keyword, in any case and with any letter %-encoded (SQLAlchemy decodes it)."""
    names = "|".join(
        "".join(f"(?:{c}|%{ord(c.lower()):02x}|%{ord(c.upper()):02x})" for c in name)
        for name in CREDENTIAL_NAMES
    )
    return re.compile(rf"(?i)((?<![^?&;=\s'\"])(?:{names})\s*=\s*)(?:{value})")


# In a URI, the value up to the next ``&``, where SQLAlchemy ends it (``#`` and ``;`` too are
# the password's); in a libpq string this also hides the keywords after it.
CREDENTIAL_IN_URI = _named_credential(r"[^&]*")
# In a text that quotes the URI: up to a quote, a space, ``&`` or a ``;`` that ends a clause.
CREDENTIAL_IN_TEXT = _named_credential(r"'(?:[^'\\]|\\.)*'|(?:[^&\s'\";]|;(?!\s|$))*")


def without_passwords(text: str) -> str:
    """``text`` with the password of every URL in it, and every credential named in a query
    or libpq string, replaced by ***: for a line that repeats what the user typed (an
    override Hydra cannot read, a value refused)."""
    return CREDENTIAL_IN_TEXT.sub(r"\1***", CREDENTIALS.sub(r"\1***@", text))


def masked(url: str) -> str:
    """The URL with its password (if any) and credential parameters replaced by ***: fit to
    print and to log."""
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            url = urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
        parts.port  # raises when it is no number: a password that ended the host
    except ValueError:  # no port number, or an unclosed [IPv6 host]
        url = CREDENTIALS.sub(r"\1***@", url)
    return CREDENTIAL_IN_URI.sub(r"\1***", url)


def holds_password(url: str) -> bool:
    """Does ``url`` hold a password: ``user:password@`` (also when the password holds a ``/``,
    ``?`` or ``#`` that ends urlsplit's host early, so that what it reads as the port is no
    number), or a credential as ``?password=``, ``&token=``, libpq's ``password=``?"""
    if CREDENTIAL_IN_URI.search(url):
        return True
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            return True
        parts.port  # raises when it is no number
        return False
    except ValueError:  # no port number, or an unclosed [IPv6 host]
        return bool(CREDENTIALS.match(url))


def password_refusal(key: str, uri: Optional[str]) -> Optional[str]:
    """The one-line refusal of a store URI that holds a password (None: it holds none).
    Refused rather than masked: a URI is in the job's config, Hydra's record, the MLflow
    params and tags and the printed lines, and one of them would keep it."""
    if not uri or not holds_password(uri):
        return None
    where = (
        "the credentials in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, "
        "which MLflow sends to the server"
        if uri.lower().startswith(("http:", "https:"))
        else "the password in PGPASSWORD or ~/.pgpass (PostgreSQL; MySQL: ~/.my.cnf), which "
        "the database client reads"
    )
    return (
        f"{key}={masked(uri)!r}: a password in {key} would be written into the run's "
        f"records and printed; expected a URI without a password, {where}"
    )


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a ``sqlite:///`` URI, None for other stores."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


SQLITE_HEADER = b"SQLite format 3\x00"
# SQLite's file header (https://www.sqlite.org/fileformat.html): 100 bytes; the page size at
# offset 16, the file change counter at 24, the database's size in pages at 28 (valid when
# the "version-valid-for" number at 92 equals that counter).
SQLITE_HEADER_SIZE = 100
CUT_SHORT = "a copy or disk that stopped early; restore the whole file"


def not_a_database(database: Path) -> Optional[str]:
    """Why the file of a ``sqlite:///`` store is not one SQLite can open, or None (also
    when it does not exist yet, or is empty). Read only: a file cut short is named from its
    header and size where they tell, else by SQLite's quick_check, before MLflow opens it
    (and writes on into a damaged file)."""
    if not database.exists():
        return None
    if not database.is_file():
        return f"{database} is not a file"
    try:
        with open(database, "rb") as f:
            header = f.read(SQLITE_HEADER_SIZE)
        stat = database.stat()
    except OSError as error:
        return f"{database} cannot be read: {error.strerror or error}"
    if header and header[: len(SQLITE_HEADER)] != SQLITE_HEADER:
        return f"{database} is not a SQLite database"
    if not header:
        return None
    size = stat.st_size
    if size < SQLITE_HEADER_SIZE:
        return (
            f"{database} is cut short: {size} bytes, less than SQLite's "
            f"{SQLITE_HEADER_SIZE}-byte header: {CUT_SHORT}"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and header[24:28] == header[92:96] and size < pages * page_size:
        return (
            f"{database} is cut short: {size} bytes, where its header says "
            f"{pages * page_size} ({pages} pages of {page_size}): {CUT_SHORT}"
        )
    if page_size and size % page_size:
        return (
            f"{database} is cut short: {size} bytes, not a whole number of its "
            f"{page_size}-byte pages: {CUT_SHORT}"
        )
    # WAL mode (2 at offset 18) without its -wal and -shm: a read-only connection would
    # create both and leave them; the header's checks above are all there is then.
    if header[18] == 2 and not all(Path(f"{database}{end}").exists() for end in WAL_FILES):
        return None
    return _quick_check(str(database), stat.st_ino, stat.st_size, stat.st_mtime_ns)


WAL_FILES = ("-wal", "-shm")
DAMAGED = "restore the whole file from a copy"
# What SQLite says of a file it cannot read as a database (SQLITE_CORRUPT, SQLITE_NOTADB),
# in the words MLflow and SQLAlchemy pass on in their own errors.
SQLITE_DAMAGE = re.compile(
    r"(?:database disk image is malformed|malformed database schema"
    r"|file is not a database)[^\[\n]{0,160}"
)


_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
_MLFLOW_TABLES = {"alembic_version", "experiments", "runs"}


@functools.lru_cache(maxsize=8)
def _quick_check(database: str, inode: int, size: int, mtime_ns: int) -> Optional[str]:
    """SQLite's ``PRAGMA quick_check`` of a store whose header looks whole (a cut on a page
    boundary, a page overwritten), through a read-only connection that changes nothing:
    0.05-0.1 s for a 50 MB store in the page cache, 0.7 s from disk. Cached for one state
    of the file: each job of a sweep is checked against the same store."""
    try:
        with closing(
            sqlite3.connect(f"{Path(database).absolute().as_uri()}?mode=ro", uri=True)
        ) as db:
            rows = db.execute("PRAGMA quick_check(5)").fetchall()
            tables = {name for (name,) in db.execute(_TABLES)}
    except sqlite3.Error as error:
        # Anything else (locked by a writer, a hot journal only a writer can roll back) is
        # for MLflow to meet as it opens the store.
        return _damaged(database, error)
    problems = [
        line for (row,) in rows for line in str(row).splitlines() if not line.startswith("***")
    ]
    if problems == ["ok"]:
        # Another program's database: MLflow would add its own tables to it.
        if tables and not _MLFLOW_TABLES <= tables:
            named = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
            return f"{database} is another program's SQLite database (tables {named}), not MLflow's"
        return None
    more = " (and more)" if len(problems) > 1 else ""
    return (
        f"{database} is damaged: SQLite's quick_check says {problems[0][:200]!r}{more}: {DAMAGED}"
    )


def _damaged(database: str, error: BaseException) -> Optional[str]:
    words = SQLITE_DAMAGE.search(str(error))
    return (
        f"{database} is damaged: SQLite says {words.group().strip()!r}: {DAMAGED}"
        if words
        else None
    )


def damaged_store(error: BaseException, uri: Optional[str]) -> Optional[str]:
    """Why the SQLite file of the store at ``uri`` is damaged when ``error`` (or an error it
    was raised from) is SQLite's saying so, else None: the last net of a command for damage
    not seen before MLflow opened the store."""
    database = sqlite_path(uri) if uri else None
    if database is None:
        return None
    for cause in causes(error):
        damaged = _damaged(str(database), cause)
        if damaged:
            return not_a_database(database) or damaged
    return None


def causes(error: Optional[BaseException]) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from (or while handling), each once."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def damaged_refusal(key: str, uri: str, problem: str) -> str:
    """A command's one line for the store at ``uri`` (named by ``key``) that
    ``not_a_database`` or ``damaged_store`` found damaged."""
    return f"{key}: {uri}: {problem}; expected an MLflow store SQLite can read"


def exit_if_damaged(prog: str, key: str, uri: Optional[str], error: Exception) -> int:
    """A command's last net, in its ``except Exception``: where ``error`` is SQLite's word
    that the store at ``uri`` (named by ``key``) is damaged, the one line and exit status 2
    instead of SQLAlchemy's traceback; any other error goes on up."""
    uri = resolve_tracking_uri(uri)
    problem = damaged_store(error, uri)
    if problem is None:
        raise error
    print(f"{prog}: error: {damaged_refusal(key, uri, problem)}", file=sys.stderr)
    return 2


def missing_store(uri: str) -> Optional[Path]:
    """The SQLite file or file-store folder of ``uri`` if it does not exist, else None
    (also for a server's store, which only the server can check). ``MlflowClient`` creates
    a missing local store, empty, on its first call."""
    database = sqlite_path(uri)
    if database is not None:
        return database if not database.is_file() else None
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None
    folder = Path(url2pathname(parsed.path) if parsed.scheme else uri)
    return folder if not folder.is_dir() else None


class StoreError(ValueError):
    """A store, or a run in it, that a read command cannot use: ``problem`` and ``allowed``
    name the store searched, for a one-line error about the flag that named it."""

    def __init__(self, problem: str, allowed: str):
        self.problem, self.allowed = problem, allowed
        super().__init__(f"{problem}; expected {allowed}")


def existing_store(uri: str, hint: str = "pass --tracking-uri") -> "MlflowClient":
    """A client of the store at ``uri``, refused with StoreError when the store does not
    exist, before MLflow would create it."""
    missing = missing_store(uri)
    if missing is not None:
        raise StoreError(
            f"no MLflow store at {missing} (searched {uri}; nothing was created)",
            f"the id of a run in an existing store (run this where the job ran, or {hint})",
        )
    database = sqlite_path(uri)
    problem = not_a_database(database) if database is not None else None
    if problem is not None:
        raise StoreError(
            f"no MLflow store at {uri} ({problem})",
            f"the id of a run in an existing store ({hint})",
        )
    return open_client(uri)


def open_client(uri: str) -> "MlflowClient":
    """A client of the store at ``uri``, unchecked: MLflow creates a missing local store,
    empty, on its first call (``missing_store`` and ``existing_store`` look first)."""
    from mlflow import MlflowClient

    return MlflowClient(uri)


RUN_ID = re.compile(r"[0-9a-f]{32}")


def is_run_id(value: str) -> bool:
    """Is ``value`` shaped like an MLflow run id (32 lowercase hex digits)?"""
    return bool(RUN_ID.fullmatch(value))


def is_local_store(uri: str) -> bool:
    return sqlite_path(uri) is not None or urlparse(uri).scheme in ("", "file")


def quiet_artifact_downloads() -> None:
    """MLflow draws a progress bar for every download; in logs it is only noise."""
    if not sys.stderr.isatty():
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def python_command() -> str:
    """``python`` when the shell finds this interpreter by that name, else its full path: a
    virtual environment that is not activated is found only by its path."""
    if shutil.which("python") == sys.executable:
        return "python"
    return shlex.quote(sys.executable)


@contextmanager
def sqlite_lock(uri: str) -> Iterator[None]:
    """Processes on this machine take turns with a SQLite database at ``uri`` (a lock file
    beside it) while one may be creating it: two sweeps started together would both migrate
    a fresh store, and one fail (docs/design.md#mlflow-concurrent-first-use)."""
    database = sqlite_path(uri)
    if database is None:
        yield
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{database}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store_client(uri: str) -> "MlflowClient":
    """A client of the store at ``uri``; a new SQLite store's tables are created while this
    process holds the lock (MlflowClient creates them as it opens the store)."""
    with sqlite_lock(uri):
        client = open_client(uri)
        client.search_experiments(max_results=1)
    return client


def ensure_experiment(client: "MlflowClient", name: str) -> str:
    """Return the id of experiment ``name``, creating it (and its artifact folder) if new;
    the first use of a fresh store creates its tables, under the lock."""
    db = sqlite_path(client.tracking_uri)
    with sqlite_lock(client.tracking_uri):
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            if EXPERIMENT_KIND_TAG not in experiment.tags:  # a kind the user chose stays
                client.set_experiment_tag(
                    experiment.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND
                )
            return experiment.experiment_id
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
        return client.create_experiment(
            name,
            artifact_location=(db.parent / "mlartifacts" / safe).as_uri() if db else None,
            tags={EXPERIMENT_KIND_TAG: TRAINING_KIND},
        )
