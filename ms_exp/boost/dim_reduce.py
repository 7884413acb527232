"""Stage two of dimension-reduction training, built from MindSpore's own pieces.

ms_exp makes the two calls ``Model`` would make for the tutorial's ``boost_level`` and
``boost_config_dict`` itself, for three reasons:

- ``AutoBoost`` is a process-wide singleton that keeps its first configuration, so it is
  reset before each job's build (docs/design.md#autoboost-singleton);
- the training cell must return its loss (``LossReturningBoostCell``);
- the PCA step must use a private folder and a cached matrix (``ms_exp.boost.pca``).
"""

from pathlib import Path
from typing import Any, Dict, Optional

from mindspore import Model, load_param_into_net, nn
from mindspore.boost import AutoBoost
from omegaconf import DictConfig

from ms_exp.boost.cell import LossReturningBoostCell
from ms_exp.boost.pca import pca_for_rank
from ms_exp.checkpoint.files import load_verified
from ms_exp.models.option import ModelBuild


def boost_config_dict(
    boost_cfg: DictConfig,
    device_number: int,
    weight_load_dir: Optional[Path],
    pca_mat_path: Optional[Path],
) -> Dict[str, Any]:
    """The tutorial's dictionary with MindSpore's real key names: ``n_components`` and
    ``common.device_number`` (the tutorial's ``n_component`` and ``device_num`` are
    silently ignored by MindSpore 2.10: docs/design.md#boost-config-unknown-keys)."""
    return {
        "boost": {"mode": "manual", "dim_reduce": True},
        "common": {"device_number": device_number},
        "dim_reduce": {
            "rho": boost_cfg.rho,
            "gamma": boost_cfg.gamma,
            "alpha": boost_cfg.alpha,
            "sigma": boost_cfg.sigma,
            "n_components": boost_cfg.n_components,
            "pca_mat_path": str(pca_mat_path) if pca_mat_path else None,
            "weight_load_dir": str(weight_load_dir) if weight_load_dir else None,
            "timeout": boost_cfg.timeout,
        },
    }


def reset_auto_boost() -> None:
    """Forget the AutoBoost singleton's configuration (see the module docstring)."""
    AutoBoost._instance = None


def build_stage_two(build: ModelBuild) -> Model:
    """``BoostOption.own_train_step`` of ``boost=dim_reduce``: the stage-one weights loaded,
    the PCA matrix found or computed (said on the console and tagged on the run), and the
    DimReduce ``Model``."""
    boost, runtime, tracker, network = build.cfg.boost, build.runtime, build.tracker, build.network
    weights = Path(boost.pretrained_weight_path)  # its optimizer state is ignored
    missing, _ = load_param_into_net(network, load_verified(weights))
    if missing:
        raise ValueError(
            f"boost.pretrained_weight_path={weights}: lacks parameters "
            f"{', '.join(missing[:5])} of this network"
        )
    print(f"stage two starts from the stage-one weights in {weights}", flush=True)
    snapshots = Path(boost.weight_load_dir) if boost.weight_load_dir else None
    # One PCA computer per node, as MindSpore's device_number means; ranks of one node
    # share the run directory.
    with pca_for_rank(boost, snapshots, build.run_dir, runtime.rank_id, runtime.group_size) as plan:
        reset_auto_boost()
        auto_boost = AutoBoost(
            boost.level,
            boost_config_dict(boost, runtime.group_size, plan.work_dir, plan.pca_mat_path),
        )
        # Replaces the optimizer with SGD(learning_rate=1) flagged for dim_reduce.
        network, optimizer = auto_boost.network_auto_process_train(
            network, nn.SGD(network.trainable_params(), learning_rate=1.0)
        )
    if runtime.rank_id != 0:
        print(
            f"rank {runtime.rank_id}: waiting up to {boost.timeout} s for rank 0's PCA matrix",
            flush=True,
        )
    # Waits (up to boost.timeout) for rank 0's split of the matrix, then builds DimReduce.
    train_cell = LossReturningBoostCell(nn.WithLossCell(network, build.loss_fn), optimizer)
    train_cell.set_train()
    # Model must not run AutoBoost again on the finished cell.
    reset_auto_boost()
    model = Model(
        train_cell,
        eval_network=nn.WithEvalCell(network, build.loss_fn),
        metrics=build.metrics,
        eval_indexes=[0, 1, 2],
    )
    if runtime.rank_id != 0:
        return model
    where = f" ({plan.cache})" if plan.cache else ""
    print(f"PCA matrix: {plan.source}{where}; {boost.n_components} components", flush=True)
    tracker.set_tags(
        {
            "ms_exp.pca.source": plan.source,
            "ms_exp.pca.cache": str(plan.cache or boost.pca_mat_path or ""),
        }
    )
    if plan.source == "computed":
        # The matrix belongs to stage one: log it there once (here if stage one has no run).
        owner = boost.stage_one_run_id or tracker.run_id
        tracker.log_artifact_to(owner, plan.cache, "pca")
    return model
