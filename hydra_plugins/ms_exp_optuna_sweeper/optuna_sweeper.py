"""``hydra/sweeper=optuna``: Hydra finds sweepers only in the ``hydra_plugins`` package, so
the class lives here and the work in ms_exp.search.sweeper."""

from typing import Any, List

from hydra.plugins.sweeper import Sweeper

from ms_exp.search.options import register_sweeper_configs
from ms_exp.search.sweeper import OptunaSearch

register_sweeper_configs()


class OptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self.search = OptunaSearch(**settings)

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        return self.search.sweep(arguments)
