"""Data sets, each returning a `normbench.tasks.base.Task`."""

from normbench.data import cifar, translation  # noqa: F401  (registration)
from normbench.data.registry import DATASETS, DatasetConfig, build_task, list_datasets, register_dataset
from normbench.errors import DatasetMissingError

__all__ = ["DATASETS", "DatasetConfig", "DatasetMissingError", "build_task", "list_datasets", "register_dataset"]
