"""Data: files → tensors. Images (`cifar`, `augment`); parallel text (`parallel_text`), its BPE
(`bpe`), BPE ids per split (`translation`), the synthetic corpus (`synthetic_translation`).

`registry` holds the data set registry: each builder (registered by the module of its task, e.g.
`normbench.tasks.translation`) returns a `normbench.tasks.base.Task`. Imports go one way, tasks →
data; `normbench.tasks` imports every registering module, so its `build_task` / `list_datasets`
see every data set.
"""

from normbench.data import cifar  # noqa: F401  (registration)
from normbench.data.registry import DATASETS, DatasetConfig, build_task, list_datasets, register_dataset
from normbench.errors import DatasetMissingError

__all__ = ["DATASETS", "DatasetConfig", "DatasetMissingError", "build_task", "list_datasets", "register_dataset"]
