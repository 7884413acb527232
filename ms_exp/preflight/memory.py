"""Sizes checked against this machine's memory where a lower bound is cheap to compute from
the config: one batch, the samples a dataset makes in memory, a built-in network's
parameters, each as float32 and nothing more, so a config refused here could never have
trained (the job would fail with a MemoryError after its run folder and MLflow run exist)."""

import math
import os
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ms_exp.config.errors import ConfigError
from ms_exp.data.build import declared_shape
from ms_exp.data.options import dataset_name, dataset_option
from ms_exp.data.spec import IMAGES
from ms_exp.models.options import model_option

FLOAT32_BYTES = 4
# A container's limit, when lower than the machine's memory (cgroup v2, then v1; "max" or a
# huge number: none).
CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def machine_memory() -> Optional[int]:
    """Bytes of memory this process may use at most: the machine's physical memory, or its
    container's limit when lower; None where neither can be read."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    for path in CGROUP_LIMITS:
        try:
            total = min(total, int(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return total


def size_text(size: int) -> str:
    """``size`` bytes in binary units with one decimal: 5.7 TiB."""
    power = min(max(0, int(math.log(max(size, 1), 1024))), len(UNITS) - 1)
    return f"{size / 1024**power:.1f} {UNITS[power]}" if power else f"{size} bytes"


def validate_memory(cfg: DictConfig) -> None:
    """One batch, the samples a dataset makes in memory, then the network's parameters."""
    memory = machine_memory()
    if memory is None:
        return
    have = f"this machine's {size_text(memory)} of memory"
    option = dataset_option(cfg.dataset)
    if option is not None:
        shape, _ = option.declared(cfg.dataset)
        sample = math.prod(shape) * FLOAT32_BYTES
        shown = "x".join(str(size) for size in shape)
        batch = cfg.dataset.batch_size
        if batch * sample > memory:
            what = "images" if option.inputs == IMAGES else "samples"
            fit = memory // sample
            if fit == 0 and option.shape_key is not None:  # one sample alone does not fit
                raise ConfigError(
                    option.shape_key,
                    _value(cfg, option.shape_key),
                    f"{what} of which a batch fits in {have} (one {what[:-1]} of "
                    f"{shown} is {size_text(sample)} as float32, a batch of "
                    f"dataset.batch_size={batch} {size_text(batch * sample)})",
                )
            most = f"{fit} {what[:-1] if fit == 1 else what}"
            raise ConfigError(
                "dataset.batch_size",
                batch,
                f"at most {most} of {shown} a batch, what "
                f"fits in {have} (a batch of {batch} is {size_text(batch * sample)} as "
                "float32)",
            )
        if option.in_memory is not None:
            counts = option.in_memory(cfg.dataset)
            total = sum(counts.values())
            if total * sample > memory:
                key = max(counts, key=lambda name: counts[name])
                raise ConfigError(
                    key,
                    _value(cfg, key),
                    f"samples that fit in {have} "
                    f"(dataset={dataset_name(cfg.dataset)} makes its {total} "
                    f"samples ({' + '.join(counts)}) of {shown} in memory: at "
                    f"least {size_text(total * sample)} as float32)",
                )
    model = model_option(cfg.model)
    if model.parameters is not None:
        shape, classes = declared_shape(cfg.dataset)
        key, count = model.parameters(cfg, tuple(shape), classes)
        if count * FLOAT32_BYTES > memory:
            raise ConfigError(
                key,
                _value(cfg, key),
                f"a network whose parameters fit in {have} "
                f"(model={model.name} would have {count} parameters: at least "
                f"{size_text(count * FLOAT32_BYTES)} as float32)",
            )


def _value(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, key)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
