"""Population statistics for BatchNorm evaluation ("precise BN"; ``norm.eval_stats=population``,
or ``both``: one evaluation with each estimate on the same weights, `evaluate_each`).

Before an evaluation, `refresh_population_stats` runs the model in training mode over K
training batches drawn with its own generator and sets, per BatchNorm layer,

    population_mean = Σ_b n_b·μ_b / Σ_b n_b               (the exact mean of the activations)
    population_var  = Σ_b n_b·σ²_b / Σ_b (n_b − 1)        (σ²_b biased, per batch)

where n_b is the number of real positions per channel in batch b. With equal batches this is
the unbiased estimate m/(m − 1)·E_B[σ²_B] that Ioffe & Szegedy (2015, Alg. 2) give for
inference. Every buffer of the model (running statistics, step counters) and torch's global
RNG state are restored afterwards, so training continues exactly as without the refresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import torch
from torch import Tensor, nn

from normbench.norms.batch import BatchNorm


def population_layers(model: nn.Module) -> list[BatchNorm]:
    """The BatchNorm layers of ``model`` that evaluate with population statistics (or with both)."""
    return [m for m in model.modules() if isinstance(m, BatchNorm) and m.eval_stats != "running"]


def estimate_distance(a: Tensor, b: Tensor) -> float:
    """(1/d)·‖a − b‖₂ over the d channels (as `normbench.diagnostics.bn_stats` measures)."""
    return float(torch.linalg.vector_norm(a.double() - b.double()) / a.numel())


def evaluate_each(model: nn.Module, evaluate: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``evaluate()``'s metrics; where layers have ``eval_stats="both"`` (population statistics
    already refreshed), also the metrics of a second evaluation on the same weights with the
    population estimates, as ``<key>_population``, and per such layer the distance between the
    two estimates, ``eval_stats/<layer>/{mean,var}_dist`` = (1/d)·‖population − running‖₂ (the
    variance's both unbiased), with ``eval_stats/first_layer/…`` for the first."""
    metrics = evaluate()
    both = [(name or "model", m) for name, m in model.named_modules() if getattr(m, "eval_stats", None) == "both"]
    if not both:
        return metrics
    for _, m in both:
        m.eval_with_population = True
    try:
        second = evaluate()
    finally:
        for _, m in both:
            m.eval_with_population = False
    out = {**metrics, **{f"{k}_population": v for k, v in second.items()}}
    for i, (name, m) in enumerate(both):
        dists = {
            "mean_dist": estimate_distance(m.population_mean, m.running_mean),
            "var_dist": estimate_distance(m.population_var, m.running_var),
        }
        for layer in [name, "first_layer"] if i == 0 else [name]:
            out.update({f"eval_stats/{layer}/{k}": v for k, v in dists.items()})
    return out


@torch.no_grad()
def refresh_population_stats(
    model: nn.Module,
    make_batches: Callable[[torch.Generator], Iterable[Any]],
    forward: Callable[[nn.Module, Any], Any],
    seed: int,
) -> int:
    """Recompute the population statistics of ``model``'s BatchNorm layers; return the number
    of batches used (0 when no layer asks for them).

    ``make_batches(generator)`` yields training batches drawn with ``generator`` (a fresh
    ``torch.Generator`` seeded with ``seed``); ``forward(model, batch)`` runs the model on one.
    K = the largest ``population_batches`` of the layers.
    """
    layers = population_layers(model)
    if not layers:
        return 0
    k = max(m.population_batches for m in layers)
    saved = {name: buf.clone() for name, buf in model.named_buffers()}
    cold = {m: m.cold for m in model.modules() if hasattr(m, "cold")}  # BatchNorm's warm_start, restored too
    was_training = model.training
    devices = sorted({b.device.index for b in saved.values() if b.device.type == "cuda"})
    for m in layers:
        m.population_sums = [
            torch.zeros((), dtype=torch.float64, device=m.running_mean.device),
            torch.zeros(m.num_features, dtype=torch.float64, device=m.running_mean.device),
            torch.zeros(m.num_features, dtype=torch.float64, device=m.running_mean.device),
            torch.zeros((), dtype=torch.float64, device=m.running_mean.device),
        ]
    used = 0
    try:
        with torch.random.fork_rng(devices=devices):
            model.train()
            for batch in islice(make_batches(torch.Generator().manual_seed(seed)), k):
                forward(model, batch)
                used += 1
    finally:
        sums = {id(m): m.population_sums for m in layers}
        for m in layers:
            m.population_sums = None
        buffers = dict(model.named_buffers())
        for name, value in saved.items():
            buffers[name].copy_(value)
        for m, flag in cold.items():
            m.cold = flag
        model.train(was_training)
    if used == 0:
        raise ValueError("refresh_population_stats: the batch iterable was empty")
    for m in layers:
        count, sum_mean, sum_var, dof = sums[id(m)]
        m.population_mean.copy_(sum_mean / count)
        m.population_var.copy_(sum_var / dof)
        m.population_count.fill_(count)
        m.population_ready = True
    return used
