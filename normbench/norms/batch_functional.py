"""The maths of the batch-statistic norms (BatchNorm, Batch Renormalization, PowerNorm).

Every function here works on the (A, C, L) view of `functional.as_acl`: batch statistics are
per-channel sums over axes 0 and 2, restricted to real positions by 0/1 weights ``w`` of shape
(A, 1, L) (``None``: every position is real). Outputs are 0 at padding positions and no
gradient flows through them, so padding can reach real tokens neither forwards nor backwards.

Two implementations of BatchNorm with the same maths:

- `batch_norm_fused`: an autograd function with a hand-written backward, a few full passes over
  the tensor each way (the speed path; also handles eps = 0, which ``F.batch_norm`` refuses in
  training);
- `batch_norm_composed`: plain differentiable torch ops, whose batch statistics are live tensors
  in the autograd graph (for diagnostics that take ∂L/∂σ²_B) and whose count / sum / sum of
  squares can be all-reduced across processes with a differentiable all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

AllReduce = Callable[[Tensor], Tensor]


def weighted_sum(v: Tensor, w: Tensor | None) -> Tensor:
    """Σ over axes 0 and 2 of an (A, C, L) tensor, weighted by ``w`` (A, 1, L) when given → (C,)."""
    if v.shape[2] == 1:  # rows (sequences): a matrix-vector product is the fastest masked sum
        v2 = v.view(v.shape[0], v.shape[1])
        return v2.sum(0) if w is None else (w.view(1, -1) @ v2).view(-1)
    return v.sum((0, 2)) if w is None else (v * w).sum((0, 2))


def real_count(x3: Tensor, w: Tensor | None) -> Tensor:
    """Number of real positions per channel, as a 0-dim tensor of ``x3``'s dtype."""
    if w is None:
        return torch.tensor(float(x3.shape[0] * x3.shape[2]), dtype=x3.dtype, device=x3.device)
    return w.sum()


@dataclass(frozen=True)
class Renorm:
    """Batch Renormalization's correction (Ioffe 2017): r = clip(σ_B/σ, 1/r_max, r_max),
    d = clip((μ_B − μ)/σ, −d_max, d_max), σ_B = sqrt(σ²_B + eps), σ = sqrt(running_var + eps);
    r and d are treated as constants by the backward (stop-gradient), as in the paper."""

    running_mean: Tensor
    running_var: Tensor
    r_max: float
    d_max: float

    def factors(self, mean: Tensor, var: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        sigma = torch.sqrt(self.running_var + eps)
        r = (torch.sqrt(var + eps) / sigma).clamp(1.0 / self.r_max, self.r_max)
        d = ((mean - self.running_mean) / sigma).clamp(-self.d_max, self.d_max)
        return r, d


class _BatchNormFunction(torch.autograd.Function):
    """y = γ·((x − μ_B)/sqrt(σ²_B + eps)·r + d) + β over real positions, 0 at padding."""

    @staticmethod
    def forward(ctx, x3, w, weight, bias, eps, renorm):  # type: ignore[override]
        n = real_count(x3, w)
        mean = weighted_sum(x3, w) / n
        buf = x3 - mean[:, None]
        buf.mul_(buf)
        var = weighted_sum(buf, w) / n
        invstd = torch.rsqrt(var + eps)
        r = d = None
        if renorm is not None:
            r, d = renorm.factors(mean, var, eps)
        gain = invstd if r is None else invstd * r  # ∂y/∂x before γ
        scale = gain if weight is None else gain * weight
        shift = -mean * scale
        if d is not None:
            shift = shift + (d if weight is None else d * weight)
        if bias is not None:
            shift = shift + bias
        y = torch.addcmul(shift[:, None], x3, scale[:, None], out=buf)
        if w is not None:
            y.mul_(w)
        ctx.save_for_backward(x3, w, weight, mean, invstd, r, d)
        ctx.n = n
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(ctx, dy, _dmean, _dvar):  # type: ignore[override]
        x3, w, weight, mean, invstd, r, d = ctx.saved_tensors
        n = ctx.n
        gain = invstd if r is None else invstd * r
        dy = dy.contiguous()
        sum_dy = weighted_sum(dy, w)
        buf = x3 - mean[:, None]
        buf.mul_(dy)
        sum_dy_xhat = weighted_sum(buf, w) * invstd  # Σ dy·x̂, x̂ = (x − μ_B)/σ_B
        g = gain if weight is None else gain * weight  # ∂y/∂x through the affine
        k1 = -g * invstd * sum_dy_xhat / n
        k0 = -g * sum_dy / n - k1 * mean
        dx = torch.addcmul(k0[:, None], x3, k1[:, None], out=buf)
        dx.addcmul_(dy, g[:, None])
        if w is not None:
            dx.mul_(w)
        dweight = None
        if weight is not None and ctx.needs_input_grad[2]:
            dweight = sum_dy_xhat if r is None else sum_dy_xhat * r + d * sum_dy
        dbias = sum_dy if ctx.needs_input_grad[3] else None
        return dx, None, dweight, dbias, None, None


def batch_norm_fused(
    x3: Tensor,
    w: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    renorm: Renorm | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """BatchNorm (Ioffe & Szegedy 2015) over the real positions of an (A, C, L) tensor.

    Returns (y, μ_B, σ²_B) with σ²_B biased; μ_B and σ²_B carry no gradient. Exact two-pass
    statistics (the mean first, then the centred squares). eps is inside the square root and
    may be 0. With ``renorm``, Batch Renormalization's r and d are applied (see `Renorm`).
    """
    return _BatchNormFunction.apply(x3, w, weight, bias, eps, renorm)


def batch_norm_composed(
    x3: Tensor,
    w: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    renorm: Renorm | None = None,
    all_reduce: AllReduce | None = None,
    shift: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The maths of `batch_norm_fused` in differentiable torch ops; returns (y, μ_B, σ²_B, n)
    with μ_B and σ²_B live in the autograd graph.

    With ``all_reduce`` (a differentiable sum over processes), the statistics are those of the
    union of all processes' real positions: the vector [count, Σ(x − s), Σ(x − s)²] is summed
    across processes in one call, with ``shift`` s (per channel, equal on every process; the
    running mean) subtracted first so that σ²_B = Σ(x − s)²/n − (Σ(x − s)/n)² loses little
    precision. Without ``all_reduce`` the statistics are exact two-pass ones.
    """
    c = x3.shape[1]
    if all_reduce is None:
        n = real_count(x3, w)
        mean = weighted_sum(x3, w) / n
        centred = x3 - mean[:, None]
        var = weighted_sum(centred * centred, w) / n
    else:
        s = torch.zeros(c, dtype=x3.dtype, device=x3.device) if shift is None else shift.detach()
        xs = x3 - s[:, None]
        local = torch.cat([real_count(x3, w).view(1), weighted_sum(xs, w), weighted_sum(xs * xs, w)])
        total = all_reduce(local)
        n, s1, s2 = total[0], total[1 : c + 1], total[c + 1 :]
        mean_shifted = s1 / n
        mean = s + mean_shifted
        var = (s2 / n - mean_shifted.square()).clamp_min(0)
        centred = x3 - mean[:, None]
    invstd = torch.rsqrt(var + eps)
    xhat = centred * invstd[:, None]
    if renorm is not None:
        r, d = renorm.factors(mean.detach(), var.detach(), eps)
        xhat = xhat * r[:, None] + d[:, None]
    y = xhat if weight is None else xhat * weight[:, None]
    if bias is not None:
        y = y + bias[:, None]
    if w is not None:
        y = y * w
    return y, mean, var, n


def santurkar_noise(
    num_samples: int,
    num_features: int,
    n_mu: float,
    n_sigma: float,
    r_mu: float,
    r_sigma: float,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Santurkar et al. 2018, Appendix A.2.1, Algorithm 1: one draw of (m, s), each (N, C).

    Per unit j: μ_j ~ U(−n_μ, n_μ), σ_j ~ U(1, n_σ); per sample i and unit j:
    m_ij ~ U(μ_j − r_μ, μ_j + r_μ), s_ij ~ N(σ_j, r_σ) with r_σ a standard deviation (the paper
    leaves this open). Drawn on the CPU in float64, unit draws first, then sample by sample, so
    that sample i's noise does not depend on how many samples follow it.
    """
    unit = torch.rand(2, num_features, generator=generator, dtype=torch.float64)
    mu = (2 * unit[0] - 1) * n_mu
    sigma = 1 + unit[1] * (n_sigma - 1)
    per_sample = torch.rand(num_samples, 3, num_features, generator=generator, dtype=torch.float64)
    m = mu + (2 * per_sample[:, 0] - 1) * r_mu
    # Box–Muller from the two remaining uniforms (1 − u keeps the logarithm finite).
    normal = torch.sqrt(-2 * torch.log1p(-per_sample[:, 1])) * torch.cos(2 * torch.pi * per_sample[:, 2])
    s = sigma + r_sigma * normal
    return m, s


class _PowerFunction(torch.autograd.Function):
    """PowerNorm's normalization with its approximate backward (Shen et al. 2020, Alg. 1 as in
    the authors' released code). Input: the group-scaled x̃ as (A, C, L)."""

    @staticmethod
    def forward(ctx, x3, w, weight, bias, psi2_forward, psi2_batch, ema_gz, eps, alpha_bkw, n):  # type: ignore[override]
        z = x3 * torch.rsqrt(psi2_forward + eps)[:, None]
        y = z if weight is None else z * weight[:, None]
        if bias is not None:
            y = y + bias[:, None]
        if w is not None:
            y = y * w
        ctx.save_for_backward(z, w, weight, psi2_batch)
        ctx.ema_gz = ema_gz  # a buffer updated in place by the backward: kept out of the version checks
        ctx.eps, ctx.alpha_bkw, ctx.n = eps, alpha_bkw, n
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        z, w, weight, psi2_batch = ctx.saved_tensors
        ema_gz = ctx.ema_gz
        g = dy if weight is None else dy * weight[:, None]
        g_hat = g - (1 - ctx.alpha_bkw) * ema_gz[:, None] * z
        ema_gz.add_(weighted_sum(g_hat * z, w) / ctx.n)
        dx = g_hat * torch.rsqrt(psi2_batch + ctx.eps)[:, None]
        if w is not None:
            dx = dx * w
        dweight = weighted_sum(dy * z, w) if weight is not None and ctx.needs_input_grad[2] else None
        dbias = weighted_sum(dy, w) if ctx.needs_input_grad[3] else None
        return dx, None, dweight, dbias, None, None, None, None, None, None


def power_norm_train(
    x3: Tensor,
    w: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    psi2_forward: Tensor,
    psi2_batch: Tensor,
    ema_gz: Tensor,
    eps: float,
    alpha_bkw: float,
    n: Tensor,
) -> Tensor:
    """PowerNorm's training step on group-scaled input x̃ (A, C, L).

    Forward: z = x̃ / sqrt(ψ² + eps) with ψ² = ``psi2_forward`` (the batch's ψ²_B during
    warm-up, the running ψ² after), y = γ·z + β. Backward (approximate, not the derivative of the
    forward): ĝ = γ·dy − (1 − α_bkw)·ema_gz·z; ema_gz += mean over real positions of ĝ·z
    (in place, before returning); dx̃ = ĝ / sqrt(ψ²_B + eps) with ψ²_B = ``psi2_batch``.
    """
    return _PowerFunction.apply(x3, w, weight, bias, psi2_forward, psi2_batch, ema_gz, eps, alpha_bkw, n)
