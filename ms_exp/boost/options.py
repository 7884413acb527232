"""The ``boost`` group's options: one ``BoostOption`` each. Builders import MindSpore when
called, never when this module is imported (the checks read the options first)."""

import os
from typing import Any, Optional

from omegaconf import DictConfig

from ms_exp.boost.checks import validate_dim_reduce
from ms_exp.boost.option import BoostOption
from ms_exp.boost.pca import remove_work_dir
from ms_exp.boost.stage_one import fill_stage_one
from ms_exp.models.option import ModelBuild


def _stage_two_model(build: ModelBuild) -> Any:
    from ms_exp.boost.dim_reduce import build_stage_two

    return build_stage_two(build)


BOOST_OPTIONS = {
    "off": BoostOption("off", lambda cfg: None),  # no keys of its own
    # Neither keeps its state in the checkpoint: dim-reduce's PCA subspace and line search
    # live in AutoBoost.
    "dim_reduce": BoostOption(
        "dim_reduce",
        validate_dim_reduce,
        not_resumable="its state is not in the checkpoints",
        # Recorded as found (run id, paths), so ranks and re-runs need no MLflow lookup.
        prepare_job=fill_stage_one,
        own_train_step=_stage_two_model,
        after_fit=remove_work_dir,
        # The line search calls the network more than once in the graph it differentiates
        # (docs/design.md#dimreduce-forward-twice).
        expected_warning=("call the forward network only once", "{OPTIMIZER:3}"),
    ),
}


def boost_option(boost_cfg: DictConfig) -> BoostOption:
    """The option ``boost_cfg.mode`` names (the schemas admit no other)."""
    return BOOST_OPTIONS[boost_cfg.mode]


def mute_expected_warning(cfg: DictConfig) -> Optional[str]:
    """Before MindSpore is imported (it reads ``MS_SUBMODULE_LOG_v`` once, at import; the
    ranks, workers and job processes a command starts inherit it): mute the warning that the
    job's boost option makes MindSpore print by design. The line that says so, when this
    call muted it; levels already set (by the user, or for an earlier job) are kept."""
    expected = boost_option(cfg.boost).expected_warning
    if expected is None or "MS_SUBMODULE_LOG_v" in os.environ:
        return None
    warning, levels = expected
    os.environ["MS_SUBMODULE_LOG_v"] = levels
    return (
        f"boost={cfg.boost.mode}: MindSpore warns '{warning}' by design here; "
        f"MS_SUBMODULE_LOG_v={levels} turns that part's warnings off for this command (set it "
        "yourself to choose)"
    )
