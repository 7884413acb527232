"""``${ms_exp.unique:}``: a short random token that keeps apart the default folders of two
commands started in the same second; cached like ``${now:}``, so a sweep's jobs share it."""

import secrets

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """Register once per process (idempotent)."""
    if not OmegaConf.has_resolver("ms_exp.unique"):
        OmegaConf.register_new_resolver(
            "ms_exp.unique", lambda: secrets.token_hex(2), use_cache=True
        )
