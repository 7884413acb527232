"""What the ``parallel`` group says about the launcher, read without starting anything:
whether the job is distributed, which launch style starts its ranks, and where their logs
go; pure config helpers, so the checks, the plan, the supervisor and the ranks read it alike."""

from pathlib import Path

from omegaconf import DictConfig

MSRUN, MPIRUN, RANK_TABLE = "msrun", "mpirun", "rank_table"


def is_distributed(parallel_cfg: DictConfig) -> bool:
    return parallel_cfg.mode != "stand_alone"


def launch_style(parallel_cfg: DictConfig) -> str:
    style = parallel_cfg.launcher.style
    return getattr(style, "value", style)


def log_dir(parallel_cfg: DictConfig, run_dir: Path) -> Path:
    path = Path(parallel_cfg.launcher.log_dir).expanduser()
    return path if path.is_absolute() else Path(run_dir) / path
