"""Checks of ``parallel.launcher.style`` (ms_exp/job/launch_plan.py renders the styles):
the keys each style reads, the device it needs, and the Ascend rank table."""

import json
import shutil
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ms_exp.config.errors import ConfigError, require
from ms_exp.parallel.launcher_config import MPIRUN, MSRUN, RANK_TABLE, is_distributed, launch_style

# What each style needs of the device, and why, with MindSpore 2.10 (see LaunchStyle;
# docs/design.md#mpirun-on-cpu).
STYLE_TARGETS = {
    MPIRUN: (("GPU", "Ascend"), "MindSpore 2.10 initialises no CPU communication under mpirun"),
    RANK_TABLE: (("Ascend",), "rank-table ranks talk over HCCL, which only Ascend has"),
}
# Keys read by one style only: the style, and the value that means "unset".
STYLE_ONLY_KEYS: Dict[str, Tuple[str, Any]] = {
    "rank_table_file": (RANK_TABLE, None),
    "start_device_id": (RANK_TABLE, 0),
    "mpirun_args": (MPIRUN, []),
    "local_worker_num": (MSRUN, None),
    "node_rank": (MSRUN, -1),
}


def validate_style_keys(parallel_cfg) -> None:
    """Refuse keys the chosen launch style does not read (checked before msrun's own)."""
    launcher = parallel_cfg.launcher
    style = launch_style(parallel_cfg)
    for key, (owner, unset) in STYLE_ONLY_KEYS.items():
        value = launcher[key]
        value = list(value) if owner == MPIRUN else value
        require(
            style == owner or value == unset,
            f"parallel.launcher.{key}",
            value,
            f"{'null' if unset is None else unset} with "
            f"parallel.launcher.style={style} (only style={owner} reads it)",
        )


def validate_launch_style(cfg) -> None:
    """Refuse, before anything starts, a launch style this job cannot run here. ``cfg``:
    the whole config (the device target counts)."""
    if not is_distributed(cfg.parallel):
        return
    launcher = cfg.parallel.launcher
    style = launch_style(cfg.parallel)
    if style == MSRUN:
        return
    target = cfg.trainer.device_target or "None"
    allowed, reason = STYLE_TARGETS[style]
    require(
        target in allowed,
        "parallel.launcher.style",
        style,
        f"trainer.device_target={' or '.join(allowed)} with it "
        f"({reason}; trainer.device_target is {target}), or "
        "parallel.launcher.style=msrun",
    )
    if style == MPIRUN:
        require(
            shutil.which("mpirun") is not None,
            "parallel.launcher.style",
            style,
            "mpirun on PATH (install Open MPI, e.g. apt-get install openmpi-bin), or "
            "parallel.launcher.style=msrun",
        )
        return
    validate_rank_table(launcher.rank_table_file, cfg.parallel.device_num)
    require(
        launcher.start_device_id >= 0,
        "parallel.launcher.start_device_id",
        launcher.start_device_id,
        "an integer >= 0 (the first rank's DEVICE_ID)",
    )


def validate_rank_table(path: Optional[str], ranks: int) -> None:
    """The file exists, is readable JSON, and lists one device per rank (MindSpore's rank
    table: ``server_list[].device[]``)."""
    key = "parallel.launcher.rank_table_file"
    if path is None:
        raise ConfigError(
            key,
            path,
            "the path of the Ascend rank table (hccl_<n>p_*.json) "
            "with parallel.launcher.style=rank_table",
        )
    resolved = Path(path).expanduser().resolve()
    require(resolved.is_file(), key, path, f"a readable rank table file ({resolved} is not a file)")
    try:
        table = json.loads(resolved.read_text())
    except OSError as error:
        raise _rank_table_error(path, f"{resolved} cannot be read: {error.strerror}") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise _rank_table_error(path, f"{resolved} is not JSON: {error}") from None
    try:
        servers = len(table["server_list"])
        devices = sum(len(server["device"]) for server in table["server_list"])
    except (KeyError, TypeError):
        raise _rank_table_error(
            path, f"{resolved} has no server_list[].device[] of MindSpore's rank table"
        ) from None
    # As the tutorial's script, ms_exp starts every rank here, with RANK_ID 0 to RANK_SIZE-1.
    require(
        servers == 1,
        key,
        path,
        f"a rank table of one server, this one (it lists {servers}); on several servers "
        "use parallel.launcher.style=msrun or mpirun",
    )
    require(
        devices == ranks,
        key,
        path,
        f"a rank table listing {ranks} devices, one per rank (it lists {devices})",
    )


def _rank_table_error(path: str, reason: str) -> ConfigError:
    return ConfigError(
        "parallel.launcher.rank_table_file", path, f"a readable rank table file ({reason})"
    )
