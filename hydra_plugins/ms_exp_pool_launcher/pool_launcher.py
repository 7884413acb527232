"""``hydra/launcher=pool``: Hydra instantiates launchers only from the ``hydra_plugins``
package, so the class lives here and the work in ms_exp.pool."""

from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher

from ms_exp.pool.launcher import PoolLaunch, register_launcher_config

register_launcher_config()


class PoolLauncher(Launcher):
    def __init__(self, **settings: Any) -> None:
        self.launch_on_pool = PoolLaunch(**settings)

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.launch_on_pool.setup(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        return self.launch_on_pool.launch(job_overrides, initial_job_idx)
