"""One rank's training: the MindSpore context, the built network's ``Model`` (ms_exp's
loops, or an option's own train step), optimizer and schedules, losses, metrics,
callbacks, and the result rank 0 hands back. MindSpore is imported here, never in
preflight."""
