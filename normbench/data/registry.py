"""The data set registry: ``register_dataset(name, config, input_kind)``; a builder returns a `Task`.

A builder is ``builder(cfg, device, run_dir, *, batch_size, eval_batch_size) -> Task``: ``cfg`` the
data set's config dataclass (``conf/dataset/<name>.yaml``), the batch sizes the run's. Each
builder declares the input kind of its task (``image`` or ``sequence``), as models do, so that a
model/data set mismatch fails before any data is read. Builders are registered by the modules of
their tasks (``normbench.tasks.translation``), so that imports go one way, tasks → data: this
module names `Task` for type checkers only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import MISSING

from normbench.base.registry import Registry

if TYPE_CHECKING:
    from normbench.tasks.base import Task

DatasetBuilder = Callable[..., "Task"]
DATASETS: Registry[DatasetBuilder] = Registry("dataset")


@dataclass
class DatasetConfig:
    name: str = MISSING
    """The registered name: filled by the registry (`normbench.base.registry.schema`)."""

    def longest_sequence(self) -> int | None:
        """The most positions a sequence of the data set takes (EOS or BOS included); None: not sequences."""
        return None


INPUT_KINDS: dict[str, str] = {}


def register_dataset(
    name: str, config: type = DatasetConfig, input_kind: str = "image"
) -> Callable[[DatasetBuilder], DatasetBuilder]:
    INPUT_KINDS[name] = input_kind
    return DATASETS.register(name, config)


def dataset_input_kind(name: str) -> str:
    """The kind of input (``image``, ``sequence``) the task of data set ``name`` gives."""
    DATASETS.entry(name)
    return INPUT_KINDS[name]


def list_datasets() -> list[str]:
    return DATASETS.names()


def build_task(
    cfg: DatasetConfig | Mapping[str, Any],
    device: torch.device,
    run_dir: Path,
    *,
    batch_size: int,
    eval_batch_size: int,
) -> Task:
    """The task of data set ``cfg`` (its config dataclass, or a name and keys: `Registry.typed`)."""
    typed = DATASETS.typed(cfg)
    return DATASETS.get(typed.name)(typed, device, run_dir, batch_size=batch_size, eval_batch_size=eval_batch_size)
