"""The ``checkpoint`` group: checkpoint files (verified reads, names, sizes), the callbacks
that write them, and resuming a run from them (``trainer.resume``)."""
