"""Every check of a composed config, in order: what a schema's types cannot express
(ranges, paths, files' headers, choices that conflict), asked section by section, each
refusal a one-line ConfigError. Runs in the launching process before any run directory,
MLflow run or MindSpore exists; only the checks that build the network import MindSpore."""

import dataclasses
import hashlib
from typing import Any, Mapping, Optional, Set

from omegaconf import DictConfig, OmegaConf

from ms_exp.boost.options import boost_option
from ms_exp.checkpoint.checks import (
    validate_checkpoint,
    validate_checkpoint_choice,
    validate_checkpoint_parallel,
    validate_exception_save,
    validate_snapshots,
)
from ms_exp.config.errors import ConfigError, one_of
from ms_exp.config.numbers import check_number
from ms_exp.config.schema import GROUP_SCHEMAS, Config, group_schema
from ms_exp.config.targets import TARGET_ARGUMENTS, target_path
from ms_exp.data.checks import validate_batch_fits, validate_dataset
from ms_exp.parallel.checks import (
    validate_launch_style,
    validate_master_port_free,
    validate_parallel,
    validate_shard_strategies,
)
from ms_exp.preflight.components import validate_components
from ms_exp.preflight.device import validate_device_present
from ms_exp.preflight.interpolations import check_interpolations, without_hydra
from ms_exp.preflight.memory import validate_memory
from ms_exp.preflight.model import validate_model, validate_placement
from ms_exp.preflight.tracking import validate_no_credentials, validate_tracking
from ms_exp.preflight.trainer import validate_resume, validate_resume_fits, validate_trainer
from ms_exp.preflight.training import validate_loop, validate_loss, validate_optimizer

# The jobs this process has checked (``job_digest``) before Hydra started: the job function
# need not check the same config again (a dataset's headers can take minutes).
_VALIDATED: Set[str] = set()


def validate(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """``choices`` maps each group to its selected option (Hydra's runtime.choices)."""
    validate_config(cfg, choices)
    # What this machine has, after every check of the config itself.
    validate_device_present(cfg.trainer)
    validate_master_port_free(cfg.parallel)
    _VALIDATED.add(job_digest(cfg, choices))


def validate_once(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """``validate``, unless this process validated the same job already; a job a sweeper
    made up after the launching process checked the command line (Optuna's values) is new."""
    if job_digest(cfg, choices) not in _VALIDATED:
        validate(cfg, choices)


def job_digest(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> str:
    """The job's config as composed (interpolations unresolved: Hydra's folders differ
    between the check and the job), without Hydra's node, and its options."""
    text = OmegaConf.to_yaml(without_hydra(cfg), resolve=False) + repr(
        sorted((str(k), str(v)) for k, v in dict(choices).items())
    )
    return hashlib.sha256(text.encode()).hexdigest()


def validate_config(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """Every check of the config itself, without the state of the machine that launches
    it (a free master port, the device): also what each rank of a distributed job checks
    of the config.yaml it reads (ms_exp/worker.py), while msrun holds that port."""
    # Before any check that repeats a value in its refusal.
    validate_no_credentials(check_interpolations(cfg))
    check_known_keys(cfg, choices)
    validate_trainer(cfg.trainer)
    validate_parallel(cfg.parallel)
    validate_launch_style(cfg)
    validate_checkpoint(cfg.checkpoint)
    validate_checkpoint_choice(cfg.checkpoint, choices["checkpoint"])
    validate_checkpoint_parallel(cfg)
    validate_exception_save(cfg)
    validate_resume(cfg)
    validate_dataset(cfg.dataset)
    validate_batch_fits(cfg.dataset, cfg.parallel)
    validate_model(cfg)
    validate_placement(cfg.placement, cfg.model)
    validate_resume_fits(cfg)
    validate_memory(cfg)
    validate_optimizer(cfg.optimizer, cfg.trainer.epochs)
    validate_loss(cfg.loss)
    validate_loop(cfg)
    validate_components(cfg)
    validate_tracking(cfg.tracking)
    if cfg.parallel.mode == "semi_auto":
        validate_shard_strategies(cfg)
    validate_snapshots(cfg)
    boost_option(cfg.boost).check(cfg)


def validate_for_evaluation(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """What evaluating a finished run depends on: its network, data and loss."""
    validate_no_credentials(OmegaConf.to_container(without_hydra(cfg), resolve=True))
    check_known_keys(cfg, choices)
    validate_trainer(cfg.trainer)
    validate_dataset(cfg.dataset)
    validate_model(cfg)
    validate_loss(cfg.loss)
    validate_components(cfg, training=False)


def check_known_keys(cfg: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    """Refuse keys no schema declares (``+key=value`` too) and numbers out of bounds. A
    user's option has no schema: its keys are its target's arguments, checked when built."""
    _known_keys("", cfg, Config)
    for group in GROUP_SCHEMAS:
        schema = group_schema(group, cfg[group], choices.get(group))
        if schema is not None:
            _known_keys(f"{group}.", cfg[group], schema)


def _known_keys(prefix: str, node: Any, schema: Any) -> None:
    fields = {f.name: f.type for f in dataclasses.fields(schema)}
    # A schema subclassing Dict (optimizer, loss) admits the own arguments of the
    # ``_target_`` it names, checked against its signature (ms_exp/preflight/components.py).
    takes_arguments = issubclass(schema, dict)
    for key in node.keys():
        if key == "hydra" and not prefix:
            continue
        if key not in fields:
            if takes_arguments and target_path(node) is not None:
                continue
            raise ConfigError(
                f"{prefix}{key}",
                OmegaConf.select(node, str(key)),
                one_of(fields) + (TARGET_ARGUMENTS if takes_arguments else ""),
                problem="unknown key",
            )
        if dataclasses.is_dataclass(fields[key]):
            _known_keys(f"{prefix}{key}.", node[key], fields[key])
        else:
            check_number(f"{prefix}{key}", fields[key], OmegaConf.select(node, str(key)))
