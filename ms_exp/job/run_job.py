"""One job in the launching process, from its validated config to its MLflow run.

Boost preparation, ``tracking.skip_finished``, the run directory (or the resumed one), the
saved config, the MLflow run; then training or the ranks' launch, and whatever happens the
outputs logged and the run ended with its status.
"""

import sys
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional, Sequence, cast

from omegaconf import DictConfig, OmegaConf

from ms_exp.boost.options import boost_option
from ms_exp.checkpoint.resume import ResumePoint, clear_resume_point, find_resume_point
from ms_exp.config.run_config import RESOLVED_CONFIG
from ms_exp.job.console import tee_output
from ms_exp.job.distributed import train_with_ranks
from ms_exp.job.identity import finished_before, run_identity
from ms_exp.job.model_package import log_run_models
from ms_exp.job.outputs import log_outputs, sliced_checkpoint_lines
from ms_exp.job.summary import report_result, stage_two_command
from ms_exp.parallel.launcher_config import is_distributed
from ms_exp.tracking import provenance
from ms_exp.tracking.finished import config_digest
from ms_exp.tracking.lifecycle import EndedEarly, StoppedRun, tracked_run
from ms_exp.tracking.logged_steps import last_logged_steps
from ms_exp.tracking.params import flatten, relative_to_run
from ms_exp.tracking.run_folder import (
    RUN_RECORD,
    check_owner,
    discard_if_unused,
    hold_folder,
    read_run_record,
    refuse_foreign,
    release_folder,
    write_run_record,
)
from ms_exp.tracking.store import resolve_tracking_uri
from ms_exp.train.result import JobResult


def run_job(
    cfg: DictConfig, run_dir: Path, hydra_dir: Optional[Path] = None, overrides: Sequence[str] = ()
) -> JobResult:
    """Train, evaluate and checkpoint one job, recorded as one MLflow run, in this process
    or, for a distributed job, in the ranks msrun starts."""
    own_dir = Path(run_dir)
    key = f"hydra.run.dir={own_dir}"
    hold_folder(own_dir, key)
    try:
        return _run_in_folder(cfg, own_dir, key, hydra_dir, overrides)
    finally:
        release_folder(own_dir)


def _run_in_folder(
    cfg: DictConfig, own_dir: Path, key: str, hydra_dir: Optional[Path], overrides: Sequence[str]
) -> JobResult:
    """The job in the folder this process holds (and, resuming, in the one it continues,
    held too until the job ends)."""
    prepare = boost_option(cfg.boost).prepare_job
    if prepare is not None:
        prepare(cfg)
    tracking = cfg.tracking
    uri = resolve_tracking_uri(tracking.uri)
    # Once, after the boost option filled in what it found (stage one's run): the digest
    # the folder's record is compared with and then written.
    digest = config_digest(cfg, own_dir)
    check_owner(own_dir, key, cfg.trainer.resume, lambda: digest)
    if tracking.enabled and tracking.skip_finished:
        earlier = finished_before(cfg, own_dir, uri, digest, overrides)
        if earlier is not None:
            return earlier
    resume = find_resume_point(cfg, own_dir, digest, uri)
    try:
        attempt, resumed_run_id = 0, None
        if resume is None:
            # trainer.resume=auto found nothing to continue: a new run, which the folder must
            # not already hold (a fixed hydra.run.dir of a finished run, or another config's).
            record = read_run_record(own_dir)
            if record:
                refuse_foreign(
                    own_dir,
                    key,
                    record,
                    " (trainer.resume=auto continues only an unfinished run of this config)",
                )
            clear_resume_point(own_dir)
            run_dir = own_dir
        else:
            record = read_run_record(resume.run_dir)
            attempt = record.get("attempts", 1)
            resume = replace(resume, attempt=attempt)
            if cfg.tracking.enabled:
                from ms_exp.tracking.recorder import deliver_earlier_journals

                deliver_earlier_journals(resume.run_dir)
                # The MLflow run the job appends to; None: the job died before its run was created.
                resumed_run_id = record.get("run_id")
            if resumed_run_id:
                resume = replace(
                    resume,
                    logged=last_logged_steps(uri, resumed_run_id),
                    same_config=record.get("digest") == digest,
                )
            resume.save()  # the resume point, for the ranks (ms_exp/checkpoint/resume.py)
            run_dir = resume.run_dir
        # A relative strategy file is the run's own, in its folder: MindSpore would write it
        # relative to the working directory, where every run would share it.
        strategy = cfg.checkpoint.strategy
        if strategy.save_file and not Path(str(strategy.save_file)).expanduser().is_absolute():
            strategy.save_file = str(Path(run_dir).resolve() / strategy.save_file)
        config_file = run_dir / RESOLVED_CONFIG
        # What the run trains, not how this command reached it: a re-run (--from-run) or the
        # ranks reading it must not resume again.
        saved = cfg.copy()
        saved.trainer.resume = None
        OmegaConf.save(saved, config_file, resolve=True)
        write_run_record(run_dir, digest=digest, status="RUNNING", attempts=attempt + 1)
        try:
            result = _run_tracked(
                cfg, run_dir, resume, resumed_run_id, config_file, hydra_dir, overrides, uri, digest
            )
        except (KeyboardInterrupt, EndedEarly):
            _record_end(run_dir, "KILLED")
            StoppedRun.run_id, StoppedRun.run_dir = read_run_record(run_dir).get("run_id"), run_dir
            raise
        except BaseException:
            # Also a run that trained to the end but whose MLflow run could not be ended
            # FINISHED: it is not finished, and resume=auto continues it.
            _record_end(run_dir, "FAILED")
            raise
        # Only now that the MLflow run is ended FINISHED: a job killed before this line is
        # resumed (nothing left to train: it ends the run FINISHED again), not started afresh.
        _record_end(run_dir, "FINISHED")
        return result
    finally:
        if resume is not None:
            release_folder(resume.run_dir)
            if resume.run_dir.resolve() != own_dir.resolve():
                # The run went on in its own folder: this command's holds only Hydra's record
                # of it, which the run's MLflow artifacts keep (hydra/).
                discard_if_unused(own_dir, hydra_dir.name if hydra_dir else None)


def _run_tracked(
    cfg: DictConfig,
    run_dir: Path,
    resume: Optional[ResumePoint],
    resumed_run_id: Optional[str],
    config_file: Path,
    hydra_dir: Optional[Path],
    overrides: Sequence[str],
    uri: str,
    digest: str,
) -> JobResult:
    """The job inside its MLflow run, which ends when this returns or raises."""
    tracking = cfg.tracking
    run_name, tags, parent = run_identity(cfg, run_dir, overrides, uri, digest)
    with (
        tee_output(run_dir / "console.log"),
        tracked_run(
            tracking.enabled,
            uri,
            tracking.experiment_name,
            run_name,
            tags,
            parent_run_id=parent,
            run_id=resumed_run_id,
            offline_dir=run_dir,
            system_metrics_interval=tracking.system_metrics_interval,
        ) as tracker,
    ):
        if resume is None:
            resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
            tracker.log_params(relative_to_run(flatten(cast(dict, resolved)), run_dir))
        else:
            print(f"resuming the run in {resume.run_dir} from {resume.checkpoint}", flush=True)
            # MLflow refuses a param that changes value: the run keeps the params it started
            # with, and the resumption is a tag.
            tracker.set_tags(
                {
                    "ms_exp.resumed_from": f"{resume.checkpoint} (epoch {resume.epoch}, "
                    f"step {resume.step_in_epoch} of it)"
                }
            )
        tracker.log_artifact(config_file, "config")
        if hydra_dir is not None and Path(hydra_dir).is_dir():
            tracker.log_artifacts(Path(hydra_dir), "hydra")
        tracker.record_provenance(cfg.dataset, run_dir, provenance.command_line())
        if tracking.rerun_of:
            tracker.set_tags({"ms_exp.rerun_of": tracking.rerun_of})
        try:
            if is_distributed(cfg.parallel):
                result = train_with_ranks(cfg, run_dir, tracker, uri)
            else:
                # MindSpore is imported only here, once the config is known to be good.
                from ms_exp.train.rank import train_in_process

                result = train_in_process(cfg, run_dir, tracker)
        finally:
            log_outputs(tracker, run_dir, cfg, resume.attempt if resume else 0)
        models: Dict[str, str] = {}
        if result.pruned_epoch is None:
            models = log_run_models(cfg, run_dir, result, tracker, uri)
        report_result(result, tracker, uri, models)
        stage_two = stage_two_command(cfg, overrides, tracker.run_id) if tracker.run_id else None
        if stage_two:
            print(f"stage two, from its snapshots: {stage_two}", flush=True)
        sliced = sliced_checkpoint_lines(run_dir, cfg)
        if sliced:
            print("\n".join(sliced), flush=True)
        if result.pruned_epoch is not None:
            # A pruned trial's run keeps everything logged so far and ends KILLED, saying when.
            from ms_exp.search.pruned import TrialPruned
            from ms_exp.search.trial import current_trial
            from ms_exp.tracking.sweep_runs import PRUNED_EPOCH_TAG

            tracker.set_tags({PRUNED_EPOCH_TAG: str(result.pruned_epoch)})
            trial = current_trial()
            assert trial is not None  # only a trial's job is pruned
            raise TrialPruned(trial.study_name, result.pruned_epoch)
        return result


def _record_end(run_dir: Path, status: str) -> None:
    """The status in the run record; on a full disk a warning, so that the error that
    ended the job is the one reported (the record still says RUNNING: resumable)."""
    try:
        write_run_record(run_dir, status=status)
    except OSError as error:
        print(
            f"ms_exp: warning: {run_dir / RUN_RECORD}: not updated to {status} "
            f"({error.strerror or error})",
            file=sys.stderr,
            flush=True,
        )
