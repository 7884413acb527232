"""MLflow: the store, one run per job, and the training callback that feeds it."""
