"""``python -m ms_exp.run --from-run <run id> [overrides ...]``: run a recorded run again,
from its recorded overrides with the extra ones on top, listing first what could make it
differ from the original."""

import platform
import shlex
import tempfile
from pathlib import Path
from typing import Any, List, Mapping, Sequence, Tuple, Union, cast

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from ms_exp.config.errors import InvalidConfig
from ms_exp.config.hydra_internals import args_parser
from ms_exp.config.record import check_recorded_overrides
from ms_exp.preflight.interpolations import without_hydra
from ms_exp.preflight.trust import check_read_back

FLAG = "--from-run"


def split_from_run(argv: Sequence[str]) -> Tuple[str, List[str]]:
    """``(run id or "", the other arguments)``; ``--from-run ID`` or ``--from-run=ID``."""
    rest, run_id, args = [], "", list(argv)
    while args:
        arg = args.pop(0)
        if arg == FLAG:
            if not args:
                raise InvalidConfig(f"{FLAG}: expected a run id after it")
            run_id = args.pop(0)
        elif arg.startswith(FLAG + "="):
            run_id = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return run_id, rest


def rerun_arguments(run_id: str, extra: Sequence[str]) -> List[str]:
    """The command-line overrides that re-run ``run_id``; prints what may differ."""
    from ms_exp.preflight.compose import ConfigSource, compose_config
    from ms_exp.tracking.records import NotRecorded, RunRecords
    from ms_exp.tracking.store import missing_store, quiet_artifact_downloads, resolve_tracking_uri

    quiet_artifact_downloads()
    flags, extra = _split_flags(extra)
    uri = resolve_tracking_uri(
        next((o.split("=", 1)[1] for o in extra if o.startswith("tracking.uri=")), None)
    )
    database = missing_store(uri)  # MlflowClient would create it, empty
    if database is not None:
        raise InvalidConfig(
            f"{FLAG}={run_id}: no MLflow store at {database}; expected the "
            "id of a run in an existing store (name the run's store with "
            "tracking.uri=...)"
        )
    records = RunRecords.open(uri)
    try:
        run = records.run(run_id)
    except NotRecorded as error:
        raise InvalidConfig(
            f"{FLAG}={run_id}: no such run in {uri} "
            f"({str(error).splitlines()[0][:200]}); expected the id of a run "
            "in that store"
        ) from None
    source = f"MLflow run {run_id} ({FLAG})"
    with tempfile.TemporaryDirectory(prefix="ms_exp_rerun_") as workdir:
        try:
            # Plain YAML: OmegaConf would resolve an interpolation as an item is read.
            recorded = _yaml(records.download(run_id, "hydra/overrides.yaml", workdir), list)
            config = OmegaConf.load(records.download(run_id, "config/config.yaml", workdir))
            name_flags, folders = _config_source(records, run_id, workdir)
        except (NotRecorded, OSError, ValueError, KeyError, TypeError):
            raise InvalidConfig(
                f"{FLAG}={run_id}: the run has no recorded config "
                "(hydra/overrides.yaml, config/config.yaml)"
            ) from None
    # The record is data: the job's own keys are re-applied, never a setting of Hydra or a
    # resolver that reads this machine (ms_exp/config/record.py). A re-run records beside
    # the run it repeats, not in a store the record names.
    check_recorded_overrides([str(o) for o in recorded], source)
    keys = [str(o).lstrip("+").partition("=")[0] for o in recorded]
    overrides = [
        str(o) for o, key in zip(recorded, keys) if key not in ("tracking.rerun_of", "tracking.uri")
    ]
    if "tracking.uri" in keys:
        overrides.append(f"tracking.uri={uri}")
    _refuse_unnamed_folders(run_id, folders, flags, extra)
    overrides += [*extra, f"tracking.rerun_of={run_id}"]
    own_flags, flags = flags, [*name_flags, *flags]
    try:  # Hydra's hydra.callbacks included: they are built too
        composed = compose_config(
            overrides,
            return_hydra_config=True,
            source=ConfigSource.from_args(args_parser().parse_args(flags)),
        )
    except InvalidConfig as error:
        raise InvalidConfig(f"{FLAG}: {error}") from None
    # The config the recorded overrides make builds only what this user trusts
    # (ms_exp/preflight/trust.py).
    check_read_back(composed, source, extra, _config_dirs(own_flags))
    differences = list_differences(run.data.tags, config, composed, extra)
    print(
        f"re-running MLflow run {run_id} ({run.info.run_name}) with: "
        + (shlex.join([*flags, *overrides]) or "(no overrides)"),
        flush=True,
    )
    if differences:
        print(f"differences from run {run_id} that may change the result:", flush=True)
        for line in differences:
            print(f"  - {line}", flush=True)
    else:
        print(
            "same code, packages, data and config as the original run: on CPU in graph "
            "mode the same weights bit for bit (optimizer state may differ in values "
            "below 1.2e-38, see docs/guides/reproducing.md)",
            flush=True,
        )
    return [*flags, *overrides]


# Hydra's flags that take a value (``--config-dir conf``), kept apart from the overrides.
VALUE_FLAGS = (
    *("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn"),
    *("--cfg", "-c", "--package", "-p"),
)


def _split_flags(arguments: Sequence[str]) -> Tuple[List[str], List[str]]:
    flags, overrides, rest = [], [], list(arguments)
    while rest:
        argument = rest.pop(0)
        if argument in VALUE_FLAGS and rest:
            flags += [argument, rest.pop(0)]
        elif argument.startswith("-"):
            flags.append(argument)
        else:
            overrides.append(argument)
    return flags, overrides


def _config_source(records: Any, run_id: str, workdir: str) -> Tuple[List[str], List[str]]:
    """Where the run's config came from (Hydra's record, ``hydra/hydra.yaml``): its
    ``--config-name`` flag, and the ``--config-dir``, ``--config-path`` and
    ``hydra.searchpath`` arguments that named a config folder of the user's."""
    from ms_exp.preflight.compose import CONFIG_NAME, conf_dir

    hydra = _yaml(records.download(run_id, "hydra/hydra.yaml", workdir), dict)["hydra"]
    folders = []
    for source in hydra["runtime"]["config_sources"]:
        if source["provider"] == "command-line" and source["schema"] == "file":
            folders += ["--config-dir", str(source["path"])]
        elif (
            source["provider"] == "main"
            and source["schema"] == "file"
            and source["path"] != str(conf_dir())
        ):
            folders += ["--config-path", str(source["path"])]
    folders += [
        str(o) for o in hydra["overrides"]["hydra"] if str(o).startswith("hydra.searchpath=")
    ]
    name = hydra["job"]["config_name"]
    return (["--config-name", str(name)] if name not in (None, CONFIG_NAME) else []), folders


def _yaml(path: Path, kind: type) -> Any:
    """A recorded YAML file as plain data of ``kind``: a ValueError when it is not."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as error:
        raise ValueError(str(error)) from None
    if not isinstance(data, kind):
        raise ValueError(f"{path}: not a {kind.__name__}")
    return data


def _refuse_unnamed_folders(
    run_id: str, recorded: Sequence[str], flags: Sequence[str], extra: Sequence[str]
) -> None:
    """A config folder is code (its targets are trusted, a ``pkg://`` search path imports a
    package): one the run was composed from is used again only where this command names it
    too, never taken from the record."""
    named = {str(Path(folder).resolve()) for folder in _config_dirs(flags)}
    missing, rest = [], list(recorded)
    while rest:
        argument = rest.pop(0)
        if argument.startswith("hydra.searchpath="):
            if argument not in extra:
                missing.append(argument)
        elif str(Path(path := rest.pop(0)).resolve()) not in named:
            missing += [argument, path]
    if missing:
        raise InvalidConfig(
            f"{FLAG}={run_id}: the run was composed with {shlex.join(missing)} (its "
            "hydra/hydra.yaml); a config folder is code, so a re-run takes it only from "
            f"your command line; expected: python -m ms_exp.run {FLAG} {run_id} "
            f"{shlex.join(missing)}"
        )


def _config_dirs(flags: Sequence[str]) -> List[str]:
    """The folders the user's own ``--config-dir`` and ``--config-path`` name."""
    args = args_parser().parse_args(list(flags))
    return [folder for folder in (args.config_dir, args.config_path) if folder]


def list_differences(
    tags: Mapping[str, str],
    recorded_config: Union[DictConfig, ListConfig],
    cfg: DictConfig,
    extra: Sequence[str],
) -> List[str]:
    """What may make a re-run differ from the original: versions, code, data, and config
    values of ``cfg`` (composed by ``compose_rerun``) other than ``recorded_config``'s."""
    from ms_exp.tracking import provenance
    from ms_exp.tracking.params import flatten

    lines = []
    for name, version in provenance.package_versions().items():
        before = tags.get(f"ms_exp.version.{name}")
        if before and before != version:
            lines.append(f"{name} {before} then, {version} now")
    if tags.get("ms_exp.python") not in (None, platform.python_version()):
        lines.append(f"Python {tags['ms_exp.python']} then, {platform.python_version()} now")
    state = provenance.git_state(provenance.PROJECT_DIR)
    if state:
        before = tags.get("ms_exp.git.project.commit")
        if before and before != state["commit"]:
            lines.append(f"project commit {before[:12]} then, {state['commit'][:12]} now")
        if state["dirty"] == "true":
            lines.append("the project's working tree has uncommitted changes now")
    if tags.get("ms_exp.git.project.dirty") == "true":
        lines.append(
            "the project's working tree had uncommitted changes then (provenance/project.diff)"
        )
    fingerprint = provenance.dataset_fingerprint(cfg.dataset)["digest"]
    before = tags.get("ms_exp.dataset_fingerprint")
    if before and before != fingerprint:
        lines.append(f"dataset fingerprint {before} then, {fingerprint} now")
    changed_by_user = {o.split("=", 1)[0].lstrip("+~") for o in extra}
    # Containers of DictConfigs: dicts.
    then = flatten(cast(dict, OmegaConf.to_container(recorded_config, resolve=False)))
    now = flatten(
        cast(dict, OmegaConf.to_container(without_hydra(cfg), resolve=False, enum_to_str=True))
    )
    for key in sorted(set(then) | set(now)):
        if key in changed_by_user or key == "tracking.rerun_of":
            continue
        if "${hydra:" in str(now.get(key, "")):  # run-directory paths differ by design
            continue
        if then.get(key) != now.get(key):
            lines.append(f"config {key}: {then.get(key)!r} then, {now.get(key)!r} now")
    return lines
