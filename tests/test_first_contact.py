"""What a new user meets first: a mistake on the command line is one line naming it and
what is allowed, exit 2, and nothing is created (no run directory, no MLflow store)."""
import io
import subprocess
import sys

import pytest

from ms_exp.job.console import tee_output

REFUSED = [
    (["-m", "optimizer.lr=0.01,,0.1"],
     "override 'optimizer.lr=0.01,,0.1': an empty item in a list of values; expected "
     "key=value"),
    (["-m", "optimizer.lr=0.01,"], "override 'optimizer.lr=0.01,': an empty item in a list"),
    (["-m", "optimizer.lr=range(1,"], "override 'optimizer.lr=range(1,': unbalanced brackets"),
    (["optimizer.lr=0.01,0.1"],
     "override 'optimizer.lr=0.01,0.1': a list of values is a sweep; add -m (--multirun) to "
     "run one job per value, or give one list value in brackets: optimizer.lr=[a,b]"),
    (["optimizer.lr=choice(0.01,0.1)"], "a list of values is a sweep; add -m (--multirun)"),
    (["optimizer.lr"], "override 'optimizer.lr': no '=' (a key alone is only allowed as ~key"),
    (["-m", "=3"], "override '=3': no key before '='"),
    (["-m", "optimizer.lr=interval(0.01,0.2)"],
     "override 'optimizer.lr=interval(0.01,0.2)': a search space that Hydra's basic sweeper "
     "cannot list; expected with -m, key=a,b,c (no empty item), key=range(start,stop[,step])"),
    (["trainer.device_target=GPU"],
     "trainer.device_target='GPU': not allowed; expected a device MindSpore finds on this "
     "machine: CPU (mindspore.hal.is_available('GPU') is False), or None to let it pick"),
    (["trainer.device_target=Ascend"], "expected a device MindSpore finds on this machine: CPU"),
]


@pytest.mark.parametrize("args, message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_mistake_is_one_line_and_creates_nothing(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "ms_exp.run", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [done.stderr.strip()]  # one line, no traceback
    assert done.stderr.startswith("ms_exp: error: ") and message in done.stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/, multirun/, mlflow.db


def test_a_sweep_of_good_values_still_passes_the_grammar():
    from ms_exp.preflight.compose import expand_jobs

    fusion = "parallel.all_reduce_fusion_config=[20,35]"  # a list value, not a sweep
    jobs = expand_jobs(["optimizer.lr=0.01,0.1", "trainer.seed=range(1,3)",
                        "optimizer.name=choice(sgd,adam)", fusion], True)
    assert len(jobs) == 8 and ["optimizer.lr=0.01", "trainer.seed=1", "optimizer.name=sgd",
                               fusion] in jobs


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
