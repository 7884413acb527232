"""Registering ms_exp's Hydra plugins (``hydra/sweeper=optuna``, ``hydra/launcher=pool``)
with Hydra by their classes.

Hydra finds plugins by listing the folders of ``hydra_plugins``, which misses one installed
in editable mode (setuptools maps it with an import hook that lists nothing;
docs/design.md#editable-plugin-discovery). This module is the one door from ms_exp to the
plugins' classes; the plugin modules import ms_exp.search and ms_exp.pool, never this. It
is part of composing, above both: the imports run preflight -> hydra_plugins -> search, pool.
"""


def register_plugins() -> None:
    """Make ``hydra/sweeper=optuna`` and ``hydra/launcher=pool`` known to Hydra, whatever
    the kind of install."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.ms_exp_optuna_sweeper.optuna_sweeper import OptunaSweeper
    from hydra_plugins.ms_exp_pool_launcher.pool_launcher import PoolLauncher

    Plugins.instance().register(OptunaSweeper)
    Plugins.instance().register(PoolLauncher)
