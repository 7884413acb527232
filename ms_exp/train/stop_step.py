"""Where the ranks of a distributed job agree to stop on a signal, so they stop after the
same step.

A rank that saw the signal a step late would wait in that step's AllReduce for ranks that
have stopped, and fail without a checkpoint. So a rank that sees the signal at the end of
step N proposes N+1 in the run directory before it starts step N+1, and every rank stops
after the proposed step: that step's AllReduce orders the proposal before any rank ends it
(docs/design.md#stop-step-allreduce). The first proposal is the only one written.

The launching process removes the file before it starts the ranks; MindSpore is not
imported here.
"""

import os
from pathlib import Path
from typing import Optional

STOP_STEP_FILE = "stop_step"


def stop_step_file(run_dir: Path) -> Path:
    return Path(run_dir) / STOP_STEP_FILE


def clear_stop_step(run_dir: Path) -> None:
    stop_step_file(run_dir).unlink(missing_ok=True)


def propose_stop_step(path: Path, step: int) -> int:
    """Propose ``step``; return the step agreed on (an earlier proposal stands)."""
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_text(str(step))
    try:
        os.link(part, path)  # all of it or nothing, and never over another proposal
    except FileExistsError:
        pass
    finally:
        part.unlink(missing_ok=True)
    agreed = agreed_stop_step(path)
    return step if agreed is None else agreed


def agreed_stop_step(path: Path) -> Optional[int]:
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return None
