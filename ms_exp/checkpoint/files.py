"""Checkpoint files of a run: where each rank's are, their names and sizes, and reading
them back whole: every checkpoint is written with MindSpore's CRC32 and read through
:func:`load_verified`, so a truncated or corrupt one is refused by name, not loaded wrong."""

from itertools import count
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import mindspore as ms

from ms_exp.config.errors import ConfigError

BEST_NAME = "best.ckpt"


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be read back whole; the message names the file."""


def load_verified(path: Path, **kwargs: Any) -> dict:
    """``load_checkpoint(path, crc_check=True)``, with a failure naming the file and why.

    MindSpore reports a CRC mismatch as "May not have permission to read it"."""
    try:
        return ms.load_checkpoint(str(path), crc_check=True, **kwargs)
    except (ValueError, RuntimeError, OSError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DamagedCheckpoint(
            f"checkpoint {path} is damaged (truncated or corrupt: MindSpore's "
            f"CRC check or parse failed: {reason})"
        ) from None


def verify_checkpoint(path: Path) -> None:
    """Raise DamagedCheckpoint unless ``path`` reads back whole. The CRC covers the whole
    file; only one entry is kept, so the weights are not held in memory for nothing."""
    entries = count()
    load_verified(path, choice_func=lambda name: next(entries) == 0)


def check_shapes(
    network: Any, weights: dict, key: str, value: Any, saved_in: str = "the checkpoint"
) -> None:
    """Refuse a checkpoint whose parameters have other shapes than the network's (MindSpore's
    load_param_into_net raises a RuntimeError of several sentences): one line naming what
    chose the checkpoint (``key``, ``value``), the first such parameter and both shapes.
    Parameters only one of them has are not compared."""
    for name, parameter in network.parameters_dict().items():
        saved = weights.get(name)
        if saved is not None and tuple(saved.shape) != tuple(parameter.shape):
            raise ConfigError(
                key,
                value,
                f"a checkpoint of the network the config builds ({name} is "
                f"{list(saved.shape)} in {saved_in}, {list(parameter.shape)} in the "
                "network: is an override such as model.* other than the run's?)",
            )


def checkpoint_position(path: Path, prefix: str) -> Optional[Tuple[int, int]]:
    """(epoch, step in epoch) of a ``<prefix>-<epoch>_<step>.ckpt`` name, else None."""
    epoch, _, step = path.stem[len(prefix) + 1 :].partition("_")
    if (
        path.name.startswith(prefix + "-")
        and path.suffix == ".ckpt"
        and epoch.isdigit()
        and step.isdigit()
    ):
        return int(epoch), int(step)
    return None


def numbered_checkpoints(directory: Path, prefix: str) -> List[Path]:
    """The ``<prefix>-<epoch>_<step>.ckpt`` files of ``directory``, oldest first."""
    found = [(checkpoint_position(p, prefix), p) for p in Path(directory).glob(f"{prefix}-*.ckpt")]
    return [p for position, p in sorted(x for x in found if x[0] is not None)]


def rank_dir(run_dir: Path, rank_id: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"rank_{rank_id}"


def checkpoint_bytes(run_dir: Path, prefix: str) -> Dict[int, int]:
    """Bytes of the checkpoints ``ModelCheckpoint`` left in each ``rank_<r>`` folder.

    ``best.ckpt`` and the ``-graph.meta`` file are not counted: they are the same whatever
    ``integrated_save`` says, and would hide the difference it makes."""
    sizes = {}
    for folder in (Path(run_dir) / "checkpoints").glob("rank_*"):
        rank = folder.name[len("rank_") :]
        if folder.is_dir() and rank.isdigit():
            sizes[int(rank)] = sum(p.stat().st_size for p in folder.glob(f"{prefix}*.ckpt"))
    return sizes


def last_checkpoint(directory: Path, prefix: str) -> Optional[Path]:
    """The newest ``<prefix>-<epoch>_<step>.ckpt`` ModelCheckpoint left in ``directory``."""
    files = numbered_checkpoints(directory, prefix)
    return files[-1] if files else None
