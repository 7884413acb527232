"""Checkpoint files of a run: where each rank's are, their names and sizes, and reading
them back whole. A ``.ckpt`` is written with MindSpore's CRC32; a ``.safetensors`` file,
which MindSpore writes without one, gets a SHA-256 recorded beside it (``<file>.sha256``,
docs/design.md#safetensors). Both are read through :func:`load_verified`, so a truncated or
corrupt one is refused by name, not loaded wrong. MindSpore is imported by the functions that
read or write: the names, suffixes and folders serve the launching process and the checks,
which run before MindSpore is imported."""

import hashlib
import json
import os
import re
import shutil
from itertools import count
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ms_exp.config.errors import ConfigError

# checkpoint.format: the file suffix of each.
SUFFIXES = {"ckpt": ".ckpt", "safetensors": ".safetensors"}
DIGEST_SUFFIX = ".sha256"
# checkpoint.exception_save: what Model writes when training raises, without a CRC
# (docs/design.md#exception-save).
BREAKPOINT_SUFFIX = "_breakpoint.ckpt"


def format_of(checkpoint: Any) -> str:
    """``checkpoint.format`` of a ``checkpoint`` group (an Enum in the typed config, a string
    in one read back; ``ckpt`` in a run's config saved before the key existed)."""
    value = checkpoint.get("format", "ckpt")
    return str(getattr(value, "value", value))


def checkpoint_format(path: Path) -> str:
    """``safetensors`` for a ``.safetensors`` file, else ``ckpt``: a run reads either
    format whatever its own ``checkpoint.format``."""
    return "safetensors" if Path(path).suffix == SUFFIXES["safetensors"] else "ckpt"


def is_breakpoint(path: Path) -> bool:
    return Path(path).name.endswith(BREAKPOINT_SUFFIX)


def is_checkpoint_file(path: Path) -> bool:
    return Path(path).suffix in SUFFIXES.values()


def best_name(fmt: str = "ckpt") -> str:
    return "best" + SUFFIXES[fmt]


def best_file(directory: Path) -> Optional[Path]:
    """The rank folder's best checkpoint in either format (the newer if both are there)."""
    found = [p for p in (Path(directory) / best_name(f) for f in SUFFIXES) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def digest_file(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + DIGEST_SUFFIX)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_digest(path: Path) -> None:
    """Record the SHA-256 of a safetensors file just written (``<file>.sha256``, written
    under a temporary name and renamed). ``.ckpt`` files carry MindSpore's CRC instead."""
    if checkpoint_format(path) != "safetensors":
        return
    _write_whole(digest_file(path), _sha256(path) + "\n")


def _write_whole(target: Path, text: str) -> None:
    """Written under a temporary name and renamed: never half a record."""
    partial = target.with_name(target.name + ".partial")
    partial.write_text(text)
    os.replace(partial, target)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link costs nothing; the file is only read, never rewritten."""
    if target.exists():
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def remove_checkpoint(path: Path) -> None:
    """A checkpoint and the digest recorded for it."""
    Path(path).unlink(missing_ok=True)
    digest_file(path).unlink(missing_ok=True)


def replace_checkpoint(partial: Path, path: Path) -> None:
    """Rename a checkpoint written under a temporary name, with its digest: the digest
    first, so a kill between the two renames leaves a file its digest refuses, never a
    changed one that passes."""
    if digest_file(partial).is_file():
        os.replace(digest_file(partial), digest_file(path))
    os.replace(partial, path)


def format_options(fmt: str) -> Dict[str, Any]:
    """``save_checkpoint``'s and ``CheckpointConfig``'s arguments for a format: a ``.ckpt``
    with its CRC; a ``.safetensors`` file, for which MindSpore refuses a CRC."""
    return {"format": "safetensors"} if fmt == "safetensors" else {"crc_check": True}


def save_weights(save_obj: Any, path: Path, **kwargs: Any) -> None:
    """``save_checkpoint`` in the format ``path``'s suffix names, a ``.safetensors`` file
    with its digest recorded."""
    import mindspore as ms

    ms.save_checkpoint(save_obj, str(path), **format_options(checkpoint_format(path)), **kwargs)
    record_digest(path)


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be read back whole; the message names the file."""


def _check_digest(path: Path) -> None:
    """A safetensors file against the digest recorded when it was written. MindSpore's own
    load refuses a truncated one but reads changed bytes as weights; a file without a
    recorded digest (written elsewhere) gets only MindSpore's parse."""
    try:
        recorded = digest_file(path).read_text().strip()
    except FileNotFoundError:
        return
    except OSError as error:
        raise DamagedCheckpoint(
            f"checkpoint {path} cannot be checked (its digest {digest_file(path)}: "
            f"{error.strerror or error})"
        ) from None
    if _sha256(path) != recorded:
        raise DamagedCheckpoint(
            f"checkpoint {path} is damaged (truncated or corrupt: its SHA-256 differs "
            f"from the one recorded in {digest_file(path).name} when it was written)"
        )


def load_verified(path: Path, **kwargs: Any) -> dict:
    """``load_checkpoint`` of a ``.ckpt`` with ``crc_check=True``, of a ``.safetensors``
    file after its digest is checked, with a failure naming the file and why.

    MindSpore reports a CRC mismatch as "May not have permission to read it"."""
    import mindspore as ms

    crc = checkpoint_format(path) == "ckpt" and not is_breakpoint(path)
    try:
        if checkpoint_format(path) == "safetensors":
            _check_digest(path)
            return ms.load_checkpoint(str(path), format="safetensors", **kwargs)
        # A breakpoint file has no CRC: asked for one, MindSpore only warns and parses it.
        return ms.load_checkpoint(str(path), crc_check=crc, **kwargs)
    except (ValueError, RuntimeError, OSError) as error:
        if isinstance(error, DamagedCheckpoint):
            raise
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DamagedCheckpoint(
            f"checkpoint {path} is damaged (truncated or corrupt: MindSpore's "
            f"{'CRC check or ' if crc else ''}parse failed: {reason})"
        ) from None


def verify_checkpoint(path: Path) -> None:
    """Raise DamagedCheckpoint unless ``path`` reads back whole. The CRC covers the whole
    file; only one entry is kept, so the weights are not held in memory for nothing."""
    entries = count()
    load_verified(path, choice_func=lambda name: next(entries) == 0)


def breakpoint_record_file(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".json")


def record_breakpoint(path: Path, step: int) -> None:
    """Record beside a breakpoint file just written its SHA-256 and the global step its
    weights are at: the last step whose end the callbacks reached. MindSpore names the file
    after the step it had begun, also when it raised before that step's update."""
    _write_whole(breakpoint_record_file(path), json.dumps({"step": step, "sha256": _sha256(path)}))


def breakpoint_record(path: Path) -> Optional[Dict[str, Any]]:
    """What :func:`record_breakpoint` wrote, or None (a process killed before it did)."""
    try:
        record = json.loads(breakpoint_record_file(path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def verify_breakpoint(path: Path, regular: Optional[Path]) -> None:
    """Raise DamagedCheckpoint unless the breakpoint file ``path`` matches the SHA-256
    ms_exp recorded for it, or, without one, parses whole and holds every entry of
    ``regular`` (a checkpoint of the same run, CRC-checked). Without a CRC or a record, a
    file cut at an entry's end parses as fewer entries, and a changed byte inside a
    tensor's data is not caught (docs/design.md#exception-save)."""
    record = breakpoint_record(path)
    if record is not None and record.get("sha256") != _sha256(path):
        raise DamagedCheckpoint(
            f"checkpoint {path} is damaged (truncated or corrupt: its SHA-256 differs "
            f"from the one recorded in {breakpoint_record_file(path).name} when it was written)"
        )
    names = _entry_names(path)
    if regular is None or record is not None:
        return
    missing = sorted(set(_entry_names(regular)) - set(names))
    if missing:
        raise DamagedCheckpoint(
            f"checkpoint {path} is damaged (truncated: it lacks {len(missing)} of the "
            f"entries of {Path(regular).name}, such as {missing[0]})"
        )


def _entry_names(path: Path) -> List[str]:
    """The entry names of a checkpoint read whole; only the first entry is kept."""
    names: List[str] = []

    def keep_first(name: str) -> bool:
        names.append(name)
        return len(names) == 1

    load_verified(path, choice_func=keep_first)
    return names


def rank_folders(checkpoints: Path) -> List[Path]:
    """The ``rank_<r>`` folders of a run's ``checkpoints`` folder, by rank."""
    found = [p for p in Path(checkpoints).glob("rank_*") if p.name[5:].isdigit() and p.is_dir()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def held_by_every(folders: List[Path], listed: Callable[[Path], List[Path]]) -> List[str]:
    """The names ``listed`` finds in every one of ``folders`` (each rank's), in the order it
    lists them in the first."""
    held = [{p.name for p in listed(folder)} for folder in folders[1:]]
    first = listed(folders[0]) if folders else []
    return [p.name for p in first if all(p.name in names for names in held)]


def load_shares(name: str, folders: List[Path]) -> dict:
    """A checkpoint saved with ``checkpoint.remove_redundancy``: each rank's file of that
    name holds its share of the entries, all of them together the whole state
    (docs/design.md#remove-redundancy)."""
    weights: dict = {}
    for folder in folders:
        weights.update(load_verified(folder / name))
    return weights


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
    """(epoch, step in epoch) of a ``<prefix>-<epoch>_<step>.ckpt`` (or ``.safetensors``)
    name, else None."""
    epoch, _, step = path.stem[len(prefix) + 1 :].partition("_")
    if (
        path.name.startswith(prefix + "-")
        and is_checkpoint_file(path)
        and epoch.isdigit()
        and step.isdigit()
    ):
        return int(epoch), int(step)
    return None


def breakpoint_position(path: Path, prefix: str) -> Optional[Tuple[int, int]]:
    """(epoch, step in epoch) of a ``<prefix>-<epoch>_<step>_breakpoint.ckpt`` name (also
    ``<prefix>_<n>-...``, MindSpore's name for the n-th one in the same folder), else None."""
    name = Path(path).name
    found = re.fullmatch(r"(?:_\d+)?-(\d+)_(\d+)", name[len(prefix) : -len(BREAKPOINT_SUFFIX)])
    if name.startswith(prefix) and is_breakpoint(path) and found:
        return int(found[1]), int(found[2])
    return None


def breakpoints(directory: Path, prefix: str) -> List[Path]:
    """The breakpoint files of ``directory``, oldest first (the later of two of one step
    last)."""
    found = [
        (breakpoint_position(p, prefix), len(p.name), p.name, p)
        for p in Path(directory).glob(f"{prefix}*{BREAKPOINT_SUFFIX}")
    ]
    return [x[-1] for x in sorted(x for x in found if x[0] is not None)]


def numbered_checkpoints(directory: Path, prefix: str) -> List[Path]:
    """The ``<prefix>-<epoch>_<step>.ckpt`` and ``.safetensors`` files of ``directory``,
    oldest first."""
    found = [(checkpoint_position(p, prefix), p) for p in Path(directory).glob(f"{prefix}-*")]
    return [p for position, p in sorted(x for x in found if x[0] is not None)]


def rank_dir(run_dir: Path, rank_id: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"rank_{rank_id}"


def checkpoint_bytes(run_dir: Path, prefix: str) -> Dict[int, int]:
    """Bytes of the checkpoints ``ModelCheckpoint`` left in each ``rank_<r>`` folder.

    ``best.*`` and the ``-graph.meta`` file are not counted: they are the same whatever
    ``integrated_save`` says, and would hide the difference it makes."""
    return {
        int(folder.name[len("rank_") :]): sum(
            p.stat().st_size for p in folder.glob(f"{prefix}*") if is_checkpoint_file(p)
        )
        for folder in rank_folders(Path(run_dir) / "checkpoints")
    }


def last_checkpoint(directory: Path, prefix: str) -> Optional[Path]:
    """The newest ``<prefix>-<epoch>_<step>.<suffix>`` ModelCheckpoint left in ``directory``."""
    files = numbered_checkpoints(directory, prefix)
    return files[-1] if files else None
