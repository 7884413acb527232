"""``hydra/sweeper=optuna``: Hydra finds sweepers only in the ``hydra_plugins`` package, so
the class is named here and its work is ms_exp.search.sweeper's."""

from ms_exp.search import sweeper
from ms_exp.search.options import register_sweeper_configs

register_sweeper_configs()


# Its base is reached through its module: Hydra's scan of this module finds this class alone.
class OptunaSweeper(sweeper.OptunaSearch):
    pass
