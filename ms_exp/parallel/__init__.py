"""The ``parallel`` group: how the launcher is configured (styles, log folder), who a rank
is (its id, device and pid file), and semi-auto parallel layouts (shard strategies to
per-rank slices and MindSpore strategy files, emulated on CPU)."""
