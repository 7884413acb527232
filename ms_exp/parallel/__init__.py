"""Semi-auto parallel layouts: shard strategies to per-rank slices and MindSpore strategy files."""
