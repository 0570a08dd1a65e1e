"""Data: files → tensors. Images (`cifar`, `augment`); parallel text (`parallel_text`), its BPE
(`bpe`), BPE ids per split (`translation`), the synthetic corpus (`synthetic_translation`).

`registry` holds the data set registry: each builder (registered by the module of its task,
`normbench.tasks.classification` and `normbench.tasks.translation`) returns a
`normbench.tasks.base.Task`. Imports go one way, tasks → data; `normbench.tasks` imports every
registering module, so take `build_task` / `list_datasets` from there.
"""

from normbench.base.errors import DatasetMissingError
from normbench.data.registry import DatasetConfig, register_dataset

__all__ = ["DatasetConfig", "DatasetMissingError", "register_dataset"]
