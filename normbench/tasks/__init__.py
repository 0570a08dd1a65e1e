"""Tasks: batches, losses and metrics over the tensors of `normbench.data` (imports go tasks → data).

Importing this package registers every data set: ``build_task`` and ``list_datasets`` here see
them all.
"""

from normbench.data.registry import DATASETS, build_task, dataset_input_kind, list_datasets
from normbench.tasks import classification, translation  # noqa: F401  (registration of every data set)

__all__ = ["DATASETS", "build_task", "dataset_input_kind", "list_datasets"]
