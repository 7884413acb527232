"""What the ``parallel`` group says about the launcher, read without starting anything:
whether the job is distributed, which launch style starts its ranks, and where their logs go.

Pure config helpers, so the preflight checks can read them without the job package (which
runs processes) and the plan, the supervisor and the ranks all read the group alike.
"""

from pathlib import Path

MSRUN, MPIRUN, RANK_TABLE = "msrun", "mpirun", "rank_table"


def is_distributed(parallel_cfg) -> bool:
    return parallel_cfg.mode != "stand_alone"


def launch_style(parallel_cfg) -> str:
    style = parallel_cfg.launcher.style
    return getattr(style, "value", style)


def log_dir(parallel_cfg, run_dir: Path) -> Path:
    path = Path(parallel_cfg.launcher.log_dir).expanduser()
    return path if path.is_absolute() else Path(run_dir) / path
