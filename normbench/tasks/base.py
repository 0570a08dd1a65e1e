"""The `Task` protocol: what the runner needs from a data set, whatever its kind.

The runner only ever calls these methods, so image classification and translation share one
training loop. Step statistics are *sums* over the batch (plus ``count``), so epoch means are
exact whatever the batch sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class RowSum:
    """An integer statistic of the batch that can wait: ``count(*rows)``, a sum over the rows of
    ``rows`` (tensors sharing their first dimension), computed when read (`value`, ``float()``).

    Its sum over several steps is ``count`` of their rows concatenated, exact (an integer sum in
    any order), so the run's running sums compute it once every few steps instead of a few
    kernels a step (`normbench.run.loop.sums.RunningSums`, which applies the first step's ``count``
    to them all: a statistic's key keeps one ``count``)."""

    count: Callable[..., Tensor]
    rows: tuple[Tensor, ...]

    def value(self) -> Tensor:
        return self.count(*self.rows)

    def __float__(self) -> float:
        return float(self.value())


def stat_values(stats: Mapping[str, Tensor | RowSum]) -> dict[str, Tensor]:
    """``stats`` with each `RowSum` computed."""
    return {k: v.value() if isinstance(v, RowSum) else v for k, v in stats.items()}


@dataclass
class StepOutput:
    loss: Tensor
    """Scalar loss to back-propagate (mean over the batch's samples or tokens)."""
    stats: dict[str, Tensor | RowSum] = field(default_factory=dict)
    """Sums over the batch, detached; ``count`` is the number of samples / tokens; an integer sum
    that can wait is a `RowSum` (`stat_values` computes them)."""


class Task(Protocol):
    kind: str
    """``image`` or ``sequence``: which models can take it."""
    unit: str
    """What throughput counts: ``samples`` or ``tokens``."""

    def model_kwargs(self) -> dict[str, Any]: ...

    def steps_per_epoch(self) -> int: ...

    def train_batches(self, epoch: int, generator: torch.Generator) -> Iterator[Any]: ...

    def forward_loss(self, model: nn.Module, batch: Any) -> StepOutput: ...

    def batch_units(self, batch: Any) -> int: ...

    def summarize(self, sums: dict[str, float], prefix: str) -> dict[str, float]: ...

    def evaluate(self, model: nn.Module) -> dict[str, float]: ...

    def evaluate_loss(self, model: nn.Module) -> dict[str, float]:
        """The validation loss only (``val/loss`` and what comes with it for free: accuracy,
        perplexity), none of `evaluate`'s dearer extras (BLEU's decoding, the training images'
        scores): the evaluation a probe every few steps can afford. Under ``no_grad``, eval mode."""
        ...
