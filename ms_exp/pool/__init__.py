"""``hydra/launcher=pool``: a sweep's jobs side by side, each holding its own devices (Ascend
cards, GPUs, or a set of CPU cores) for its whole life. devices.py says what the pool holds
and how a job is told its share; worker.py is the process a job runs in; dispatch.py hands
devices out and gets them back, however a job ends."""

import sys
from typing import NoReturn, Optional

# hydra.launcher._target_ of conf/hydra/launcher/pool.yaml.
POOL_LAUNCHER = "hydra_plugins.ms_exp_pool_launcher.pool_launcher.PoolLauncher"


def end_failed_sweep(line: Optional[str] = None) -> NoReturn:
    """How a sweep with a failed job ends, whichever sweeper runs it, as Hydra's basic sweeper
    ends one: exit status 1 after one line (None: said already, as the failure was found),
    without a traceback of ms_exp's code (each job's run and log hold the job's own)."""
    if line is not None:
        print(f"ms_exp: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(1)
