"""ms_exp: MindSpore training experiments as Hydra-configured, MLflow-tracked runs."""

from typing import Any

__version__ = "0.1.0"


def autolog(*args: Any, **kwargs: Any) -> None:
    """Record every ``mindspore.train.Model.train``/``fit`` call of this process as an MLflow
    run: see :func:`ms_exp.tracking.autolog.autolog` for the arguments. Imported on the first
    call, so that ``import ms_exp`` imports neither MindSpore nor MLflow."""
    from ms_exp.tracking.autolog import autolog as enable

    return enable(*args, **kwargs)
