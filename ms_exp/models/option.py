"""What a model option tells the rest of ms_exp about itself: the trainer, evaluation and
the config checks ask its ``ModelOption`` what differs between models instead of comparing
the model's name; a user's option gets the defaults (the built-in ones are listed in
``ms_exp.models.options``). Nothing here imports MindSpore: the checks read these objects
before MindSpore starts.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from ms_exp.data.spec import IMAGES


@dataclass(frozen=True)
class ModelBuild:
    """What the trainer has built for an option (model or boost) that builds its own Model."""

    cfg: Any  # the job's whole config
    network: Any  # the network of the model option
    placement: Any  # ms_exp.placement.tables.Placement
    num_classes: int
    loss_fn: Any  # the configured loss
    metrics: Dict[str, Any]  # the configured eval metrics
    runtime: Any  # ms_exp.train.context.Runtime of this rank
    run_dir: Path
    tracker: Any  # ms_exp.tracking.interface.RunTracker


def _no_checks(cfg: Any) -> None:
    """A user's option: its target's signature and what it returns are checked instead."""


@dataclass(frozen=True)
class ModelOption:
    name: str
    target: Optional[str] = None  # its ``_target_``; None: a user's option
    # (cfg) -> None: the option's own checks, raising ConfigError; no MindSpore import
    check: Callable[[Any], None] = _no_checks
    # What its samples are (ms_exp.data.spec): the dataset's must match. None: any.
    inputs: Optional[str] = IMAGES
    # Keys of the option its own train step reads, not the network's arguments.
    train_keys: Tuple[str, ...] = ()
    best_metric: str = "accuracy"  # the eval metric best.ckpt maximises
    loss_names: Tuple[str, ...] = ()  # the losses its train step returns, when several
    embedding_tables: bool = False  # has tables that placement=host_device keeps on the host
    # (ModelBuild) -> mindspore.Model with a train step of its own, or None: ms_exp's loops
    # (trainer.loop) with the configured optimizer, loss, amp and loss parts
    own_train_step: Optional[Callable[[ModelBuild], Any]] = None
    # (network) -> Model keywords that evaluate it, or None: the configured loss and
    # classification metrics
    evaluation: Optional[Callable[[Any], Dict[str, Any]]] = None
    # (cfg, sample shape, class count) -> (the key that sizes it, its parameter count),
    # without building the network; None: not known before (a user's option)
    parameters: Optional[Callable[[Any, Tuple[int, ...], int], Tuple[str, int]]] = None
