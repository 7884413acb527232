"""What a new user meets first: a mistake on the command line is one line naming it and
what is allowed, exit 2, and nothing is created (no run directory, no MLflow store)."""

import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import main_in_process

from ms_exp.job.console import tee_output

REFUSED = [
    (
        ["-m", "optimizer.lr=0.01,,0.1"],
        "override 'optimizer.lr=0.01,,0.1': an empty item in a list of values; expected key=value",
    ),
    (["-m", "optimizer.lr=0.01,"], "override 'optimizer.lr=0.01,': an empty item in a list"),
    (["-m", "optimizer.lr=range(1,"], "override 'optimizer.lr=range(1,': unbalanced brackets"),
    (
        ["optimizer.lr=0.01,0.1"],
        "override 'optimizer.lr=0.01,0.1': a list of values is a sweep; add -m (--multirun) to "
        "run one job per value, or give one list value in brackets: optimizer.lr=[a,b]",
    ),
    (["optimizer.lr=choice(0.01,0.1)"], "a list of values is a sweep; add -m (--multirun)"),
    (["optimizer.lr"], "override 'optimizer.lr': no '=' (a key alone is only allowed as ~key"),
    (["-m", "=3"], "override '=3': no key before '='"),
    (
        ["-m", "optimizer.lr=interval(0.01,0.2)"],
        "override 'optimizer.lr=interval(0.01,0.2)': a search space that Hydra's basic sweeper "
        "cannot list; expected with -m, key=a,b,c (no empty item), key=range(start,stop[,step])",
    ),
    # Hydra's flags: argparse's usage block and Hydra's tracebacks become one line.
    (
        ["optimizer.lr=0.1", "-m", "trainer.seed=1,2"],
        "override 'trainer.seed=1,2' after a flag: Hydra reads the overrides as one group; "
        "expected the flags before them: python -m ms_exp.run -m optimizer.lr=0.1 "
        "trainer.seed=1,2",
    ),
    (
        ["-m", "--cfg", "job"],
        "-m/--multirun with --cfg: not allowed together; expected one of --run, -m/--multirun, "
        "--cfg, --info, --shell-completion",
    ),
    (["--cfg", "jobs"], "--cfg/-c='jobs': not allowed; expected one of job, hydra, all"),
    (["--multirun=true"], "--multirun/-m='true': not allowed; expected the flag alone"),
    (["-m", "--epochs", "2"], "--epochs: unknown flag; expected one of --help, --hydra-help"),
    (["--resolve"], "--resolve: not allowed alone; expected --cfg job|hydra|all with it"),
    (["--cfg", "job", "optimizer.lr=0.01,0.1"], "a list of values is a sweep; add -m"),
    (["--cfg", "job", "optimizer.lr=[0.01"], "override 'optimizer.lr=[0.01': unbalanced"),
]


# Refusals that ask MindSpore which devices it finds: in a fresh process, as a user's
# command is, where MindSpore's warnings about the absent backends must not show.
DEVICE_REFUSED = [
    (
        ["trainer.device_target=GPU"],
        "trainer.device_target='GPU': not allowed; expected a device MindSpore finds on this "
        "machine: CPU (mindspore.device_context.gpu.is_available() is False), or None to "
        "let it pick",
    ),
    (["trainer.device_target=Ascend"], "expected a device MindSpore finds on this machine: CPU"),
    # The sweep's second job: refused before the first one starts.
    (["-m", "trainer.device_target=CPU,GPU"], "trainer.device_target='GPU': not allowed"),
]


@pytest.mark.parametrize("args, message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_mistake_is_one_line_and_creates_nothing(tmp_path, args, message):
    done = main_in_process("ms_exp.run", args, tmp_path)
    assert done.rc == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [done.stderr.strip()]  # one line, no traceback
    assert done.stderr.startswith("ms_exp: error: ") and message in done.stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/, multirun/, mlflow.db


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args, message", DEVICE_REFUSED, ids=[" ".join(a) for a, _ in DEVICE_REFUSED]
)
def test_a_device_mistake_is_one_line_without_mindspores_warnings(tmp_path, args, message):
    done = subprocess.run(
        [sys.executable, "-m", "ms_exp.run", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [done.stderr.strip()]  # one line, no warning
    assert done.stderr.startswith("ms_exp: error: ") and message in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_of_good_values_still_passes_the_grammar():
    from ms_exp.preflight.compose import expand_jobs

    fusion = "parallel.all_reduce_fusion_config=[20,35]"  # a list value, not a sweep
    jobs = expand_jobs(
        [
            "optimizer.lr=0.01,0.1",
            "trainer.seed=range(1,3)",
            "optimizer.name=choice(sgd,adam)",
            fusion,
        ],
        True,
    )
    assert (
        len(jobs) == 8
        and ["optimizer.lr=0.01", "trainer.seed=1", "optimizer.name=sgd", fusion] in jobs
    )


def test_a_search_space_is_checked_at_its_ends_for_a_sweeper_that_samples_it(tmp_path):
    from ms_exp.config.errors import ConfigError
    from ms_exp.preflight.compose import preflight

    sweep = ["hydra/sweeper=optuna", f"hydra.sweep.dir={tmp_path}/sweep"]
    configs = preflight(
        [*sweep, "optimizer.lr=interval(0.01,0.2)", "trainer.seed=tag(int,interval(1,4))"],
        multirun=True,
    )
    assert sorted((c.optimizer.lr, c.trainer.seed) for c in configs) == [
        (0.01, 1),
        (0.01, 4),
        (0.2, 1),
        (0.2, 4),
    ]
    with pytest.raises(
        ConfigError,
        match=r"^optimizer.lr=-1.0: not allowed; expected a "
        r"number > 0",
    ):
        preflight([*sweep, "optimizer.lr=interval(-1,0.2)"], multirun=True)
    assert list(tmp_path.iterdir()) == []


def test_a_logging_handler_made_during_a_job_still_reaches_the_console_after_it(tmp_path):
    # MindSpore creates its log handler on its first warning, on the stream of that moment:
    # in a sweep, the first job's console copy, closed when the job ends.
    console = io.StringIO()
    real = sys.stderr
    sys.stderr = console
    try:
        with tee_output(tmp_path / "console.log"):
            held = sys.stderr
            held.write("during the job\n")
        held.write("a later job\n")
        held.flush()
    finally:
        sys.stderr = real
    assert console.getvalue() == "during the job\na later job\n"
    assert (tmp_path / "console.log").read_text() == "during the job\n"


@pytest.mark.e2e  # in process, but seconds long: docs/developing.md#lanes
def test_asking_for_the_devices_is_silent_and_leaves_the_backend_to_the_job():
    # The check runs in the process that then trains: set_context and an op must still work.
    probe = (
        "from ms_exp.preflight.device import available_targets; "
        "print(available_targets()); import mindspore as ms; "
        "ms.set_context(device_target='CPU'); "
        "print(ms.ops.add(ms.Tensor(1), ms.Tensor(2)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == "('CPU',)" and done.stdout.split()[-1] == "3"
    assert "not available" not in done.stderr  # MindSpore's warnings for absent backends


def test_a_build_of_the_checkout_leaves_nothing_git_shows():
    root = Path(__file__).resolve().parents[1]  # the suite runs in a clone (.ci/run)
    # What setuptools writes beside the sources on a non-editable `pip install .`.
    written = ["build/lib/ms_exp/run.py", "ms_exp.egg-info/PKG-INFO"]
    done = subprocess.run(
        ["git", "check-ignore", *written], cwd=root, capture_output=True, text=True
    )
    assert done.stdout.split() == written
