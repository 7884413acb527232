"""Config trees as MLflow params: dotted names, string values."""

import os
from pathlib import Path
from typing import Dict, Mapping


def param_value(value: object) -> str:
    # MLflow stores at most 6000 characters per param; long lists are cut, not refused.
    text = "null" if value is None else str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


def flatten(tree: Mapping, prefix: str = "") -> Dict[str, object]:
    """Dotted names for every leaf: ``{"checkpoint": {"integrated_save": True}}`` gives
    ``{"checkpoint.integrated_save": True}``. Lists are leaves (MLflow params are strings)."""
    flat: Dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def relative_to_run(params: Mapping[str, object], run_dir: Path) -> Dict[str, object]:
    """``params`` with each path inside the run's folder relative to it (``strategy.ckpt``,
    not ``/…/multirun/…/3/strategy.ckpt``): a param then differs between two runs only where
    their experiments differ. The folder itself is the run's tag ``ms_exp.run_dir``."""
    folders = {os.path.abspath(run_dir), str(Path(run_dir).resolve())}

    def relative(value: object) -> object:
        if not isinstance(value, str) or not os.path.isabs(value):
            return value
        path = os.path.normpath(value)
        for folder in folders:
            if path == folder or path.startswith(folder + os.sep):
                return os.path.relpath(path, folder)
        return value

    return {key: relative(value) for key, value in params.items()}
