"""Lists of tensors treated as one flat vector (a model's parameters or their gradients).

Sums are accumulated in float64 and come back as 0-d tensors, so a caller that needs several
of them pays one device synchronisation, not one per tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def sq_norm(xs: Sequence[Tensor]) -> Tensor:
    """‖x‖² of the concatenation of ``xs``."""
    return torch.stack([x.detach().double().pow(2).sum() for x in xs]).sum()


def sq_dist(xs: Sequence[Tensor], ys: Sequence[Tensor]) -> Tensor:
    """‖x − y‖² of the concatenations."""
    return torch.stack([(x.detach().double() - y.detach().double()).pow(2).sum() for x, y in zip(xs, ys)]).sum()


def dot(xs: Sequence[Tensor], ys: Sequence[Tensor]) -> Tensor:
    """⟨x, y⟩ of the concatenations."""
    return torch.stack([(x.detach().double() * y.detach().double()).sum() for x, y in zip(xs, ys)]).sum()


def grads_or_zeros(grads: Sequence[Tensor | None], params: Sequence[Tensor]) -> list[Tensor]:
    """``torch.autograd.grad(..., allow_unused=True)`` gives None for unused inputs: make them 0."""
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
