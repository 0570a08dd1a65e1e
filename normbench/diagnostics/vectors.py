"""Lists of tensors treated as one flat vector (a model's parameters or their gradients).

Sums are accumulated in float64 and come back as 0-d tensors, so a caller that needs several
of them pays one device synchronisation, not one per tensor.

`ranks_mean` is how a diagnostic measures the global batch under data parallelism: every rank
computes its gradient (or loss, or Hessian-vector product) on its shard and the ranks' values are
averaged (one ``all_reduce``), which for a mean loss over equal shards is the global batch's value,
identical on every rank. Every rank makes the same calls in the same order (the diagnostics run at
the same steps on every rank, with the same seeds), so the collectives run in lockstep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def ranks_mean(xs: Sequence[Tensor]) -> list[Tensor]:
    """Under data parallelism, each tensor of ``xs`` averaged over the ranks (one ``all_reduce``
    of their concatenation, in its dtype); one process: ``xs`` detached, as they are."""
    return _ranks_reduce(xs, lambda first: first.dtype, mean=True)


def ranks_sum(xs: Sequence[Tensor]) -> list[Tensor]:
    """Under data parallelism, each tensor of ``xs`` summed over the ranks (one ``all_reduce`` of
    their concatenation, in float64); one process: ``xs`` detached, as they are."""
    return _ranks_reduce(xs, lambda first: torch.float64, mean=False)


def _ranks_reduce(xs: Sequence[Tensor], dtype_of: Callable[[Tensor], torch.dtype], mean: bool) -> list[Tensor]:
    """One ``all_reduce`` (sum, or mean with ``mean``) of the concatenation of ``xs`` in
    ``dtype_of(xs[0])``, split back into their shapes and dtypes."""
    import torch.distributed as dist

    xs = [x.detach() for x in xs]
    if not xs or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return xs
    flat = torch.cat([x.reshape(-1).to(dtype_of(xs[0])) for x in xs])
    dist.all_reduce(flat)
    if mean:
        flat /= dist.get_world_size()
    return [chunk.view_as(x).to(x.dtype) for chunk, x in zip(torch.split(flat, [x.numel() for x in xs]), xs)]
