"""The data set registry: ``register_dataset(name, config)``; a builder returns a `Task`.

A builder is ``builder(cfg, run_cfg, device, run_dir) -> Task``: ``cfg`` the data set config
(``conf/dataset/<name>.yaml``), ``run_cfg`` the whole run config (batch size, seed). Builders
are registered by the modules of their tasks (``normbench.tasks.translation``), so that imports go
one way, tasks → data: this module names `Task` for type checkers only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import MISSING

from normbench.registry import Registry

if TYPE_CHECKING:
    from normbench.tasks.base import Task

DatasetBuilder = Callable[..., "Task"]
DATASETS: Registry[DatasetBuilder] = Registry("dataset")


@dataclass
class DatasetConfig:
    name: str = MISSING
    """The registered name: filled by the registry (`normbench.registry.schema`)."""


def register_dataset(name: str, config: type = DatasetConfig) -> Callable[[DatasetBuilder], DatasetBuilder]:
    return DATASETS.register(name, config)


def list_datasets() -> list[str]:
    return DATASETS.names()


def build_task(cfg: Mapping[str, Any], run_cfg: Mapping[str, Any], device: torch.device, run_dir: Path) -> Task:
    return DATASETS.get(cfg["name"])(cfg, run_cfg, device, run_dir)
