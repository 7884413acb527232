"""Merging and re-slicing sliced checkpoints with MindSpore's own ``transform_checkpoints``:
what ``python -m ms_exp.ckpt`` runs, and ``ms_exp.eval`` before evaluating a sliced run.

CHECKPOINT_DIR holds one ``rank_<r>/`` folder per device, as ``ModelCheckpoint`` (and the CPU
layout emulation of ``parallel=semi_auto``) writes them. ``merge`` writes one full checkpoint
(with a CRC); ``transform`` re-slices N ranks into the M of the destination strategy.

Sliced ``.safetensors`` files are merged by MindSpore's ``unified_safetensors`` instead, and
their parts written again as one ``<prefix>0.safetensors`` with its digest
(docs/design.md#safetensors).

``transform_checkpoints`` (2.10) takes the last file by name under each ``rank_<r>/``, so it
gets a staging folder of each rank's newest checkpoint, the same step on every rank
(docs/design.md#transform-checkpoints-last-file); its output names are read back, not
assumed; a destination strategy missing parameters is refused (they would be copied still
sliced); results are written to a temporary folder and moved into place.
"""

import glob
import os
import re
import shutil
import sys
from math import prod
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from omegaconf import DictConfig

PROG = "ms_exp.ckpt"  # what its warnings and errors start with
# A merge's scratch folders beside its output: the pid in the name (ms_exp/checkpoint/scratch.py).
SCRATCH_PREFIX = ".ms_exp-ckpt-"
PathLike = Union[str, Path]
_RANK_DIR = re.compile(r"rank_(\d+)$")


class CkptError(Exception):
    """A one-line error for the user; ``exit_code`` 2 for bad input, 1 when MindSpore fails."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def _check_inputs(
    src_dir: PathLike, strategy_files: List[Tuple[str, PathLike]], prefix: str
) -> Dict[int, Path]:
    """The checks that need no MindSpore; returns the rank folders by rank."""
    src = Path(src_dir)
    if not src.is_dir():
        raise CkptError(f"no such checkpoint directory: {src}")
    for option, path in strategy_files:
        if not Path(path).is_file():
            raise CkptError(f"no such strategy file ({option}): {path}")
    if not prefix or "/" in prefix or os.sep in prefix or ".." in prefix or "~" in prefix:
        raise CkptError(
            f"--prefix {prefix!r} must be a plain file-name prefix such as 'checkpoint'"
        )
    ranks = {
        int(m.group(1)): p for p in src.iterdir() if p.is_dir() and (m := _RANK_DIR.match(p.name))
    }
    if not ranks:
        raise CkptError(
            f"no rank_* folders in {src} (expected rank_0 ... rank_<N-1>, one per "
            f"device, as ModelCheckpoint writes them)"
        )
    return ranks


def strategy_file_layouts(path: PathLike) -> Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """(dev_matrix, tensor_map) of every parameter in a strategy file, read back with
    ``mindspore.parallel.build_searched_strategy`` (the file holds no full shapes)."""
    from mindspore.parallel import build_searched_strategy

    return {
        name: (tuple(layout.dev_matrix[0].dim), tuple(layout.tensor_map[0].dim))
        for name, layout in build_searched_strategy(str(path)).items()
    }


def _read_strategy(option: str, path: PathLike) -> Dict[str, Tuple[tuple, tuple]]:
    try:
        layouts = strategy_file_layouts(Path(path).resolve())
    except Exception as error:  # MindSpore raises TypeError/ValueError/protobuf's DecodeError
        raise CkptError(
            f"cannot read strategy file ({option}) {path}: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
        )
    if not layouts:
        raise CkptError(f"strategy file ({option}) {path} has no parameter layouts")
    device_nums = {prod(dev_matrix) for dev_matrix, _ in layouts.values()}
    if len(device_nums) != 1:
        raise CkptError(
            f"strategy file ({option}) {path} mixes device counts "
            f"{sorted(device_nums)} (pipeline stages are not supported)"
        )
    return layouts


def _rank_files(
    src_dir: PathLike, ranks: Dict[int, Path], device_num: int, prefix: str
) -> Dict[int, Path]:
    missing = [r for r in range(device_num) if r not in ranks]
    if missing:
        raise CkptError(
            f"the strategy file describes {device_num} devices but rank_{missing[0]} "
            f"is missing under {src_dir}"
        )
    extra = sorted(r for r in ranks if r >= device_num)
    if extra:
        raise CkptError(
            f"{src_dir} has rank_{extra[0]} but the strategy file describes only "
            f"{device_num} devices (rank_0 ... rank_{device_num - 1})"
        )
    from ms_exp.checkpoint.files import is_checkpoint_file, last_checkpoint

    files, stepped = {}, True
    for rank in range(device_num):
        # ModelCheckpoint's newest <prefix>-<epoch>_<step>.ckpt (or .safetensors); else the
        # most recently written <prefix>*.ckpt or .safetensors (transform_checkpoints' own
        # output is <prefix><rank>.ckpt).
        newest = last_checkpoint(ranks[rank], prefix)
        stepped = stepped and newest is not None
        written = [
            p
            for p in ranks[rank].glob(glob.escape(prefix) + "*")
            if p.is_file() and is_checkpoint_file(p)
        ]
        picked = newest or max(written, key=lambda p: (p.stat().st_mtime, p.name), default=None)
        if picked is None:
            raise CkptError(f"rank_{rank} has no {prefix}*.ckpt file ({ranks[rank]})")
        files[rank] = picked.resolve()
    odd = next((r for r, p in files.items() if p.name != files[0].name), None)
    if stepped and odd is not None:
        raise CkptError(
            f"ranks hold different steps: rank_0's newest checkpoint is "
            f"{files[0].name} but rank_{odd}'s is {files[odd].name}"
        )
    return files


def _warn_unlisted_states(rank0_file: Path, layouts: Mapping[str, Tuple[tuple, tuple]]) -> None:
    """Optimizer states cloned from a sliced parameter but absent from the strategy file:
    transform_checkpoints would copy one rank's slice instead of merging them."""
    from mindspore.parallel._tensor import _get_tensor_strategy

    sliced = {
        name
        for name, (dev_matrix, tensor_map) in layouts.items()
        if prod(_get_tensor_strategy(list(dev_matrix), list(tensor_map))) > 1
    }
    from ms_exp.checkpoint.files import DamagedCheckpoint, load_verified

    try:  # MindSpore parses its protobuf format: a checkpoint is never unpickled
        names = list(load_verified(rank0_file))
    except DamagedCheckpoint as error:
        raise CkptError(str(error)) from None
    for name in names:
        if name not in layouts and any(name.endswith("." + p) for p in sliced):
            print(
                f"{PROG}: warning: {name} is not in the strategy file, so "
                f"transform_checkpoints copies one rank's slice of it instead of merging it",
                file=sys.stderr,
            )


def _transform(
    src_dir: PathLike,
    src_strategy: PathLike,
    dst_strategy: Optional[PathLike],
    output_dir: PathLike,
    prefix: str,
) -> Tuple[Dict[int, Path], Dict[int, Path]]:
    """Stage one file per rank, run MindSpore's transform into a temporary folder next to
    ``output_dir``, then move each rank's result into ``output_dir/rank_<r>/``; returns the
    results and the source file of each rank."""
    options = [("--strategy", src_strategy)] + (
        [("--dst-strategy", dst_strategy)] if dst_strategy else []
    )
    ranks = _check_inputs(src_dir, options, prefix)
    output = Path(output_dir).resolve()
    if output == Path(src_dir).resolve():
        raise CkptError(f"--output must differ from the checkpoint directory {src_dir}")
    if output.exists() and not output.is_dir():
        raise CkptError(f"--output {output} exists and is not a directory")
    src_layouts = _read_strategy("--strategy", src_strategy)
    if dst_strategy:
        dst_layouts = _read_strategy("--dst-strategy", dst_strategy)
        absent = [name for name in src_layouts if name not in dst_layouts]
        if absent:
            raise CkptError(
                f"the destination strategy {dst_strategy} has no layout for "
                f"{absent[0]} (in the source strategy); transform_checkpoints would "
                f"copy it still sliced"
            )
    # _read_strategy checked that every layout spans the same devices.
    files = _rank_files(src_dir, ranks, prod(next(iter(src_layouts.values()))[0]), prefix)
    suffixes = {path.suffix for path in files.values()}
    if len(suffixes) > 1:
        raise CkptError(
            f"ranks hold different formats: rank_0's newest checkpoint is {files[0].name}, "
            f"another's {next(p.name for p in files.values() if p.suffix != files[0].suffix)}"
        )
    _warn_unlisted_states(files[0], src_layouts)
    fmt = "safetensors" if files[0].suffix == ".safetensors" else "ckpt"

    from mindspore.parallel import transform_checkpoints

    from ms_exp.checkpoint.files import replace_checkpoint
    from ms_exp.checkpoint.scratch import scratch_folder

    output.parent.mkdir(parents=True, exist_ok=True)
    with scratch_folder(SCRATCH_PREFIX, output.parent) as scratch:
        stage, result = Path(scratch) / "src", Path(scratch) / "dst"
        # MindSpore 2.10's transform_checkpoints re-slices safetensors sources wrongly: they
        # are re-sliced as .ckpt copies and written back (docs/design.md#safetensors).
        via_ckpt = fmt == "safetensors" and dst_strategy is not None
        for rank, path in files.items():
            (stage / f"rank_{rank}").mkdir(parents=True)
            if via_ckpt:
                _rewrite_as(path, stage / f"rank_{rank}" / f"{path.stem}.ckpt")
                continue
            try:
                os.symlink(path, stage / f"rank_{rank}" / path.name)
            except OSError:
                shutil.copy2(path, stage / f"rank_{rank}" / path.name)
        tool = "transform_checkpoints"
        try:
            if fmt == "safetensors" and dst_strategy is None:
                tool = "unified_safetensors"
                _unify_safetensors(stage, Path(src_strategy).resolve(), result, prefix)
            else:
                transform_checkpoints(
                    str(stage),
                    str(result),
                    prefix,
                    str(Path(src_strategy).resolve()),
                    str(Path(dst_strategy).resolve()) if dst_strategy else None,
                    output_format="ckpt" if via_ckpt else fmt,
                )
        except Exception as error:
            text = str(error).strip().splitlines()
            raise CkptError(
                f"{tool} failed: {text[0] if text else type(error).__name__}",
                exit_code=1,
            )
        produced = {}
        for rank_dir in result.iterdir():
            match = _RANK_DIR.match(rank_dir.name)
            written = sorted(rank_dir.glob("*.ckpt" if via_ckpt else f"*.{fmt}")) if match else []
            if match is None or len(written) != 1:
                raise CkptError(
                    f"transform_checkpoints left {len(written)} files in "
                    f"{rank_dir.name}, expected one",
                    exit_code=1,
                )
            if via_ckpt:
                converted = written[0].with_suffix(".safetensors")
                _rewrite_as(written[0], converted)
                written[0].unlink()
                written = [converted]
            target = output / rank_dir.name
            target.mkdir(parents=True, exist_ok=True)
            # merged: one full file, saved again with its CRC; safetensors: their digests
            if dst_strategy is None or fmt == "safetensors":
                _with_crc(written[0])
            replace_checkpoint(written[0], target / written[0].name)  # with its digest
            produced[int(match.group(1))] = target / written[0].name
    return dict(sorted(produced.items())), files


def _with_crc(path: Path) -> None:
    """transform_checkpoints writes no CRC, so every later load warns and checks nothing;
    the merged weights are written again, with one (in place: the file is still scratch).
    A safetensors file gets its digest recorded instead."""
    import mindspore as ms

    from ms_exp.checkpoint.files import checkpoint_format, record_digest, save_weights

    if checkpoint_format(path) == "safetensors":
        record_digest(path)
        return
    weights = ms.load_checkpoint(str(path))
    save_weights([{"name": name, "data": value} for name, value in weights.items()], path)


def _rewrite_as(source: Path, target: Path) -> None:
    """The weights of ``source`` written again in the format ``target``'s suffix names (a
    ``.safetensors`` target gets its digest)."""
    from ms_exp.checkpoint.files import load_verified, save_weights

    weights = load_verified(source)
    save_weights([{"name": name, "data": value} for name, value in weights.items()], target)


def _unify_safetensors(stage: Path, strategy: Path, result: Path, prefix: str) -> None:
    """MindSpore's ``unified_safetensors`` merges the slices into ``part<n>.safetensors``
    files and a ``hyper_param.safetensors`` of the entries no strategy covers; they are
    written again as ``result/rank_0/<prefix>0.safetensors``, the name a ``.ckpt`` merge
    gives (docs/design.md#safetensors)."""
    import mindspore as ms
    from mindspore.parallel import unified_safetensors

    unified = result.with_name("unified")
    unified_safetensors(str(stage), str(strategy), str(unified), max_process_num=1)
    weights: Dict[str, Any] = {}
    for part in sorted(unified.glob("*.safetensors")):
        weights.update(ms.load_checkpoint(str(part), format="safetensors"))
    (result / "rank_0").mkdir(parents=True)
    ms.save_checkpoint(
        [{"name": name, "data": value} for name, value in weights.items()],
        str(result / "rank_0" / f"{prefix}0.safetensors"),
        format="safetensors",
    )


_STEPPED = re.compile(r"-(\d+)_(\d+)\.(?:ckpt|safetensors)$")


def _merged_line(name: str, ranks: int, source: str) -> str:
    """What a merge took: the file each rank held (one name: every rank saved the same step),
    its epoch and step, the ranks and where they were."""
    stepped = _STEPPED.search(name)
    when = f" (epoch {stepped.group(1)}, step {stepped.group(2)} of the epoch)" if stepped else ""
    return f"merged {name}{when} of ranks 0-{ranks - 1} {source}"


def merged_file(src_dir: PathLike, prefix: str = "checkpoint", fmt: str = "ckpt") -> Path:
    """Where :func:`merge_checkpoints` writes by default:
    ``<src_dir>/merged/rank_0/<prefix>0.ckpt`` (``.safetensors`` for such slices)."""
    return Path(src_dir) / "merged" / "rank_0" / f"{prefix}0.{fmt}"


def merge_checkpoints(
    src_dir: PathLike,
    strategy_file: PathLike,
    output_dir: Optional[PathLike] = None,
    prefix: str = "checkpoint",
    report: Optional[Callable[[str], Any]] = None,
) -> Path:
    """Merge every rank's slices into one full checkpoint (``output_dir/rank_0/<prefix>0.ckpt``;
    ``output_dir`` defaults to ``<src_dir>/merged``) and return its path; ``report`` (a
    callable) is given the line that says what was merged."""
    output_dir = output_dir if output_dir is not None else Path(src_dir) / "merged"
    produced, files = _transform(src_dir, strategy_file, None, output_dir, prefix)
    if report is not None:
        report(
            _merged_line(
                files[0].name,
                len(files),
                f"({files[0].parents[1]}) with the strategy file {Path(strategy_file).resolve()}",
            )
        )
    return produced[0]


def transform(
    src_dir: PathLike,
    src_strategy: PathLike,
    dst_strategy: PathLike,
    output_dir: PathLike,
    prefix: str = "checkpoint",
) -> Path:
    """Re-slice the checkpoints of ``src_strategy``'s ranks into ``dst_strategy``'s ranks,
    written as ``output_dir/rank_<r>/``; returns ``output_dir``."""
    _transform(src_dir, src_strategy, dst_strategy, output_dir, prefix)
    return Path(output_dir).resolve()


def is_sliced_run(cfg: DictConfig) -> bool:
    """Did this run's ranks save slices (semi-auto or auto parallel, integrated_save off)?"""
    return (
        cfg.parallel.mode in ("semi_auto", "auto")
        and cfg.checkpoint.save
        and not cfg.checkpoint.integrated_save
    )


def saves_shares(cfg: DictConfig) -> bool:
    """Did this run's ranks save only their shares (``checkpoint.remove_redundancy``)?"""
    return (
        cfg.parallel.mode == "data"
        and cfg.checkpoint.save
        and bool(cfg.checkpoint.get("remove_redundancy", False))
    )


def merge_shares(
    src_dir: PathLike,
    output_dir: PathLike,
    prefix: str = "checkpoint",
    report: Optional[Callable[[str], Any]] = None,
) -> Path:
    """One whole checkpoint from the shares each rank saved with
    ``checkpoint.remove_redundancy`` (their newest checkpoint every rank holds), written as
    ``output_dir/rank_0/<prefix>0.<suffix>``; returns its path."""
    from ms_exp.checkpoint.files import (
        DamagedCheckpoint,
        held_by_every,
        load_shares,
        numbered_checkpoints,
        rank_folders,
        replace_checkpoint,
        save_weights,
    )

    ranks = _check_inputs(src_dir, [], prefix)
    folders = [ranks[rank] for rank in sorted(ranks)]
    common = held_by_every(folders, lambda folder: numbered_checkpoints(folder, prefix))
    if not common:
        raise CkptError(f"no {prefix}-<epoch>_<step> checkpoint that every rank of {src_dir} holds")
    name = common[-1]
    try:
        weights = load_shares(name, rank_folders(Path(src_dir)))
    except DamagedCheckpoint as error:
        raise CkptError(str(error)) from None
    target = Path(output_dir) / "rank_0" / f"{prefix}0{Path(name).suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.stem}.partial{target.suffix}")
    save_weights([{"name": n, "data": value} for n, value in weights.items()], partial)
    replace_checkpoint(partial, target)
    if report is not None:
        report(
            _merged_line(
                name,
                len(folders),
                f"({Path(src_dir).resolve()}), each rank's share (checkpoint.remove_redundancy)",
            )
        )
    return target


Sources = Tuple[Path, Optional[Path], str, bool]


def run_sources(source: str, workdir: Path, tracking_uri: Optional[str] = None) -> Sources:
    """``(checkpoint dir, strategy file, prefix, shares)`` of a run directory, an MLflow run
    id, or a plain folder of ``rank_<r>/`` folders (strategy unknown, prefix "checkpoint");
    ``shares``: its ranks saved their shares (:func:`saves_shares`)."""
    from ms_exp.config.run_config import load_run_config

    path = Path(source)
    if path.is_dir() and (path / "config.yaml").is_file():
        cfg = load_run_config(path / "config.yaml")
        strategy = (
            Path(cfg.checkpoint.strategy.save_file) if cfg.checkpoint.strategy.save_file else None
        )
        return path / "checkpoints", strategy, cfg.checkpoint.prefix, saves_shares(cfg)
    if path.is_dir():
        return path, None, "checkpoint", False
    from ms_exp.tracking.store import is_run_id

    if not is_run_id(source):
        raise CkptError(f"{source}: not a run directory, a checkpoint folder or an MLflow run id")
    return _download_run(source, workdir, tracking_uri)


def _download_run(run_id: str, workdir: Path, tracking_uri: Optional[str]) -> Sources:
    from ms_exp.config.run_config import load_run_config
    from ms_exp.tracking.records import RunRecords
    from ms_exp.tracking.store import StoreError, quiet_artifact_downloads, resolve_tracking_uri

    try:  # the store is only read: a missing one is refused, never created
        records = RunRecords.existing(resolve_tracking_uri(tracking_uri))
        run = records.job_run(run_id)
    except StoreError as error:
        raise CkptError(f"run {run_id}: {error}") from None
    local = Path(run.data.tags.get("ms_exp.run_dir", ""))
    if local.name and (local / "checkpoints").is_dir():
        return run_sources(str(local), workdir)
    quiet_artifact_downloads()
    cfg = load_run_config(
        records.download(run_id, "config/config.yaml", workdir), source=f"MLflow run {run_id}"
    )
    checkpoints = records.download(run_id, "checkpoints", workdir)
    names = records.artifact_paths(run_id, "strategy")
    strategy = None
    if names:
        strategy = records.download(run_id, sorted(names)[0], workdir)
    return checkpoints, strategy, cfg.checkpoint.prefix, saves_shares(cfg)
