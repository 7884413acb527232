"""``hydra/launcher=pool``: a sweep's jobs side by side, each holding its own devices (Ascend
cards, GPUs, or a set of CPU cores) for its whole life. devices.py says what the pool holds
and how a job is told its share; worker.py is the process a job runs in; dispatch.py hands
devices out and gets them back, however a job ends."""

# hydra.launcher._target_ of conf/hydra/launcher/pool.yaml.
POOL_LAUNCHER = "hydra_plugins.ms_exp_pool_launcher.pool_launcher.PoolLauncher"
