"""What the ``amp`` section means beyond its keys, read alike by the config checks (before
MindSpore starts) and by both training loops."""

from omegaconf import DictConfig


def needs_overflow_check(amp_cfg: DictConfig) -> bool:
    """Steps whose gradients overflow are skipped (MindSpore's loss-scale update cell)."""
    kind = amp_cfg.loss_scale.value
    return kind == "dynamic" or (kind == "fixed" and amp_cfg.drop_overflow_update)
