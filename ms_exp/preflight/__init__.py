"""Compose the config as Hydra will, and check every job of the command line before any
run directory, MLflow run or MindSpore process exists: one-line refusals, exit status 2."""
