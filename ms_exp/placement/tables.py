"""The ``placement`` group: where embedding tables and their optimizer state live.

``device`` keeps everything on the training device. ``host_device`` is the hybrid-training
tutorial: embedding tables (``nn.EmbeddingLookup(target="CPU")``) and the optimizers that
update them (``optimizer.target = "CPU"``) on the host, the dense layers on the device.
"""

from dataclasses import dataclass
from typing import Any, List

from omegaconf import DictConfig


@dataclass(frozen=True)
class Placement:
    host_tables: bool

    @property
    def embedding_target(self) -> str:
        """``target`` of ``nn.EmbeddingLookup``."""
        return "CPU" if self.host_tables else "DEVICE"

    def place_sparse_optimizer(self, optimizer: Any) -> None:
        """Run ``optimizer``'s update on host kernels when the tables live on the host."""
        if self.host_tables:
            optimizer.target = "CPU"


def create_placement(placement_cfg: DictConfig) -> Placement:
    return Placement(host_tables=placement_cfg.mode == "host_device")


def describe_placement(placement_cfg: DictConfig, device_target: str, host_bytes: int = 0) -> str:
    """One console line saying where the run's parameters are."""
    if placement_cfg.mode == "device":
        return f"placement=device: every parameter and optimizer state on {device_target}"
    tables = f"embedding tables ({readable_size(host_bytes)})" if host_bytes else "embedding tables"
    line = (
        f"placement=host_device: {tables} and their sparse optimizers (FTRL, LazyAdam) "
        f"on the host, dense layers on {device_target}"
    )
    if device_target == "CPU":
        line += (
            "; on a CPU-only machine host and device are the same memory and "
            "processor, so only the kernels differ (host EmbeddingLookup, "
            "FusedSparseFtrl, FusedSparseLazyAdam)"
        )
    return line


def readable_size(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 2**10:.1f} KiB"


def host_tables(network: Any, placement: Placement) -> List[Any]:
    """The network's parameters that live on the host under ``placement``."""
    if not placement.host_tables:
        return []
    from mindspore import nn

    return [
        cell.embedding_table
        for _, cell in network.cells_and_names()
        if isinstance(cell, nn.EmbeddingLookup) and cell.target == "CPU"
    ]
