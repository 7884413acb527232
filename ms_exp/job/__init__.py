"""The launching process of one job (after preflight, before and around training): its run
directory, MLflow run, resume lookup, provenance, launch plan and the supervision of its
ranks, and the outputs and summary it leaves. One process composes, many processes train:
every rank of a job shares the run directory and the MLflow run this package opens."""
