"""ms_exp's Hydra plugins registered by their classes, as Hydra's listing of
``hydra_plugins`` misses an editable install (docs/design.md#editable-plugin-discovery).
The one door from ms_exp to the plugins: imports run preflight -> hydra_plugins."""


def register_plugins() -> None:
    """Make ``hydra/sweeper=optuna`` and ``hydra/launcher=pool`` known to Hydra."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.ms_exp_optuna_sweeper.optuna_sweeper import OptunaSweeper
    from hydra_plugins.ms_exp_pool_launcher.pool_launcher import PoolLauncher

    Plugins.instance().register(OptunaSweeper)
    Plugins.instance().register(PoolLauncher)
