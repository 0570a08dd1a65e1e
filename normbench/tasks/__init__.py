"""Tasks: batches, losses and metrics over the tensors of `normbench.data` (imports go tasks → data).

Importing this package registers every data set: ``build_task`` and ``list_datasets`` here see
them all.
"""

from normbench.data.registry import DATASETS, build_task, list_datasets
from normbench.tasks import translation  # noqa: F401  (registration: iwslt14, synthetic_translation)

__all__ = ["DATASETS", "build_task", "list_datasets"]
