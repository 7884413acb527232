"""``hydra/launcher=pool``: Hydra instantiates launchers only from the ``hydra_plugins``
package, so the class is named here and its work is ms_exp.pool's."""

from ms_exp.pool import launcher
from ms_exp.pool.launcher import register_launcher_config

register_launcher_config()


# Its base is reached through its module: Hydra's scan of this module finds this class alone.
class PoolLauncher(launcher.PoolLaunch):
    pass
