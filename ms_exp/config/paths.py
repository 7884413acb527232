"""The check of a path a job writes, shared by the groups that name one (the launcher's
log folder, the strategy file to save)."""

from pathlib import Path

from ms_exp.config.errors import require


def inside_run_dir(key: str, value: object) -> None:
    """A path a job writes: absolute, or relative and so inside the run directory (without
    '..', which would put the file in another run's folder, or anywhere)."""
    written = Path(str(value)).expanduser()
    require(
        written.is_absolute() or ".." not in written.parts,
        key,
        value,
        "an absolute path, or a relative one inside the run directory (without '..')",
    )
