"""What a job's console shows and keeps: everything printed during a job also goes to a file
in its run directory (MindSpore's LossMonitor and TimeMonitor print rather than log), and of
a distributed job's launcher only the lines a user reads (:class:`LauncherFilter`): rank 0's
output, one copy of each notice, and the MindSpore warnings worth acting on; the rest stays
in the rank logs and the launcher's own log."""

import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Set, TextIO


class _Tee:
    def __init__(self, stream: TextIO, copy: TextIO):
        self._stream, self._copy = stream, copy

    # A logging handler created during a job (MindSpore's, on its first warning) keeps this
    # object after the job has closed its copy; later jobs of a sweep still reach the console.
    def write(self, text: str) -> int:
        self._to_copy(self._copy.write, text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._to_copy(self._copy.flush)
        self._stream.flush()

    def _to_copy(self, call: Callable[..., object], *args: Any) -> None:
        # A full disk must not turn every print into an error that hides the job's own.
        if self._copy.closed:
            return
        try:
            call(*args)
        except OSError as error:
            _give_up_copy(self._copy, error, self._stream)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding... of the real stream
        return getattr(self._stream, name)


def _give_up_copy(copy: TextIO, error: OSError, stream: TextIO) -> None:
    try:
        copy.close()
    except OSError:
        pass
    stream.write(
        f"ms_exp: warning: {copy.name}: {error.strerror or error}; the console is "
        "no longer copied there\n"
    )


@contextmanager
def tee_output(path: Path) -> Iterator[None]:
    stdout, stderr = sys.stdout, sys.stderr
    copy = open(path, "a", encoding="utf-8", buffering=1)
    sys.stdout, sys.stderr = _Tee(stdout, copy), _Tee(stderr, copy)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        try:
            copy.close()
        except OSError as error:
            _give_up_copy(copy, error, stderr)


# A MindSpore log line: "[WARNING] DISTRIBUTED(pid,thread,python):time [file:line] Func] text".
_MINDSPORE_LOG = re.compile(r"^\[(DEBUG|INFO|WARNING|ERROR|CRITICAL|EXCEPTION)\] [A-Z_]+\(")
_SHOWN_LEVELS = ("ERROR", "CRITICAL", "EXCEPTION")  # a failure is always shown

# The launcher's lines (msrun's own, and rank 0's log it copies) that do not reach the
# console; first match wins. Each stays in the launcher's log (LAUNCHER_LOG) or the rank's.
# A pattern with a notice is shown once as that notice instead.
_RULES = (
    # msrun's line per process it starts: ms_exp says once where the rank logs are.
    (r"^Start (scheduler|worker) process", None),
    # msrun saying it waits, and that it copies only rank 0's log, as ms_exp asked it to.
    (r"Distributed job is spawned|doesn't contain this worker", None),
    # The ranks retrying until msrun's scheduler answers: dozens of lines on a busy machine,
    # all normal unless they never end (cluster_time_out then ends the job with an error).
    (
        r"Topology build timed out|Failed to connect to the meta server|Failed to register and "
        r"try to reconnect|\] Connect\] Connection \d+ source",
        "ranks are still joining the cluster; MindSpore retries for up to "
        "parallel.launcher.cluster_time_out seconds",
    ),
    # Rank 0 losing its connection to a rank that died: the job's own lines name that rank
    # and the signal that ended it (ms_exp/job/rank_failures.py).
    (r"Client connected end of file", None),
    # The cluster and its communication group forming as they should.
    (
        r"Cluster is successfully initialized|This node \d+ rank id|TcpConnection is constructed"
        r"|Event base dispatch success|CreateCommunicationGroup|collective communication lib"
        r"|start sync start",
        None,
    ),
)
_COMPILED = tuple((re.compile(pattern), notice) for pattern, notice in _RULES)

LAUNCHER_LOG = "launcher.log"


class LauncherFilter:
    """Which of a launcher's output lines the console shows (:meth:`shown`): all but the
    ones ``_RULES`` names, and MindSpore's INFO and DEBUG lines (a raised verbosity is
    read in the logs, where it is complete). A MindSpore warning no rule names is shown:
    one the user may need to act on (a rule is added here for one that is noise)."""

    def __init__(self) -> None:
        self._notices_shown: Set[str] = set()

    def shown(self, line: str) -> Optional[str]:
        """The text to print for ``line``, or None."""
        level = _MINDSPORE_LOG.match(line)
        if level and level.group(1) in _SHOWN_LEVELS:
            return line
        for pattern, notice in _COMPILED:
            if pattern.search(line):
                if notice is None or notice in self._notices_shown:
                    return None
                self._notices_shown.add(notice)
                return notice + "\n"
        if level and level.group(1) in ("INFO", "DEBUG"):
            return None
        return line
