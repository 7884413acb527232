"""``python -m ms_exp.run [group=option ...] [key=value ...]``: one training run.

The command line is Hydra's (``-m`` sweeps, ``--cfg job``, ``hydra.run.dir=...``). Before
Hydra starts, every job of the command line is composed and validated here, so a bad
override is refused with one line and exit status 2, and no run directory or MLflow run
is created for it.
"""

import argparse
import errno
import os
import re
import shlex
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any, List, NoReturn, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from ms_exp.config.errors import InvalidConfig
from ms_exp.config.hydra_internals import (
    args_parser,
    composed_already,
    sweep_jobs_composed_once,
)
from ms_exp.config.schema import GROUP_SCHEMAS, register_schemas
from ms_exp.config.targets import without_unused_names
from ms_exp.pool import POOL_LAUNCHER
from ms_exp.pool.dispatch import close_pools
from ms_exp.pool.launcher import started_pool
from ms_exp.preflight.compose import (
    CONF_DIR,
    CONFIG_NAME,
    ConfigSource,
    compose_config,
    group_options,
    hydra_config_of,
    preflight,
)
from ms_exp.preflight.overrides import parse_overrides
from ms_exp.preflight.plugins import register_plugins
from ms_exp.preflight.rerun import rerun_arguments, split_from_run
from ms_exp.preflight.validate import validate_once
from ms_exp.search.checks import fail_fast_overrides
from ms_exp.search.trial import objective_value
from ms_exp.tracking.run_folder import release_all
from ms_exp.tracking.store import (
    damaged_refusal,
    damaged_store,
    exit_if_damaged,
    password_refusal,
    resolve_tracking_uri,
    without_passwords,
)
from ms_exp.tracking.sweep import end_active_sweep

EXIT_BAD_CONFIG = 2
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
EXIT_INTERRUPTED = 130

register_schemas()
register_plugins()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=CONFIG_NAME)
def hydra_job(cfg: DictConfig) -> Optional[float]:
    """One Hydra job; returns the value a sweeper optimises: the final eval metric named by
    sweep.metric (by default eval/accuracy, or eval/auc for Wide&Deep)."""
    # A job the preflight checked in this process is not checked again; one a sweeper made
    # up (values the launcher never saw) is.
    hydra_cfg = HydraConfig.get()
    validate_once(cfg, hydra_cfg.runtime.choices)
    # What the job saves and records names the loss and optimizer it builds.
    cfg = without_unused_names(cfg)
    from ms_exp.job.run_job import run_job
    from ms_exp.job.supervise import WorkersFailed
    from ms_exp.tracking.run_folder import FolderRefused, discard_if_unused
    from ms_exp.tracking.sidecar import TrackingFailed

    run_dir = Path(hydra_cfg.runtime.output_dir)
    hydra_dir = run_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else None
    try:
        result = run_job(cfg, run_dir, hydra_dir, list(hydra_cfg.overrides.task))
    except (OSError, FolderRefused, WorkersFailed, TrackingFailed) as error:
        if hydra_cfg.mode != RunMode.RUN:
            raise  # a sweep's job: the sweep reports it among its failed jobs
        status = 1
        if isinstance(error, OSError):
            if error.errno not in FULL_DISK:
                raise
            # The job has ended its run FAILED where it could; one line says the cause.
            line = (
                f"{error.filename or run_dir}: {error.strerror}; free some space, then "
                f"continue the run in {run_dir} with trainer.resume=auto"
            )
        elif isinstance(error, FolderRefused):
            # Another run's folder, or one a process works in: refused before anything was
            # written into it (ms_exp/tracking/run_folder.py).
            discard_if_unused(run_dir, hydra_cfg.output_subdir)
            line, status = str(error), EXIT_BAD_CONFIG
        else:
            # A rank failed, or the store turned the run away: the run ended FAILED; the line
            # names why (a traceback would only show where ms_exp noticed).
            uri = resolve_tracking_uri(cfg.tracking.uri)
            problem = damaged_store(error, uri)
            line = damaged_refusal("tracking.uri", uri, problem) if problem else str(error)
        print(f"ms_exp: error: {line}", file=sys.stderr, flush=True)
        sys.exit(status)
    return objective_value(result.final_eval, cfg.sweep.metric)


# Hydra runs one of these per command line (run_hydra).
COMMANDS = {
    "run": "--run",
    "multirun": "-m/--multirun",
    "cfg": "--cfg",
    "info": "--info",
    "shell_completion": "--shell-completion",
}


def parse_args(argv: List[str]) -> argparse.Namespace:
    """Hydra's own command line, its mistakes refused in one line (argparse would print its
    usage block, and Hydra a traceback for two commands at once)."""
    parser: Any = args_parser()
    # argparse documents error() as the method to override; Hydra made the parser.
    parser.error = lambda message: _refuse_flag(parser, argv, message)
    args = parser.parse_args(argv)
    given = [flag for dest, flag in COMMANDS.items() if getattr(args, dest) not in (None, False)]
    if len(given) > 1:
        raise InvalidConfig(
            f"{' with '.join(given)}: not allowed together; expected one of "
            f"{', '.join(COMMANDS.values())} (--cfg prints one job's config: drop -m to see it)"
        )
    if args.resolve and not (args.cfg or args.help):
        raise InvalidConfig("--resolve: not allowed alone; expected --cfg job|hydra|all with it")
    return args


def _refuse_flag(parser: argparse.ArgumentParser, argv: List[str], message: str) -> NoReturn:
    unknown = re.fullmatch(r"unrecognized arguments: (.*)", message)
    if unknown:
        first = unknown.group(1).split()[0]
        if not first.startswith("-"):  # an override after a flag that follows overrides
            overrides = args_parser().parse_intermixed_args(argv).overrides
            flags = list(argv)
            for override in overrides:
                flags.remove(override)
            flags += overrides
            raise InvalidConfig(
                f"override {first!r} after a flag: Hydra reads the overrides as one group; "
                f"expected the flags before them: python -m ms_exp.run {shlex.join(flags)}"
            )
        flags = [a.option_strings[0] for a in parser._actions if a.option_strings]
        raise InvalidConfig(
            f"{first}: unknown flag; expected one of {', '.join(flags)}, "
            f"--from-run, or key=value overrides"
        )
    argument = re.fullmatch(r"argument (\S+): (.*)", message)
    if argument:
        flag, problem = argument.groups()
        choice = re.fullmatch(r"invalid choice: (.*) \(choose from (.*)\)", problem)
        if choice:
            raise InvalidConfig(
                f"{flag}={choice.group(1)}: not allowed; expected one of "
                f"{choice.group(2).replace(chr(39), '')}"
            )
        extra = re.fullmatch(r"ignored explicit argument (.*)", problem)
        if extra:
            raise InvalidConfig(
                f"{flag}={extra.group(1)}: not allowed; expected the flag alone (it takes no value)"
            )
        raise InvalidConfig(f"{flag}: {problem}")
    raise InvalidConfig(message)


def print_help(overrides: List[str], source: Optional[ConfigSource] = None) -> None:
    cfg = compose_config(overrides, source=source)
    # Every option on the whole search path: ms_exp's and those of the user's folders.
    found = group_options([*GROUP_SCHEMAS, "experiment", "hydra/launcher"], overrides, source)
    experiments = found.pop("experiment", [])
    launchers = found.pop("hydra/launcher", [])
    groups = "\n".join(f"  {group:<11} {', '.join(options)}" for group, options in found.items())
    print(f"""ms_exp: one MindSpore training run from Hydra config groups, recorded in MLflow.

usage: python -m ms_exp.run [group=option ...] [key=value ...]
       python -m ms_exp.run -m key=a,b,c ...        (a sweep: one job per combination)
       python -m ms_exp.report SWEEP_DIR|PARENT_RUN_ID   (a sweep's table and plots)
       python -m ms_exp.run --from-run RUN_ID [key=value ...]   (re-run a recorded run)
       python -m ms_exp.run --cfg job               (print the resolved config)
       python -m ms_exp.run --config-dir conf ...   (your own options in conf/GROUP/*.yaml)

== Config groups (group=option) ==
{groups}
  +experiment {", ".join(experiments)}   (presets: experiments/, and yours in conf/experiment)
  hydra/launcher {", ".join(launchers)}   (with -m: jobs at the same time, or on SLURM)

== Config (override any key=value) ==
What each key means, its type and the values allowed: docs/reference/config.md of ms_exp's
source (each group's section); --cfg job prints a job's config with your overrides.

{OmegaConf.to_yaml(cfg)}
Hydra's own flags: --hydra-help""")


def share_import_path() -> None:
    """Put the working directory first on ``PYTHONPATH``: processes started for the jobs
    (msrun's ranks, joblib and submitit workers) import the user's modules from it, as
    ``python -m`` lets this process do."""
    cwd = os.getcwd()
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if paths[:1] != [cwd]:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *paths])


def print_job_config(overrides: List[str], source: ConfigSource, resolve: bool) -> None:
    """``--cfg job`` as Hydra prints it, but the config the job uses: a ``name`` beside the
    ``_target_`` that is built instead is null (without_unused_names), as in the run's
    config.yaml and params. Hydra prints the rest (``--cfg hydra|all``, ``--package``)."""
    cfg = compose_config(overrides, return_hydra_config=True, source=source)
    if resolve:
        with hydra_config_of(cfg, cfg.hydra.run.dir):  # ${hydra:...} as the job sees it
            OmegaConf.resolve(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    sys.stdout.write(OmegaConf.to_yaml(without_unused_names(cfg)))


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_id = ""
    configs: List[DictConfig] = []
    try:
        run_id, argv = split_from_run(argv)
        if run_id:
            argv = rerun_arguments(run_id, argv)
        args = parse_args(argv)
        # Where Hydra will look for the config: --config-path/--config-name/--config-dir.
        source = ConfigSource.from_args(args, hydra_job)
        if args.help:
            print_help(args.overrides, source)
            return 0
        # --cfg, --info and shell completion only print: the overrides' grammar is checked,
        # and a password typed into one (it would be printed), Hydra reports the rest itself.
        if not (args.hydra_help or args.cfg or args.info or args.shell_completion):
            configs = preflight(args.overrides, multirun=args.multirun, source=source)
            if args.multirun:
                argv = [*argv, *fail_fast_overrides(configs[0], args.overrides)]
        elif not args.shell_completion:
            for override in parse_overrides(args.overrides, multirun=False):
                value = override.value()
                refused = isinstance(value, str) and password_refusal(override.key_or_group, value)
                if refused:
                    raise InvalidConfig(refused)
            if args.cfg == "job" and args.package is None:
                print_job_config(args.overrides, source, args.resolve)
                return 0
    except InvalidConfig as error:
        # The line repeats what was typed: a URL's password in it is shown as ***.
        print(f"ms_exp: error: {without_passwords(str(error))}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    except Exception as error:  # --from-run read a store MLflow found damaged
        return exit_if_damaged(
            "ms_exp",
            f"--from-run={run_id}" if run_id else "tracking.uri",
            next((a.split("=", 1)[1] for a in argv if a.startswith("tracking.uri=")), None),
            error,
        )
    sys.argv = [sys.argv[0], *argv]
    share_import_path()
    if configs and not args.multirun and configs[0].tracking.enabled:
        # The job's MLflow sidecar imports MLflow while the job imports MindSpore: the job
        # waits for its run before training.
        from ms_exp.tracking.sidecar import start_spare

        start_spare(resolve_tracking_uri(configs[0].tracking.uri))
    elif args.multirun and configs and configs[0].hydra.launcher._target_ == POOL_LAUNCHER:
        # The pool's workers import MindSpore and MLflow on the cores that would wait while
        # Hydra creates the sweep's parent run; its launcher takes them
        # (docs/design.md#device-pool).
        started_pool(configs[0], early=True)
    from ms_exp.tracking.lifecycle import terminate_as_interrupt

    try:
        # A sweep's parent run spans the jobs: SIGTERM between or around them must end it
        # KILLED too, not leave it RUNNING (each job's own run already handles it;
        # docs/design.md#mlflow-run-status-on-signals).
        # A single run: Hydra would compose its config again; it is the preflight's. A
        # sweep: each job is composed once after the preflight, not twice.
        with (
            terminate_as_interrupt() if args.multirun else nullcontext(),
            (
                sweep_jobs_composed_once()
                if args.multirun
                else composed_already(source.config_name, args.overrides, configs[0])
                if configs
                else nullcontext()
            ),
        ):
            hydra_job()
    except KeyboardInterrupt as interrupt:
        end_active_sweep("KILLED")
        from ms_exp.job.summary import stop_line

        cfg = configs[0] if configs else None
        print(stop_line(interrupt, argv, args.multirun, cfg), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException:
        # A failed job of a multirun: Hydra exits (SystemExit) without on_multirun_end.
        end_active_sweep("FAILED")
        raise
    finally:
        release_all()
        close_pools()
    return 0


if __name__ == "__main__":
    from ms_exp.tracking.lifecycle import exit_process

    exit_process(main())
