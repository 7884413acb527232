"""A pool worker's console lines, each marked with the job that printed it (``[#3 rho=0.4] ``):
the jobs of a pool run side by side and share the launcher's terminal.

The worker's file descriptors 1 and 2 are pipes to a small process of its own (this module
run as ``python -m``), which copies them to the console, marking each line. Everything the
worker prints is marked, MindSpore's C++ lines and its child processes' (the MLflow
sidecar) included, and a child that outlives the worker still has a reader. The worker says
which job runs by writing a mark record into both pipes, so a line is marked with the job
that was running when it was written. A run's ``console.log`` is written by the job's own
``sys.stdout``, before the pipe: unmarked.
"""

import os
import re
import select
import signal
import subprocess
import sys
import threading
from typing import List, Sequence, Tuple

# b"\0ms_exp.mark\0<mark>\0\n": a record no program prints.
_RECORD = b"\0ms_exp.mark\0"
_RECORDS = re.compile(rb"\0ms_exp\.mark\0([^\0]*)\0\n")
_LONGEST = 1024  # a longer "record" is output after all
_PIECES = re.compile(rb"[^\r\n]*[\r\n]|[^\r\n]+")  # cut after each line end
_COPIERS: List[subprocess.Popen] = []  # kept: each ends when its worker's output does
# A line without its end yet (a prompt, a bar redrawn after "\r") is shown once its writer
# has paused this long; until then it is held, so that another worker's copier, writing to
# the same console, cannot cut into it.
PAUSE_S = 0.2


def job_mark(number: int, overrides: Sequence[str]) -> str:
    """The mark of job ``number``'s lines: its number, as the pool's line about its start
    gives it, and its swept values, as its MLflow run is named."""
    from ms_exp.tracking.sweep import child_run_name

    name = child_run_name(list(overrides))
    return f"[#{number}{f' {name}' if name else ''}] "


def mark_record(mark: str) -> bytes:
    """What a worker writes into its output to mark the lines that follow ``mark``."""
    return _RECORD + mark.encode()[: _LONGEST // 2].replace(b"\0", b"") + b"\0\n"


class LineMarker:
    """One stream's bytes as the console shows them: ``mark`` inserted at the start of every
    line (after ``\\n``, and after ``\\r``, with which a progress bar redraws its line), the
    mark records taken out. Given on at once: a line without its end yet is not held back,
    only what may be the start of a mark record."""

    def __init__(self) -> None:
        self.mark = b""
        self._at_start = True
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        data, self._held = self._held + data, b""
        out = bytearray()
        start = 0
        for record in _RECORDS.finditer(data):
            out += self._marked(data[start : record.start()])
            self.mark = record.group(1)
            start = record.end()
        rest = data[start:]
        cut = _record_start(rest)
        rest, self._held = rest[:cut], rest[cut:]
        return bytes(out + self._marked(rest))

    def flush(self) -> bytes:
        """What is held at the stream's end: not a mark record after all."""
        held, self._held = self._held, b""
        return self._marked(held)

    def _marked(self, text: bytes) -> bytes:
        out = bytearray()
        for piece in _PIECES.findall(text):
            if self._at_start:
                out += self.mark
            out += piece
            self._at_start = piece[-1:] in (b"\n", b"\r")
        return bytes(out)


def _record_start(text: bytes) -> int:
    """Where a mark record not yet whole starts at the end of ``text`` (its length: none)."""
    head = text.rfind(_RECORD)
    if head >= 0 and len(text) - head < _LONGEST:
        return head
    for length in range(min(len(_RECORD) - 1, len(text)), 0, -1):
        if text.endswith(_RECORD[:length]):
            return len(text) - length
    return len(text)


def mark_output() -> None:
    """From now on, this process's fds 1 and 2 (and its children's) reach the console
    through a copying process that marks each line (:func:`set_mark`)."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    _COPIERS.append(
        subprocess.Popen(
            [sys.executable, "-m", __name__, str(err_read)], stdin=out_read, pass_fds=(err_read,)
        )
    )
    for read in (out_read, err_read):
        os.close(read)
    for write, fd in ((out_write, 1), (err_write, 2)):
        os.dup2(write, fd)  # inheritable: the children's output is marked too
        os.close(write)


def set_mark(mark: str) -> None:
    """The lines written from now on are marked ``mark``: what was printed before keeps the
    mark it had."""
    record = mark_record(mark)
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        stream.flush()
        _write_all(fd, record)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _copy(source: int, console: int) -> None:
    marker = LineMarker()
    held = b""
    while True:
        if held and not select.select([source], [], [], PAUSE_S)[0]:
            _write_all(console, held)
            held = b""
        data = os.read(source, 65536)
        if not data:
            break
        shown = held + marker.feed(data)
        cut = max(shown.rfind(b"\n"), shown.rfind(b"\r")) + 1
        _write_lines(console, shown[:cut])
        held = shown[cut:]
    _write_all(console, held + marker.flush())


def _write_lines(fd: int, data: bytes) -> None:
    """Whole lines, in writes the console's pipe keeps whole (PIPE_BUF bytes or less, but a
    longer line) beside the other copiers' writes."""
    while data:
        end = data.rfind(b"\n", 0, select.PIPE_BUF) + 1 or data.find(b"\n") + 1 or len(data)
        _write_all(fd, data[:end])
        data = data[end:]


def main(argv: List[str]) -> int:
    """Copy stdin to stdout and fd ``argv[0]`` to stderr, marked, until both end (every
    process holding the pipes is gone)."""
    # The worker's stop is for its job; this process ends when the output does.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    pairs: List[Tuple[int, int]] = [(0, 1), (int(argv[0]), 2)]
    threads = [threading.Thread(target=_copy, args=pair) for pair in pairs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
