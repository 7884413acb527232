"""The MindSpore runtime context of the training-flow tutorial's ``init_env``.

Seed, device target (None lets MindSpore pick the backend of the installed package), graph
or pynative mode, device id, and the parallel mode of the ``parallel`` group.
"""
from dataclasses import dataclass

import mindspore as ms

from ms_exp.config.validate import DEVICE_TARGETS


@dataclass(frozen=True)
class Runtime:
    device_target: str
    mode: str
    device_id: int
    rank_id: int
    group_size: int
    parallel_mode: str


def strategy_ckpt_config(strategy_cfg) -> dict:
    """``strategy_ckpt_config`` for set_auto_parallel_context; empty paths are left out."""
    config = {"only_trainable_params": strategy_cfg.only_trainable_params}
    for key in ("save_file", "load_file"):
        if strategy_cfg[key]:
            config[key] = strategy_cfg[key]
    return config


def init_env(trainer_cfg, parallel_cfg, strategy_cfg) -> Runtime:
    ms.set_seed(trainer_cfg.seed)
    target = trainer_cfg.device_target or "None"
    if target not in DEVICE_TARGETS:  # validate() already refused it; kept as init_env does
        raise ValueError(f"Invalid device_target: {target}, should be in {list(DEVICE_TARGETS)}")
    if target != "None":
        ms.set_context(device_target=target)
    mode = trainer_cfg.mode.value
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    target = ms.get_context("device_target")
    # On CPU there is one device and no device id to choose, as init_env does.
    device_id = 0 if target == "CPU" else trainer_cfg.device_id
    ms.set_device(device_target=target, device_id=device_id)
    if parallel_cfg.mode != "stand_alone":
        raise ValueError(f"parallel.mode={parallel_cfg.mode!r}: not supported by this build")
    # A stand-alone run has no sharding, so MindSpore writes no strategy file for it; the
    # settings are handed over all the same so the context matches what the config says.
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE,
                                 strategy_ckpt_config=strategy_ckpt_config(strategy_cfg))
    print("run standalone!", flush=True)
    return Runtime(device_target=target, mode=mode, device_id=device_id, rank_id=0,
                   group_size=1, parallel_mode=parallel_cfg.mode)
