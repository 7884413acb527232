"""Config trees as MLflow params: dotted names, string values."""
from typing import Dict, Mapping


def param_value(value) -> str:
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

