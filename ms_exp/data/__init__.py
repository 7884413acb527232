"""Datasets of the ``dataset`` option (built-in or a user's ``_target_``): train and eval
pipelines plus their DataSpec."""

from ms_exp.data.build import create_datasets
from ms_exp.data.spec import DataSpec, Shard

__all__ = ["DataSpec", "Shard", "create_datasets"]
