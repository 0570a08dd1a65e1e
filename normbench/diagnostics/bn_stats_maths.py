"""The maths of ``bn_stats`` (`normbench.diagnostics.bn_stats`): distances between batch and running
statistics, and the share of a norm's input gradient that flows through each batch statistic, as
small pure functions of tensors.

Distances (Shen et al. 2020, PowerNorm, Fig. 2), side by side, with d channels, μ_B and s²_B the
step's batch mean and unbiased batch variance, μ and σ² the running estimates before the step:

=====================  =======================================  ================================================
                       the paper's (``<stat>_dist_paper``)       ours, scale-free (``<stat>_dist``)
=====================  =======================================  ================================================
mean                   (1/d)·‖μ_B − μ‖₂                          sqrt((1/d)·Σ_c ((μ_B,c − μ_c)/sqrt(σ²_c + eps))²)
variance               (1/d)·‖s²_B − σ²‖₂                        sqrt((1/d)·Σ_c ((s²_B,c − σ²_c)/(σ²_c + eps))²)
ψ² (PowerNorm)         (1/d)·‖ψ²_B − ψ²‖₂                        sqrt((1/d)·Σ_c ((ψ²_B,c − ψ²_c)/(ψ²_c + eps))²)
=====================  =======================================  ================================================

The paper's is in the units of the layer's input (squared for the variance) and divides a norm that
grows like √d by d: two models that are the same channel by channel but of widths 16 and 128 differ
by √8, and a network whose first layer's inputs are twice as large is twice as far. Ours measures
each channel in its own running standard deviation (the mean) or running variance (the variance: a
relative error), and averages over channels as a root mean square, the (1/√d)-normalized Euclidean
norm: the paper's Euclidean distance, per channel and in the units of σ. Replicating the channels
or rescaling the input leaves it as it is. The root mean square rather than the mean of |·| keeps
the paper's Euclidean norm (and weighs an outlying channel as the paper does). eps is the layer's.

Gradients (Shen et al. 2020, Fig. 3: the gradient that reaches the layer's input through σ²_B):
``<stat>_input_grad_paper`` is ‖∂L/∂x‖₂ of that part (the paper's), which scales with whatever the
loss averages over (128 images against the tokens of ~300 sentences) and with the number of values
per channel. ``<stat>_input_grad`` (ours) divides it by ‖(γ/sqrt(σ²_B + eps))·∂L/∂y‖₂, the gradient the
input gets through the direct path (the statistics held constant), over the same real positions:
dimensionless, the same for any loss scale and for a batch repeated k times, and per channel equal
to |cos(∂L/∂y, x̂)|·σ²_B/(σ²_B + eps) for the variance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

UNBIASED = {"var"}
"""Statistics whose running estimate averages the unbiased n/(n − 1) version of the batch one."""

REFERENCE = {"mean": ("var", 0.5), "var": ("var", 1.0), "psi2": ("psi2", 1.0)}
"""Statistic → (the running statistic its distance is measured in, the power of (running + eps)):
the mean in running standard deviations, the variance in running variances, ψ² in running ψ²."""


def unbiased(var: Tensor, count: Tensor | float) -> Tensor:
    """n/(n − 1)·σ²_B from the biased batch variance σ²_B over n values per channel."""
    return var * (count / (count - 1))


def input_count(x: Tensor, mask: Tensor | None, channels: int) -> Tensor:
    """Values per channel of a norm's input: x.numel()/C, or with a (N, T) token mask the real
    tokens times the values each token holds per channel (0-dim float64, on x's device)."""
    per_channel = x.numel() / channels
    if mask is None:
        return torch.tensor(per_channel, dtype=torch.float64, device=x.device)
    return mask.sum(dtype=torch.float64) * (per_channel / mask.numel())


def stat_distance(batch_stat: Tensor, running_stat: Tensor) -> Tensor:
    """The paper's (1/d)·‖batch_stat − running_stat‖₂ over the d channels (float64, 0-d)."""
    d = batch_stat.numel()
    return torch.linalg.vector_norm(batch_stat.double() - running_stat.double()) / d


def reference_scale(stat: str, running: Mapping[str, Tensor], eps: float) -> Tensor | None:
    """The per-channel unit of ``stat``'s relative distance: sqrt(σ² + eps) for the mean, σ² + eps
    for the variance, ψ² + eps for ψ² (float64); None when the running statistic is not kept."""
    ref, power = REFERENCE.get(stat, (None, 1.0))
    if ref is None or ref not in running:
        return None
    return (running[ref].double() + eps).pow(power)


def relative_distance(batch_stat: Tensor, running_stat: Tensor, scale: Tensor) -> Tensor:
    """Ours: sqrt((1/d)·Σ_c ((batch_c − running_c)/scale_c)²), the root mean square over channels
    of the difference in each channel's own unit (float64, 0-d)."""
    diff = (batch_stat.double() - running_stat.double()) / scale.double()
    return diff.square().mean().sqrt()


def compute(
    batch_stats: Mapping[str, Tensor],
    running: Mapping[str, Tensor],
    count: Tensor | float | None = None,
    eps: float = 1e-5,
) -> dict[str, float]:
    """``<stat>_dist`` (ours, where ``running`` holds its reference, `REFERENCE`) and
    ``<stat>_dist_paper`` (the paper's) for each statistic present in both mappings (``mean``, ``var``, ``psi2``).

    ``batch_stats`` as the norms record them (``var`` biased, over ``count`` values per channel):
    ``var`` is made unbiased before it meets the running variance; it needs ``count``.
    """
    out = {}
    for k, v in batch_stats.items():
        if k not in running:
            continue
        if k in UNBIASED:
            if count is None:
                raise ValueError(f"compute: {k!r} needs count, the values per channel of the batch statistics")
            v = unbiased(v.double(), count)
        out[f"{k}_dist_paper"] = float(stat_distance(v, running[k]))
        scale = reference_scale(k, running, eps)
        if scale is not None:
            out[f"{k}_dist"] = float(relative_distance(v, running[k], scale))
    return out


def grad_moments(total: float, square: float, n: int) -> tuple[float, float]:
    """(m, s/m) of n values from their sum and sum of squares: the mean and the coefficient of
    variation, s the sample standard deviation (n − 1); s/m is NaN for n < 2 or m = 0."""
    mean = total / n
    if n < 2 or mean == 0:
        return mean, float("nan")
    var = max(square - n * mean * mean, 0.0) / (n - 1)
    return mean, var**0.5 / mean


def input_grad_through(stat: str, grad: Tensor, var: Tensor | None, n: Tensor) -> Tensor | None:
    """‖∂L/∂x‖₂ over the layer's input of the part that flows through the batch statistic, from
    g = ∂L/∂stat per channel and n values per channel: ∂μ_B/∂x = 1/n and ∂σ²_B/∂x = 2(x − μ_B)/n
    give per channel |g_μ|/√n and 2·|g_σ²|·σ_B/√n (σ_B the biased batch standard deviation)."""
    n = n.double().to(grad.device).clamp_min(1)
    if stat == "mean":
        return torch.linalg.vector_norm(grad) / n.sqrt()
    if var is None:
        return None
    return 2 * torch.linalg.vector_norm(grad * var.detach().double().to(grad.device).clamp_min(0).sqrt()) / n.sqrt()


def direct_input_grad(out_sq: Tensor, var: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    """‖(γ/sqrt(σ²_B + eps))·∂L/∂y‖₂ over the real positions, from Σ (∂L/∂y)² per channel
    (``out_sq``): the input gradient of the direct path, the statistics held constant."""
    gain = 1.0 / (var.detach().double().to(out_sq.device) + eps)
    if weight is not None:
        gain = gain * weight.detach().double().to(out_sq.device).square()
    return (out_sq.double() * gain).sum().sqrt()


class GradSquares(torch.autograd.Function):
    """Identity in the forward; in the backward, the probe's gradient is Σ (∂L/∂y)² per channel of
    y over the real positions (``w``: (N, T, 1) token weights of an ``NTC`` output, or None), so a
    zero leaf of C values reads the squared norm of the output gradient without a tensor hook."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, probe: Tensor, w: Tensor | None, channel_dim: int) -> Tensor:
        ctx.channel_dim, ctx.probe_dtype, ctx.masked = channel_dim, probe.dtype, w is not None
        if w is not None:
            ctx.save_for_backward(w)
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor, None, None]:
        sq = g.detach().double().square()
        if ctx.masked:
            sq = sq * ctx.saved_tensors[0].double()
        dims = [d for d in range(g.dim()) if d != ctx.channel_dim % g.dim()]
        return g, sq.sum(dims).to(ctx.probe_dtype), None, None
