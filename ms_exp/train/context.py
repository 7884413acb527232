"""The MindSpore runtime context of the training-flow tutorial's ``init_env``.

Seed, device target, mode, device id and parallel mode. On CPU, where MindSpore 2.10 refuses
semi-auto and auto parallel, those run as DATA_PARALLEL (the same math), their layouts
emulated when checkpoints are written (docs/design.md#semi-auto-refused-on-cpu).
"""

import gc
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator

import mindspore as ms
from omegaconf import DictConfig

from ms_exp.config.schema import DEVICE_TARGETS
from ms_exp.parallel.ranks import environment_device_id

PARALLEL_MODES = {
    "data": ms.ParallelMode.DATA_PARALLEL,
    "semi_auto": ms.ParallelMode.SEMI_AUTO_PARALLEL,
    "auto": ms.ParallelMode.AUTO_PARALLEL,
}


@contextmanager
def collector_skips_older_objects() -> Iterator[None]:
    """MindSpore runs a full garbage collection before each graph it compiles (a job's train
    and eval graphs, each MindIR export): 0.2 s each over every object of a process holding
    MindSpore's, Hydra's and ms_exp's modules. Inside this block those collections skip what
    existed when it began (gc.freeze); that is collected again once it ends, so the next job
    of a sweep in the same process still frees what this one left
    (docs/design.md#compile-collections)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass(frozen=True)
class Runtime:
    device_target: str
    mode: str
    device_id: int
    rank_id: int
    group_size: int
    parallel_mode: str  # the parallel group's mode: stand_alone, data, semi_auto, auto
    emulated: bool = False  # semi_auto/auto trained data parallel on CPU
    shard_data: bool = False  # each rank reads its own shard of the training set


def strategy_ckpt_config(strategy_cfg: DictConfig) -> Dict[str, Any]:
    """``strategy_ckpt_config`` for set_auto_parallel_context; empty paths are left out."""
    config: Dict[str, Any] = {"only_trainable_params": strategy_cfg.only_trainable_params}
    for key in ("save_file", "load_file"):
        if strategy_cfg[key]:
            config[key] = strategy_cfg[key]
    return config


def is_emulated(parallel_mode: str, device_target: str) -> bool:
    return parallel_mode in ("semi_auto", "auto") and device_target == "CPU"


def auto_parallel_context(
    parallel_cfg: DictConfig, strategy_cfg: DictConfig, device_target: str
) -> Dict[str, Any]:
    """Arguments of ``set_auto_parallel_context`` for a distributed ``parallel_cfg``."""
    emulated = is_emulated(parallel_cfg.mode, device_target)
    mode = "data" if emulated else parallel_cfg.mode
    context: Dict[str, Any] = {
        "parallel_mode": PARALLEL_MODES[mode],
        "gradients_mean": parallel_cfg.gradients_mean,
        "device_num": parallel_cfg.device_num,
    }
    if parallel_cfg.all_reduce_fusion_config:
        context["all_reduce_fusion_config"] = list(parallel_cfg.all_reduce_fusion_config)
    if mode in ("semi_auto", "auto"):
        context["full_batch"] = parallel_cfg.full_batch
        context["strategy_ckpt_config"] = strategy_ckpt_config(strategy_cfg)
    if mode == "auto":
        context["search_mode"] = parallel_cfg.search_mode.value
    return context


def init_env(
    trainer_cfg: DictConfig, parallel_cfg: DictConfig, strategy_cfg: DictConfig
) -> Runtime:
    ms.set_seed(trainer_cfg.seed)
    target = trainer_cfg.device_target or "None"
    if target not in DEVICE_TARGETS:  # validate() already refused it; kept as init_env does
        raise ValueError(f"Invalid device_target: {target}, should be in {list(DEVICE_TARGETS)}")
    if target == "None":  # MindSpore's own choice: the device its package was built for
        target = ms.get_context("device_target")
    mode = trainer_cfg.mode.value
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    # On CPU there is one device and no device id to choose, as init_env does. Elsewhere a
    # launcher's DEVICE_ID (msrun: the local rank; rank table: START_ID + rank) comes first.
    device_id = 0 if target == "CPU" else environment_device_id(trainer_cfg.device_id)
    try:
        ms.set_device(device_target=target, device_id=device_id)
    except RuntimeError as error:
        # Kernels already ran on the CPU in this process: MindSpore refuses set_device, and
        # the CPU, its one device, is already the one the job asks for.
        if target != "CPU" or "runtime has been initialized" not in str(error):
            raise
    if parallel_cfg.mode == "stand_alone":
        # A stand-alone run has no sharding, so MindSpore writes no strategy file for it;
        # the settings are handed over all the same so the context matches the config.
        ms.set_auto_parallel_context(
            parallel_mode=ms.ParallelMode.STAND_ALONE,
            strategy_ckpt_config=strategy_ckpt_config(strategy_cfg),
        )
        return Runtime(target, mode, device_id, 0, 1, "stand_alone")

    from mindspore.communication import get_group_size, get_rank, init

    init()
    group_size = get_group_size()
    if parallel_cfg.device_num != group_size:
        raise ValueError(
            f"the setting device_num: {parallel_cfg.device_num} not equal to the "
            f"real group_size: {group_size}"
        )
    emulated = is_emulated(parallel_cfg.mode, target)
    ms.set_auto_parallel_context(**auto_parallel_context(parallel_cfg, strategy_cfg, target))
    if emulated:
        print(
            f"parallel={parallel_cfg.mode} on CPU: MindSpore refuses this mode on CPU, so "
            "ms_exp trains the same math data parallel over the same ranks"
            + (
                " and writes each rank's checkpoint slice and the strategy file as "
                "MindSpore lays them out"
                if parallel_cfg.mode == "semi_auto"
                else " with data-parallel layouts (every parameter whole on every rank)"
            ),
            flush=True,
        )
    shard_data = not (
        parallel_cfg.mode in ("semi_auto", "auto") and parallel_cfg.full_batch and not emulated
    )
    return Runtime(
        target, mode, device_id, get_rank(), group_size, parallel_cfg.mode, emulated, shard_data
    )
