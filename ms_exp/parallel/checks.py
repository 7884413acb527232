"""Checks of the ``parallel`` group: device and worker counts, the launch style (the keys
each style reads, the device it needs, the Ascend rank table; ms_exp/job/launch_plan.py
renders the styles), msrun's addresses and ports (free, and not shared by jobs a launcher
runs at the same time), and shard strategies against the network the job builds (the one
check here that imports MindSpore: it builds the network to read its operators' shapes)."""

import json
import shutil
import socket
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from omegaconf import DictConfig

from ms_exp.config.errors import ConfigError, InvalidConfig, positive, require
from ms_exp.config.paths import inside_run_dir
from ms_exp.data.build import declared_spec, loader_settings
from ms_exp.parallel.launcher_config import MPIRUN, MSRUN, RANK_TABLE, is_distributed, launch_style

# Launchers that run several jobs of a sweep at the same time on this machine.
CONCURRENT_LAUNCHERS = ("concurrent", "joblib", "submitit_local", "pool")
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


def validate_parallel(cfg: DictConfig) -> None:
    if cfg.mode == "stand_alone":
        require(
            cfg.device_num == 1, "parallel.device_num", cfg.device_num, "1 for parallel=stand_alone"
        )
        return
    require(cfg.device_num >= 1, "parallel.device_num", cfg.device_num, "an integer >= 1")
    fusion = list(cfg.all_reduce_fusion_config)
    require(
        all(a < b for a, b in zip([0] + fusion, fusion)),
        "parallel.all_reduce_fusion_config",
        fusion,
        "increasing positive gradient indices, e.g. [20, 35]",
    )
    launcher = cfg.launcher
    inside_run_dir("parallel.launcher.log_dir", launcher.log_dir)
    workers = launcher.worker_num or cfg.device_num
    require(
        workers == cfg.device_num,
        "parallel.launcher.worker_num",
        launcher.worker_num,
        f"null or parallel.device_num ({cfg.device_num}): one worker per device",
    )
    validate_style_keys(cfg)
    local = launcher.local_worker_num or workers
    require(
        1 <= local <= workers,
        "parallel.launcher.local_worker_num",
        launcher.local_worker_num,
        f"null or an integer from 1 to {workers}",
    )
    nodes = -(-workers // local)
    if nodes > 1:
        require(
            0 <= launcher.node_rank < nodes,
            "parallel.launcher.node_rank",
            launcher.node_rank,
            f"this node's rank, 0 to {nodes - 1} ({workers} workers, {local} on each node)",
        )
    else:
        # msrun starts its scheduler where master_addr points; with every worker here an
        # address of another machine (one no socket binds to here) makes them wait
        # cluster_time_out for nobody.
        address = launcher.master_addr
        require(
            is_local_address(address) or port_is_free(address, 0),
            "parallel.launcher.master_addr",
            launcher.master_addr,
            f"an address of this machine, e.g. 127.0.0.1, when all {workers} workers run "
            "here (set parallel.launcher.local_worker_num to spread them over nodes)",
        )
        require(
            launcher.node_rank in (-1, 0),
            "parallel.launcher.node_rank",
            launcher.node_rank,
            "-1 or 0 when every worker is on this node",
        )
    if launcher.master_port is None:
        # Each node would choose its own port; the ranks of other nodes could not find it.
        require(
            nodes == 1,
            "parallel.launcher.master_port",
            None,
            f"a port from 1024 to 65535 when the workers span {nodes} nodes (every "
            "node's msrun must reach the same scheduler; null chooses a free port on "
            "one node only)",
        )
    else:
        require(
            1024 <= launcher.master_port <= 65535,
            "parallel.launcher.master_port",
            launcher.master_port,
            "a port from 1024 to 65535, or null for a free one",
        )
    positive("parallel.launcher", launcher, "cluster_time_out")
    require(
        launcher.join_timeout >= 0,
        "parallel.launcher.join_timeout",
        launcher.join_timeout,
        "seconds >= 0",
    )


def validate_master_port_free(cfg: DictConfig) -> None:
    """Checked after every other key: a port other processes hold comes and goes, and must
    not hide a mistake in the config itself."""
    if cfg.mode == "stand_alone" or launch_style(cfg) != "msrun":
        return  # only msrun listens on the master port
    launcher = cfg.launcher
    if launcher.master_port is None:
        return  # chosen free when the job launches (ms_exp/job/launch_plan.py)
    if launcher.node_rank in (-1, 0) and is_local_address(launcher.master_addr):
        require(
            port_is_free(launcher.master_addr, launcher.master_port),
            "parallel.launcher.master_port",
            launcher.master_port,
            f"a free port (another process is listening on {launcher.master_addr}:"
            f"{launcher.master_port})",
        )


def is_local_address(address: str) -> bool:
    return address in ("127.0.0.1", "localhost", "::1") or address.startswith("127.")


def port_is_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def validate_shard_strategies(cfg: DictConfig) -> None:
    """Check ``parallel.strategies`` against the network the job will build: the operator
    exists, one tuple per input of the right length, factors divide their dimensions and
    the product divides device_num (MindSpore checks these only once the graph compiles)."""
    from ms_exp.models import create_network
    from ms_exp.parallel.layout import operator_strategies

    network = create_network(cfg.model, declared_spec(cfg.dataset))
    try:
        operator_strategies(  # raises StrategyError naming the first bad operator
            network,
            cfg.parallel.strategies,
            cfg.parallel.device_num,
            batch_size=loader_settings(cfg.dataset)["batch_size"],
        )
    except InvalidConfig as error:
        raise InvalidConfig(
            f"parallel.strategies: {error}; expected for each operator of the "
            "network one shard tuple per input, each factor dividing its "
            "dimension, the product dividing parallel.device_num "
            f"({cfg.parallel.device_num})"
        ) from None


def concurrent_master_ports(configs: Sequence[DictConfig]) -> None:
    """Distributed jobs that a launcher runs at the same time must not share a master
    port: the second job's msrun cannot bind it, or its ranks join the first job's cluster.
    Only ports set explicitly can be shared; each job left at null chooses its own."""
    if not configs:
        return
    hydra_cfg = configs[0].hydra
    launcher = hydra_cfg.runtime.choices.get("hydra/launcher")
    n_jobs = hydra_cfg.launcher.get("n_jobs", 2)
    if launcher not in CONCURRENT_LAUNCHERS or n_jobs == 1:
        return
    first_job: Dict[Tuple[str, int], int] = {}  # (address, port) -> the job using it
    for number, cfg in enumerate(configs):
        if cfg.parallel.mode == "stand_alone" or launch_style(cfg.parallel) != "msrun":
            continue
        port = cfg.parallel.launcher.master_port
        if port is None:
            continue
        address = (cfg.parallel.launcher.master_addr, port)
        if address in first_job:
            raise ConfigError(
                "parallel.launcher.master_port",
                port,
                f"a different port for each distributed job that "
                f"hydra/launcher={launcher} runs at the same time (jobs "
                f"{first_job[address]} and {number} both use {port}; sweep it "
                f"too, e.g. parallel.launcher.master_port={port},{port + 1})",
            )
        first_job[address] = number


def validate_style_keys(parallel_cfg: DictConfig) -> None:
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


def validate_launch_style(cfg: DictConfig) -> None:
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
