"""Keep what the user saw: everything printed during a job also goes to a file in its run
directory (MindSpore's LossMonitor and TimeMonitor print rather than log)."""
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO


class _Tee:
    def __init__(self, stream: TextIO, copy: TextIO):
        self._stream, self._copy = stream, copy

    # A logging handler created during a job (MindSpore's, on its first warning) keeps this
    # object after the job has closed its copy; later jobs of a sweep still reach the console.
    def write(self, text: str) -> int:
        if not self._copy.closed:
            self._copy.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        if not self._copy.closed:
            self._copy.flush()
        self._stream.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding... of the real stream
        return getattr(self._stream, name)


@contextmanager
def tee_output(path: Path) -> Iterator[None]:
    stdout, stderr = sys.stdout, sys.stderr
    with open(path, "a", encoding="utf-8", buffering=1) as copy:
        sys.stdout, sys.stderr = _Tee(stdout, copy), _Tee(stderr, copy)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = stdout, stderr
