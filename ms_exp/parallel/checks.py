"""Checks of the ``parallel`` group: device and worker counts, msrun's addresses and ports
(free, and not shared by jobs a launcher runs at the same time), and shard strategies
against the network the job builds (the one check here that imports MindSpore: it builds
the network to read its operators' shapes)."""

import socket
from typing import Dict, Tuple

from ms_exp.config.errors import ConfigError, InvalidConfig, positive, require
from ms_exp.data.build import declared_spec, loader_settings
from ms_exp.parallel.launcher_config import launch_style
from ms_exp.preflight.launch_style import validate_style_keys
from ms_exp.preflight.paths import inside_run_dir

# Launchers that run several jobs of a sweep at the same time on this machine.
CONCURRENT_LAUNCHERS = ("concurrent", "joblib", "submitit_local", "pool")


def validate_parallel(cfg) -> None:
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
        # address of another machine makes them wait cluster_time_out for nobody.
        require(
            is_address_of_this_machine(launcher.master_addr),
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


def validate_master_port_free(cfg) -> None:
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


def is_address_of_this_machine(address: str) -> bool:
    """Whether a socket can be bound to ``address`` here (a name is resolved first; one that
    does not resolve, or an address of another machine, cannot)."""
    return is_local_address(address) or port_is_free(address, 0)


def port_is_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def validate_shard_strategies(cfg) -> None:
    """Check ``parallel.strategies`` against the network the job will build: the operator
    exists, one tuple per input of the right length, factors divide their dimensions and
    the product divides device_num (MindSpore checks these only once the graph compiles)."""
    from ms_exp.models import create_network
    from ms_exp.parallel.layout import validate_strategies

    network = create_network(cfg.model, declared_spec(cfg.dataset))
    try:
        validate_strategies(
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


def concurrent_master_ports(configs) -> None:
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
