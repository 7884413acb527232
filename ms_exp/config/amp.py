"""What the ``amp`` section means beyond its keys, read alike by the config checks (before
MindSpore starts) and by both training loops."""


def needs_overflow_check(amp_cfg) -> bool:
    """Steps whose gradients overflow are skipped (MindSpore's loss-scale update cell)."""
    kind = amp_cfg.loss_scale.value
    return kind == "dynamic" or (kind == "fixed" and amp_cfg.drop_overflow_update)
