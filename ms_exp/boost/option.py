"""What a boost option tells the rest of ms_exp about itself: the job, the trainer and the
config checks ask its ``BoostOption`` instead of comparing ``boost.mode`` (the options are
listed in ``ms_exp.boost.options``). Nothing here imports MindSpore.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Tuple


@dataclass(frozen=True)
class BoostOption:
    name: str
    # (cfg) -> None: the option's own checks, raising ConfigError; no MindSpore import
    check: Callable[[Any], None]
    # Why ``trainer.resume`` cannot continue a run of it (None: it can).
    not_resumable: Optional[str] = None
    # (cfg) -> None: fills in what the job needs to know before its config is saved for the
    # ranks (e.g. where stage one's files are), in the launching process.
    prepare_job: Optional[Callable[[Any], None]] = None
    # (ms_exp.models.option.ModelBuild) -> mindspore.Model with its own train step and
    # optimizer, or None: the model option's (or ms_exp's loops)
    own_train_step: Optional[Callable[[Any], Any]] = None
    # (run_dir) -> None: rank 0 cleans up after ``Model.fit``, also after a failure
    after_fit: Optional[Callable[[Path], None]] = None
    # MindSpore's warning the option makes it print by design, muted by the submodule log
    # levels that silence it (``MS_SUBMODULE_LOG_v``), or None
    expected_warning: Optional[Tuple[str, str]] = None
