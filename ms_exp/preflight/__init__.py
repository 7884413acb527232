"""Compose the config as Hydra will, and check every job of the command line before any
run directory, MLflow run or MindSpore process exists: one-line refusals, exit status 2.

No MindSpore import except in the two checks that must build the network to read its
shapes (``parallel.strategies``, ``boost=dim_reduce``); a test holds the default config's
preflight to that."""
