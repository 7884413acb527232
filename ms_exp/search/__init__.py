"""Sweeps that sample their jobs from an Optuna study: the study, the search space, the
sweep loop behind ``hydra/sweeper=optuna`` and the trial a job reports to (pruning).

Optuna is imported inside the functions that use it: Hydra imports the sweeper plugin in
every process it starts, and a run without an Optuna sweep must not pay for it.
"""
