"""The records: MLflow's store, one run per job (kept by a sidecar process, or an offline
journal while the server is down), provenance, the training callback that feeds it, the
sweep's parent run and its report."""
