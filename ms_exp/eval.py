"""``python -m ms_exp.eval``: the training-flow tutorial's inference flow for a finished run.

    python -m ms_exp.eval --run-id <id> [--checkpoint last|best|PATH] [key=value ...]
    python -m ms_exp.eval --checkpoint <run dir>/checkpoints/rank_0/best.ckpt [key=value ...]
    python -m ms_exp.eval --checkpoint <run dir>/checkpoints/merged/rank_0/checkpoint0.ckpt
    python -m ms_exp.eval --model models:/NAME/VERSION | models:/<model id> [key=value ...]

Builds the run's network and eval dataset from the config the run recorded (a model's own
config.yaml with ``--model``: ms_exp/job/model_package.py), loads the checkpoint
(``load_checkpoint``; a file given with ``--checkpoint`` is evaluated as it is, a sliced
run's ``last`` is merged first), runs ``Model.eval`` with top-1 (and top-5 when there are more than
five classes) accuracy, or AUC and log loss for Wide&Deep, prints the tutorial's
``result: ... ckpt= ...`` line, and records the result in MLflow as a child run of the
evaluated run (with ``--model``, of the run that logged the model; with a ``--checkpoint``
file of a run directory, of the run recorded from that directory).
"""

import argparse
import difflib
import shlex
import sys
from pathlib import Path
from typing import Any, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from ms_exp.checkpoint.transform import (
    CkptError,
    is_sliced_run,
    merge_checkpoints,
    merge_shares,
    merged_file,
    run_sources,
    saves_shares,
)
from ms_exp.config.errors import ConfigError, InvalidConfig
from ms_exp.config.run_config import choices_from_config, load_run_config
from ms_exp.config.schema import StandAloneParallel
from ms_exp.config.targets import component_name
from ms_exp.preflight.trust import check_read_back
from ms_exp.preflight.validate import validate_for_evaluation
from ms_exp.tracking.records import NotRecorded, RunRecords
from ms_exp.tracking.store import (
    StoreError,
    exit_if_damaged,
    is_local_store,
    masked,
    missing_store,
    not_a_database,
    password_refusal,
    python_command,
    quiet_artifact_downloads,
    resolve_tracking_uri,
    sqlite_path,
)

EXIT_BAD_INPUT = 2


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ms_exp.eval",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-id", help="MLflow run id of an ms_exp.run job")
    parser.add_argument(
        "--checkpoint", help="last (the default) or best of --run-id, or a checkpoint file"
    )
    parser.add_argument(
        "--model",
        help="an MLflow model of a run: models:/NAME/VERSION (Model Registry) "
        "or models:/<model id>; alone, without --run-id or --checkpoint",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="the run's config.yaml (default: found from the run or the "
        "checkpoint's run directory)",
    )
    parser.add_argument(
        "--config-dir",
        type=Path,
        help="your project's config folder: the _target_s its YAML files name may be built "
        "from a config read back from a store or a run directory (docs/guides/security.md)",
    )
    parser.add_argument(
        "--tracking-uri",
        help="MLflow store of the run (default: the run's tracking.uri, "
        "else sqlite:///mlflow.db here)",
    )
    parser.add_argument("overrides", nargs="*", help="key=value changes, e.g. dataset.path=...")
    return parser.parse_args(argv)


CHECKPOINT_NAMES = ("last", "best")


def check_checkpoint_flag(value: Optional[str], run_id: Optional[str]) -> str:
    """``--checkpoint`` as given, or ``last`` for a run; refused before any store is read
    when it is neither last, best nor a file that exists."""
    if value is None and not run_id:
        raise ConfigError("--run-id", None, "--run-id <run id> or --checkpoint <file>", "missing")
    if value is None:
        return "last"
    if value in CHECKPOINT_NAMES:
        if not run_id:
            raise ConfigError(
                "--checkpoint",
                value,
                "a checkpoint file that exists (last and best name a checkpoint of --run-id)",
                "needs --run-id",
            )
        return value
    if Path(value).is_file():
        return value
    close = difflib.get_close_matches(value, CHECKPOINT_NAMES, n=1, cutoff=0.5)
    problem = f"no such file (did you mean {close[0]}?)" if close else "no such file"
    allowed = (
        "last or best (of --run-id), or a checkpoint file that exists"
        if run_id
        else "a checkpoint file that exists, or last or best with --run-id"
    )
    raise ConfigError("--checkpoint", value, allowed, problem)


def fetch_from_run(uri: str, run_id: str, which: str, workdir: Path) -> Tuple[Path, Path, str]:
    """The recorded config of ``--run-id``, its ``which`` checkpoint (last, best, or a file)
    and how to name it; a missing store (MlflowClient would create an empty one), run, or a
    run that is not a job's (a sweep's parent, an evaluation) is refused in one line."""
    try:
        records = RunRecords.existing(uri)
        run = records.job_run(run_id)
    except StoreError as error:
        raise ConfigError("--run-id", run_id, error.allowed, error.problem) from None
    if "config/config.yaml" not in records.artifact_paths(run_id, "config"):
        raise ConfigError(
            "--run-id",
            run_id,
            "the id of an ms_exp.run job's run",
            "the run has no config/config.yaml artifact",
        )
    config = records.download(run_id, "config/config.yaml", workdir)
    if which not in CHECKPOINT_NAMES:
        return config, Path(which), str(Path(which).resolve())
    artifact = run.data.tags.get(f"ms_exp.checkpoint.{which}", "")
    if not artifact:
        raise ConfigError(
            "--checkpoint",
            which,
            "a checkpoint the run saved (it saved none: checkpoint=none or keep_best=false)",
        )
    logged = records.artifact_paths(run_id, str(Path(artifact).parent))
    if artifact in logged:  # named as it is logged: the download is deleted after
        downloaded = records.download(run_id, artifact, workdir)
        if f"{artifact}.sha256" in logged:  # a safetensors file's digest, checked on load
            records.download(run_id, f"{artifact}.sha256", workdir)
        return config, downloaded, f"{artifact} of MLflow run {run_id}"
    # tracking.log_checkpoints=none: the file may still be in the run directory here.
    local = Path(run.data.tags.get("ms_exp.run_dir", "")) / artifact
    if not local.is_file():
        raise ConfigError(
            "--checkpoint",
            which,
            f"a checkpoint logged to the run or present "
            f"at {local} (tracking.log_checkpoints=none and no local copy)",
        )
    return config, local, str(local.resolve())


MODEL_URI = "models:/NAME/VERSION or models:/<model id> of a run's MLflow model"


def fetch_model(uri: str, model_uri: str, workdir: Path) -> Tuple[Path, Path, str, str]:
    """Download the model ``model_uri`` names (ms_exp/job/model_package.py): its config,
    its checkpoint, the id of the run that logged it, and how to name it; an unknown name,
    version or id is refused in one line listing what exists."""
    from ms_exp.job.model_package import MODEL_TAG, model_files

    if not model_uri.startswith("models:/") or not model_uri[len("models:/") :].strip("/"):
        raise ConfigError("--model", model_uri, MODEL_URI)
    try:
        records = RunRecords.existing(uri)
    except StoreError as error:
        raise ConfigError("--model", model_uri, error.allowed, error.problem) from None
    name, _, version = model_uri[len("models:/") :].strip("/").partition("/")
    model_id = _registered_model_id(records, name, version, model_uri) if version else name
    try:
        logged, local = records.download_logged_model(model_id, workdir / "model")
    except NotRecorded:
        raise ConfigError(
            "--model", model_uri, MODEL_URI, f"no model {model_id} in {uri}"
        ) from None
    try:
        config, checkpoint = model_files(local)
    except (ValueError, OSError) as error:
        raise ConfigError(
            "--model", model_uri, "a model an ms_exp.run job logged", str(error)
        ) from None
    run_id = logged.source_run_id
    shown = f"{model_uri} (the {logged.tags.get(MODEL_TAG, '')} checkpoint of MLflow run {run_id})"
    return config, checkpoint, run_id, shown


def _registered_model_id(records: RunRecords, name: str, version: str, model_uri: str) -> str:
    versions = records.model_versions(name)
    if version not in versions:
        if versions:
            problem = f"registered model {name} has versions {', '.join(versions)}"
        else:
            known = ", ".join(records.registered_models())
            registry = f"registered: {known}" if known else "the Model Registry is empty"
            problem = f"no registered model {name} ({registry})"
        raise ConfigError("--model", model_uri, MODEL_URI, problem)
    try:
        found = records.model_version(name, version)
    except NotRecorded as error:
        raise ConfigError("--model", model_uri, MODEL_URI, str(error)) from None
    # A SQLite store answers model_id=None for a version created with one; its source,
    # models:/<model id>, keeps it (docs/design.md#mlflow-model-version-source).
    source = found.source or ""
    model_id = found.model_id or (
        source[len("models:/") :] if source.startswith("models:/m-") else None
    )
    if not model_id:
        raise ConfigError(
            "--model",
            model_uri,
            "a version registered from an MLflow model (tracking.register_model)",
            f"version {version} is {source}",
        )
    return model_id


def read_back_source(args: argparse.Namespace) -> str:
    """Where the config of this evaluation was read back from, as a refusal names it."""
    if args.model:
        return f"the MLflow model {args.model}"
    if args.run_id:
        return f"MLflow run {args.run_id}"
    return f"the run directory of {args.checkpoint}"


NOT_IN_A_RUN = (
    "not in a run directory (<run dir>/checkpoints/rank_<r>/ or <run dir>/"
    "checkpoints/merged/rank_<r>/), so no config.yaml says which network it holds"
)


def config_beside(checkpoint: str) -> Path:
    """The config.yaml of the run directory holding ``checkpoint`` (in ``checkpoints/`` or
    ``checkpoints/merged/``); elsewhere refused, naming the flag that says its network."""
    from ms_exp.tracking.store import is_run_id

    folder = Path(checkpoint).resolve().parent
    above = folder.parent.parent if folder.parent.name == "merged" else folder.parent
    if folder.name.startswith("rank_") and above.name == "checkpoints":
        return above.parent / "config.yaml"
    allowed = (
        f"--run-id {folder.parent.name} with it (the run it was merged from), "
        "or --config <the run's config.yaml>"
        if folder.parent.parent.name == "merged" and is_run_id(folder.parent.name)
        else "--run-id <run id> or --config <the run's config.yaml> with it"
    )
    raise ConfigError("--checkpoint", checkpoint, allowed, NOT_IN_A_RUN)


def refuse_a_slice(checkpoint: Path, cfg: DictConfig) -> None:
    """A file of a sliced run's ``checkpoints/rank_<r>/`` (not its whole ``best.*``)
    holds one rank's slice: refused in one line with the merge command and the file it
    writes, rather than evaluated (wrong shapes) or replaced by another file."""
    # MindSpore is imported once the command line is known to be right.
    from ms_exp.checkpoint.files import SUFFIXES, best_name, format_of

    folder = checkpoint.resolve().parent
    shares = saves_shares(cfg)
    if not (
        (is_sliced_run(cfg) or shares)
        and folder.name.startswith("rank_")
        and folder.parent.name == "checkpoints"
        and checkpoint.name not in {best_name(fmt) for fmt in SUFFIXES}
    ):
        return
    run_dir = folder.parent.parent
    merged = merged_file(run_dir / "checkpoints", cfg.checkpoint.prefix, format_of(cfg.checkpoint))
    raise ConfigError(
        "--checkpoint",
        str(checkpoint),
        f"a whole checkpoint: merge the {'shares' if shares else 'slices'} with "
        f"{python_command()} -m ms_exp.ckpt merge "
        f"{shlex.quote(str(run_dir))}, then pass --checkpoint {shlex.quote(str(merged))} (or "
        "--run-id <run id> without --checkpoint: its last step, merged)",
        "one rank's share of a run saved with checkpoint.remove_redundancy=true"
        if shares
        else "one rank's slice of a sliced run (checkpoint=sliced)",
    )


def merge_run(source: str, workdir: Path, uri: str) -> Tuple[Path, str]:
    """One full checkpoint from every rank's slices of a sliced run, by MindSpore's
    transform_checkpoints (ms_exp/checkpoint/transform.py), in ``workdir`` (deleted after the
    evaluation), and what it was merged from, to name in place of that temporary file."""
    folder, strategy, prefix, shares = run_sources(source, workdir, uri)
    said: List[str] = []  # what it merged, first
    if shares:  # checkpoint.remove_redundancy: the ranks' shares together
        merged = merge_shares(folder, workdir / "merged", prefix, report=said.append)
        tool = ""
    else:
        if strategy is None or not strategy.is_file():
            raise CkptError(f"{source}: the run's strategy file is missing; cannot merge slices")
        merged = merge_checkpoints(folder, strategy, workdir / "merged", prefix, report=said.append)
        tool = ", with " + (
            "unified_safetensors" if merged.suffix == ".safetensors" else "transform_checkpoints"
        )
    shown = said[0]
    scratch = f"{workdir.resolve()}/"
    if scratch in shown:  # downloaded artifacts, deleted after the evaluation
        shown = f"{shown.replace(scratch, '')}, artifacts of MLflow run {source}"
    print(f"{shown}{tool}, for this evaluation", flush=True)
    return merged, shown


def prepare(cfg: DictConfig, checkpoint: Path) -> Tuple[Any, Any]:
    """The ``Model`` to evaluate, its weights loaded from ``checkpoint``, and the eval set;
    built before an MLflow run is opened for the evaluation, so a damaged checkpoint, or one
    of another network (another shape, a missing parameter), is refused in one line and
    leaves no FAILED run."""
    import mindspore as ms

    from ms_exp.checkpoint.files import (
        DamagedCheckpoint,
        check_shapes,
        load_verified,
        verify_checkpoint,
    )
    from ms_exp.data import create_datasets
    from ms_exp.models import create_network
    from ms_exp.models.options import model_option
    from ms_exp.placement.tables import create_placement
    from ms_exp.train.context import init_env
    from ms_exp.train.losses import create_training_loss
    from ms_exp.train.metrics import eval_metrics

    try:
        verify_checkpoint(checkpoint)  # whole, before the network and data are built
        # Evaluation needs one process whatever the run trained with: every rank of a data
        # parallel run holds the same weights.
        init_env(cfg.trainer, OmegaConf.structured(StandAloneParallel), cfg.checkpoint.strategy)
        _, eval_set, spec = create_datasets(cfg.dataset)
        option = model_option(cfg.model)
        network = create_network(cfg.model, spec, create_placement(cfg.placement))
        weights = load_verified(checkpoint)
    except DamagedCheckpoint as error:
        raise CkptError(str(error)) from None
    check_shapes(network, weights, "--checkpoint", str(checkpoint))
    not_loaded, _ = ms.load_param_into_net(network, weights)
    if not_loaded:
        raise ConfigError(
            "--checkpoint",
            str(checkpoint),
            f"a checkpoint of this network (missing {', '.join(not_loaded)})",
        )
    if option.evaluation is not None:
        return ms.Model(network, **option.evaluation(network)), eval_set
    loss = create_training_loss(cfg.loss, spec.num_classes)
    return ms.Model(network, loss_fn=loss, metrics=eval_metrics(cfg, spec.num_classes)), eval_set


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m ms_exp.eval``; SIGTERM ends it as Ctrl-C does: the checkpoint copies in
    its temporary folder removed, its MLflow run KILLED, exit status 130."""
    from ms_exp.tracking.lifecycle import interruptible

    return interruptible(lambda: _evaluate_command(argv))


def _evaluate_command(argv: Optional[List[str]]) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    quiet_artifact_downloads()
    from ms_exp.checkpoint.scratch import scratch_folder
    from ms_exp.tracking.lifecycle import tracked_run

    uri = resolve_tracking_uri(args.tracking_uri)
    with scratch_folder("ms_exp_eval_") as workdir:
        try:
            if args.model and (args.run_id or args.checkpoint):
                raise ConfigError(
                    "--model",
                    args.model,
                    "--model alone: the model holds its "
                    "config and checkpoint (not with --run-id or --checkpoint)",
                )
            refused = password_refusal("--tracking-uri", args.tracking_uri)
            if refused:
                raise InvalidConfig(refused)
            which = args.model or check_checkpoint_flag(args.checkpoint, args.run_id)
            parent_run_id, run_dir = args.run_id, None
            if args.model:
                config, checkpoint, parent_run_id, shown = fetch_model(uri, args.model, workdir)
            elif args.run_id:
                config, checkpoint, shown = fetch_from_run(uri, args.run_id, which, workdir)
            else:
                checkpoint, shown = Path(which), str(Path(which).resolve())
                config = args.config or config_beside(which)
                run_dir = None if args.config else config.parent
            config = args.config or config
            if args.config and not args.config.is_file():
                raise ConfigError("--config", str(config), "the run's config.yaml")
            if not config.is_file():
                raise ConfigError(
                    "--checkpoint",
                    which,
                    "--run-id <run id> or --config <the run's config.yaml> with it",
                    f"its run directory {config.parent} has no config.yaml",
                )
            source = None if args.config else read_back_source(args)
            cfg = load_run_config(config, args.overrides, source)
            if source:  # written by a run, perhaps someone else's: only trusted code
                check_read_back(cfg, source, args.overrides, [args.config_dir])
            validate_for_evaluation(cfg, choices_from_config(cfg))
            if not args.tracking_uri and not args.run_id and not args.model:
                uri = resolve_tracking_uri(cfg.tracking.uri)
                if source and not is_local_store(uri):  # it would get your login
                    raise ConfigError(
                        "tracking.uri",
                        masked(uri),
                        "--tracking-uri naming the server to record the evaluation in",
                        f"is a server named by the config read back from {source}",
                    )
            database = sqlite_path(uri)
            unusable = not_a_database(database) if database is not None else None
            if unusable is not None:
                raise ConfigError(
                    "--tracking-uri" if args.tracking_uri else "tracking.uri",
                    uri,
                    "an MLflow store to record the evaluation in",
                    unusable,
                )
            if which not in CHECKPOINT_NAMES and not args.model:
                # A file given is evaluated as it is: a merged checkpoint is whole.
                refuse_a_slice(checkpoint, cfg)
            elif which == "last" and args.run_id and (is_sliced_run(cfg) or saves_shares(cfg)):
                checkpoint, shown = merge_run(args.run_id, workdir, uri)
            model, eval_set = prepare(cfg, checkpoint)
        except (InvalidConfig, CkptError) as error:
            print(f"ms_exp.eval: error: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except Exception as error:  # damage MLflow met after the checks
            return exit_if_damaged("ms_exp.eval", "--tracking-uri", uri, error)
        record = cfg.tracking.enabled
        missing = missing_store(uri) if record else None
        if missing is not None:
            record = False  # evaluating reads a run: it never creates a store to record in
            print(
                f"not recorded in MLflow: no store at {missing} (searched {uri}; "
                "pass --tracking-uri to record the evaluation)",
                flush=True,
            )
        if record and run_dir is not None:  # a file of a run directory: linked to its run
            parent_run_id = RunRecords.open(uri).run_recorded_from(run_dir)
        tags = {
            "ms_exp.evaluated_checkpoint": shown,
            "ms_exp.dataset": component_name(cfg.dataset),
            "ms_exp.model": component_name(cfg.model),
            **({"ms_exp.evaluated_model": args.model} if args.model else {}),
        }
        name = f"eval-{cfg.tracking.run_name or component_name(cfg.model)}-{checkpoint.stem}"
        # The evaluation's own CPU and memory, sampled as the training run's were.
        with tracked_run(
            record,
            uri,
            cfg.tracking.experiment_name,
            name,
            tags,
            parent_run_id=parent_run_id,
            system_metrics_interval=cfg.tracking.system_metrics_interval,
        ) as tracker:
            result = model.eval(eval_set, dataset_sink_mode=False)
            # ``shown``: a merged checkpoint's temporary file named by what it was merged from.
            print("result:", result, "ckpt=", shown, flush=True)
            tracker.log_metrics({f"eval/{k}": float(v) for k, v in result.items()}, step=0)
            if tracker.enabled:
                print(
                    f"MLflow run {tracker.run_id} (child of {parent_run_id or 'no run'}) in {uri}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
