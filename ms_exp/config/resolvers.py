"""The resolvers ms_exp's config uses beside OmegaConf's and Hydra's own.

``${ms_exp.unique:}`` is a short random token that keeps the default folders of two
commands started in the same second (``${now:...}``) apart; cached on the config like
``now``, so every job of a sweep reads the same value.
"""

import secrets

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """Register once per process (idempotent)."""
    if not OmegaConf.has_resolver("ms_exp.unique"):
        OmegaConf.register_new_resolver(
            "ms_exp.unique", lambda: secrets.token_hex(2), use_cache=True
        )
