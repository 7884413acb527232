"""Registering ``hydra/sweeper=optuna`` with Hydra by its class.

Hydra finds plugins by listing the folders of ``hydra_plugins``, which misses one installed
in editable mode (setuptools maps it with an import hook that lists nothing;
docs/design.md#editable-plugin-discovery). This module is the one door from ms_exp to the
plugin's class; the plugin module imports ms_exp.search.options and .sweeper, never this.
"""


def register_optuna_sweeper() -> None:
    """Make ``hydra/sweeper=optuna`` known to Hydra, whatever the kind of install."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.ms_exp_optuna_sweeper.optuna_sweeper import OptunaSweeper

    Plugins.instance().register(OptunaSweeper)
