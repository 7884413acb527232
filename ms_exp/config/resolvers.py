"""The resolvers ms_exp's config uses beside OmegaConf's and Hydra's own.

``${ms_exp.unique:}`` is a short random token that makes the default run and sweep folders
unique: Hydra's ``${now:...}`` alone names the folders of two commands started in the same
second (or microsecond, on two hosts sharing ``outputs/``) alike, and they would then
share checkpoints and records. Like ``now`` it is cached on the config, so every job of a
sweep (Hydra copies the cache into each job's config) reads the same value.
"""

import secrets

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """Register once per process (idempotent)."""
    if not OmegaConf.has_resolver("ms_exp.unique"):
        OmegaConf.register_new_resolver(
            "ms_exp.unique", lambda: secrets.token_hex(2), use_cache=True
        )
