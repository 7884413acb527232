"""Sweeps that sample their jobs from an Optuna study: the study and its storage, the search
space, the sweep loop behind ``hydra/sweeper=optuna`` and the trial a job reports to
(pruning); the study's part of a sweep's report is written with the report
(ms_exp/tracking/study_report.py).

Optuna is imported inside the functions that use it: Hydra imports the sweeper plugin in
every process it starts, and a run without an Optuna sweep must not pay for it.
"""
