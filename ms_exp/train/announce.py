"""What a rank says about how it trains, on the console and as tags of the run: where the
parameters are (placement) and which loop and precision train them."""

from typing import Any

from omegaconf import DictConfig

from ms_exp.config.amp import needs_overflow_check
from ms_exp.placement.tables import Placement, describe_placement, host_tables
from ms_exp.tracking.interface import RunTracker


def announce_placement(
    cfg: DictConfig, network: Any, placement: Placement, device_target: str, tracker: RunTracker
) -> None:
    """The console line, and for host tables which parameters and how many bytes (tag
    ms_exp.placement.host_params, metric placement/host_table_mb)."""
    tables = host_tables(network, placement)
    names = [table.name for table in tables]
    host_bytes = sum(table.nbytes for table in tables)
    print(describe_placement(cfg.placement, device_target, host_bytes), flush=True)
    tracker.set_tags({"ms_exp.placement": cfg.placement.mode})
    if names:
        tracker.set_tags({"ms_exp.placement.host_params": ",".join(names)})
        tracker.log_metrics({"placement/host_table_mb": host_bytes / 2**20}, step=0)


def announce_loop(cfg: DictConfig, tracker: RunTracker) -> None:
    """The loop and its precision on the console and as tags (the params hold them too)."""
    amp = cfg.amp
    scale = amp.loss_scale.value
    if scale != "none":
        scale = f"{scale} {amp.loss_scale_value:g}" + (
            " (overflowing steps skipped)" if needs_overflow_check(amp) else ""
        )
    print(
        f"trainer.loop={cfg.trainer.loop.value}, amp level {amp.level.value}, loss scale {scale}",
        flush=True,
    )
    tracker.set_tags({"ms_exp.loop": cfg.trainer.loop.value})
