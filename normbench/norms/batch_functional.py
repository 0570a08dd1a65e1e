"""The maths of the batch-statistic norms (BatchNorm, Batch Renormalization, the noise of
Santurkar et al. 2018; PowerNorm in `power_functional`), as pure functions of tensors in torch ops.

Inputs keep their layout (``NCHW``: channels on axis 1; ``NTC``: channels last); batch statistics
are per channel over every other axis, restricted to real tokens by 0/1 weights ``w`` of shape
(N, T, 1) (``None``: every position is real). Outputs are 0 at padding positions and no gradient
flows through them. Nothing here synchronizes the host with the device: schedules are tensors,
noise is drawn on the input's device with torch's generator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.norms.functional import apply_mask, batch_dims, channel_affine, channel_shape

AllGather = Callable[[Tensor], tuple[Tensor, ...]]
"""A differentiable all-gather over processes (``torch.distributed.nn.functional.all_gather``)."""


def batch_moments(x: Tensor, layout: str, w: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(μ_B, σ²_B, n): per-channel mean and biased variance over the real positions, and their
    number n (a 0-dim tensor). Exact two-pass statistics (the mean, then the centred squares),
    differentiable. A batch with no real position gives μ_B = σ²_B = 0 (not NaN)."""
    dims = batch_dims(x, layout)
    if w is None:
        var, mean = torch.var_mean(x, dims, correction=0)
        return mean, var, mean.new_full((), x.numel() // mean.numel())  # a fill on the device: no host copy
    n = w.sum()
    denominator = n.clamp_min(1)
    mean = (x * w).sum(dims) / denominator
    var = ((x - mean.view(channel_shape(x, layout))).square() * w).sum(dims) / denominator
    return mean, var, n


def batch_norm_updating(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Training BatchNorm of ``x`` (channels on axis 1) by the kernel ``F.batch_norm`` picks
    (cuDNN, MIOpen or torch's own), which also updates the running estimates in place; returns
    (y, μ_B, 1/sqrt(σ²_B + eps)) as the kernel saved them for its backward: the same numbers as
    ``F.batch_norm``, bit for bit, and the statistics for free (`var_from_invstd`)."""
    running = (running_mean, running_var)
    y, mean, invstd, _ = torch.ops.aten._batch_norm_with_update(x, weight, bias, *running, momentum, eps)
    return y, mean, invstd


def var_from_invstd(invstd: Tensor, eps: float) -> Tensor:
    """σ²_B = invstd⁻² − eps from a kernel's saved inverse standard deviation (its dtype): exact up
    to the rounding of invstd (relative 2⁻²⁴ of σ²_B + eps in float32), never negative."""
    return (invstd.detach().double().pow(-2) - eps).clamp_min(0).to(invstd.dtype)


def merge_moments(all_gather: AllGather, mean: Tensor, var: Tensor, n: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The moments of the union of every process's real positions, from each process's own
    (μ_k, σ²_k, n_k): Chan, Golub & LeVeque's parallel merge, μ = Σ n_k·μ_k / n,
    σ² = Σ n_k·(σ²_k + (μ_k − μ)²) / n. Every term is a centred one, so the merge loses no
    precision when |mean| ≫ std (the one-pass Σx²/n − μ² would). Differentiable through the
    all-gather: each process gets the gradients of the single-process computation."""
    c = mean.numel()
    parts = torch.stack(all_gather(torch.cat([n.view(1), mean, var])))  # (P, 1 + 2C)
    counts, means, variances = parts[:, :1], parts[:, 1 : c + 1], parts[:, c + 1 :]
    total = counts.sum()
    weights = counts / total.clamp_min(1)
    merged_mean = (weights * means).sum(0)
    merged_var = (weights * (variances + (means - merged_mean).square())).sum(0)
    return merged_mean, merged_var, total


def unbiased(var: Tensor, n: Tensor) -> Tensor:
    """n/(n − 1)·σ²_B, the unbiased variance that BatchNorm's running estimate averages. For
    n < 2 it is undefined; the value returned is then finite and callers skip the update
    (`ema_update`)."""
    return var * (n / (n - 1).clamp_min(1))


@torch.no_grad()
def ema_update(running: Tensor, value: Tensor, momentum: float | Tensor, valid: Tensor) -> None:
    """running ← (1 − momentum)·running + momentum·value, only where ``valid`` (a bool tensor):
    a batch with too few real positions leaves the running estimate as it was. ``momentum`` a
    number or a 0-dim tensor (`debiased_momentum`)."""
    weight = momentum.to(running.dtype) if isinstance(momentum, Tensor) else momentum
    running.copy_(torch.where(valid, running.lerp(value.to(running.dtype), weight), running))


def debiased_momentum(momentum: float, t: Tensor) -> Tensor:
    """momentum/(1 − (1 − momentum)^t): the weight of the t-th batch (t ≥ 1, a tensor: no host
    sync) in a bias-corrected EMA. Updating in place with it keeps the estimate equal to Adam's
    bias-corrected m_t/(1 − (1 − momentum)^t) of a zero-started EMA: the (1 − momentum)^k-weighted
    average of the t batches (1 at t = 1: the first batch replaces the start)."""
    decay = (1.0 - momentum) ** t.double().clamp_min(1)
    return momentum / (1.0 - decay)


def snapshot(buffer: Tensor) -> Tensor:
    """A copy of ``buffer`` as it is now, which the backward of a compiled step reads even after the
    step updates ``buffer`` in place. Eager mode needs no copy; under ``torch.compile`` (torch 2.14)
    AOT autograd's partitioner may recompute a value the backward needs from a mutated buffer
    rather than save it, and the recompute then reads the buffer *after* the step's update: silently
    wrong gradients (pytorch/pytorch#197039, open; the minimal case: tests/norms/test_torch_mutated_buffer_read.py).
    A sum over a stacked zero is a reduction, which the partitioner saves instead of recomputing;
    bit-exact (x + 0 = x)."""
    return torch.stack([buffer, torch.zeros_like(buffer)]).sum(0)


@dataclass(frozen=True)
class Renorm:
    """Batch Renormalization's correction (Ioffe 2017): r = clip(σ_B/σ, 1/r_max, r_max),
    d = clip((μ_B − μ)/σ, −d_max, d_max), σ_B = sqrt(σ²_B + eps), σ = sqrt(running_var + eps);
    r and d are treated as constants by the backward (stop-gradient), as in the paper. r_max and
    d_max are 0-dim tensors (a schedule read on the device). All four are the values before this
    step's update of the running estimates, taken with `snapshot`."""

    running_mean: Tensor
    running_var: Tensor
    r_max: Tensor
    d_max: Tensor

    def factors(self, mean: Tensor, var: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        sigma = torch.sqrt(self.running_var + eps)
        r = torch.minimum(torch.maximum(torch.sqrt(var + eps) / sigma, 1.0 / self.r_max), self.r_max)
        d = torch.minimum(torch.maximum((mean - self.running_mean) / sigma, -self.d_max), self.d_max)
        return r.detach(), d.detach()


def linear_ramp(step: Tensor, start: int, end: int) -> Tensor:
    """0 up to ``start``, then linear to 1 at ``end``, as a tensor of ``step`` (no host sync)."""
    return ((step.double() - start) / max(end - start, 1)).clamp(0.0, 1.0)


def renormalized_affine(weight: Tensor | None, bias: Tensor | None, r: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """γ·(x̂·r + d) + β = x̂·(γ·r) + (β + γ·d): Batch Renormalization as plain BatchNorm with
    the affine (γ·r, β + γ·d); the gradients to γ and β follow through these products."""
    new_weight = r if weight is None else weight * r
    new_bias = d if weight is None else weight * d
    return new_weight, (new_bias if bias is None else bias + new_bias)


def masked_mean(x2: Tensor, w1: Tensor, n: Tensor) -> Tensor:
    """Σ w·x / n over the rows of an (A, C) tensor with (A, 1) weights: a matrix-vector product
    in eager mode (no full-size temporary), a fusible reduction under torch.compile. Always in
    ``x2``'s dtype: autocast would run the product in bf16 (a mean of 100 off by a few tenths,
    and eager runs unlike compiled ones), so it is off here."""
    if torch.compiler.is_compiling():
        return (x2 * w1).sum(0) / n
    with torch.autocast(x2.device.type, enabled=False):
        return (w1.view(1, -1).to(x2.dtype) @ x2).view(-1) / n


def batch_norm_fused(
    x: Tensor,
    w: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    renorm: Renorm | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """BatchNorm over the real positions through torch's fused kernel (``native_batch_norm``) of
    ``x`` with channels on axis 1 (N, C, *) or rows (A, C) with weights ``w`` (A, 1); returns
    (y, μ_B, σ²_B, n) with the statistics detached. The same maths as
    `batch_norm_composed`, faster: one fused pass each way plus, with a mask, two cheap ones.

    Masked sequences (``w`` given): the fused kernel normalizes over all A = N·T rows, so the
    input is first moved, exactly, to one whose statistics over all rows are those of the real
    rows: x' = μ + k·(x − μ) at real rows and μ at padding, k = sqrt(A/n) (μ the mean over the n
    real rows). Then mean(x') = μ and var(x') = k²·n/A·σ² = σ², so BN(x') = k·(x − μ)/sqrt(σ² + eps)
    at real rows and the weight γ/k gives BatchNorm exactly (eps where it belongs); the rows of
    padding are set to 0 afterwards. Every step is a differentiable torch op, so autograd gives
    the exact gradient (no gradient reaches padding). With ``renorm``, r and d come from the
    kernel's statistics and the affine (γ·r, β + γ·d) follows the kernel.
    """
    weight, bias = (None if p is None else p.to(x.dtype) for p in (weight, bias))  # a bf16 module, float32 maths
    if w is None:
        xs, k, n = x, None, x.new_full((), x.numel() // x.shape[1], dtype=torch.float32)
    else:  # (A, C) rows with weights (A, 1): see the docstring
        n = w.sum()
        n_real = n.clamp_min(1)
        mean = masked_mean(x, w, n_real)
        k = torch.sqrt(x.shape[0] / n_real)
        xs = torch.addcmul(mean, x - mean, k * w)
    if renorm is None:
        fused_weight = weight if k is None else (1 / k if weight is None else weight / k)
        y, mean, invstd = torch.native_batch_norm(xs, fused_weight, bias, None, None, True, 0.0, eps)
    else:
        xhat, mean, invstd = torch.native_batch_norm(xs, None, None, None, None, True, 0.0, eps)
    var = var_from_invstd(invstd, eps)
    mean = mean.detach()
    if renorm is not None:
        weight, bias = renormalized_affine(weight, bias, *renorm.factors(mean, var, eps))
        y = channel_affine(xhat, weight if k is None else weight / k, bias, "NCHW")
    return apply_mask(y, w), mean, var, n.detach().to(mean.dtype)


def inverse_std(var: Tensor, n: Tensor, eps: float) -> Tensor:
    """1/sqrt(σ²_B + eps). With eps = 0 a batch of fewer than 2 real positions (one real token of a
    masked batch) has σ²_B = 0 and x − μ_B = 0: it gets 0, the limit of every eps > 0 (x̂ = 0, no
    gradient to x), instead of 0·∞ = NaN in the output and the gradients."""
    if eps > 0:
        return torch.rsqrt(var + eps)
    spread = n > 1
    return torch.where(spread, torch.rsqrt(torch.where(spread, var, 1.0)), 0.0)  # no inf even where unused


def batch_norm_composed(
    x: Tensor,
    layout: str,
    w: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    renorm: Renorm | None = None,
    all_gather: AllGather | None = None,
    probes: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """BatchNorm (Ioffe & Szegedy 2015) over the real positions, in differentiable torch ops:
    y = (x − μ_B)/sqrt(σ²_B + eps)·γ + β (0 at padding); returns (y, μ_B, σ²_B, n) with the
    statistics live in the autograd graph. With ``renorm``, Batch Renormalization's r and d; with
    ``all_gather``, the statistics of every process's batch together (`merge_moments`); with
    ``probes`` (two zero leaf tensors of C values, added to μ_B and σ²_B: the same numbers), the
    gradients of the loss with respect to the statistics land in the probes' ``.grad`` — no tensor
    hook, so `torch.compile` traces it in one graph."""
    mean, var, n = batch_moments(x, layout, w)
    if all_gather is not None:
        mean, var, n = merge_moments(all_gather, mean, var, n)
    if probes is not None:  # zeros that are leaves: their .grad after backward is ∂L/∂μ_B and ∂L/∂σ²_B
        mean, var = mean + probes[0], var + probes[1]
    shape = channel_shape(x, layout)
    xhat = (x - mean.view(shape)) * inverse_std(var, n, eps).view(shape)
    if renorm is not None:
        weight, bias = renormalized_affine(weight, bias, *renorm.factors(mean, var, eps))
    return apply_mask(channel_affine(xhat, weight, bias, layout), w), mean, var, n


def santurkar_noise(
    x: Tensor, layout: str, n_mu: float, n_sigma: float, r_mu: float, r_sigma: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Santurkar et al. 2018, Appendix A.2.1, Algorithm 1: one draw of (m, s, μ, σ) for ``x``.

    Per unit (channel) j: μ_j ~ U(−n_μ, n_μ), σ_j ~ U(1, n_σ); per activation — every sample
    and, as the paper treats H and W (and here T) as batch axes, every position —
    m ~ U(μ_j − r_μ, μ_j + r_μ), s ~ N(σ_j, r_σ) with r_σ a standard deviation (the paper leaves
    this open). m and s have ``x``'s shape and dtype; μ and σ are (C,). Drawn on ``x``'s device
    with torch's generator of that device, in float32 and in the logical (contiguous) order of
    ``x``'s shape whatever its dtype and memory format: 2·C unit uniforms, the uniforms of m, the
    normals of s. The stream is that of torch's generator, so it is the same whichever path runs
    it, and a rewound generator (diagnostics) redraws the step's noise. On sequences the draws at
    real tokens depend on the padded shape (the same distributions); the draws at padding are
    multiplied by 0 and reach nothing.
    """
    c = x.shape[1 if layout == "NCHW" else -1]
    draw = {"device": x.device, "dtype": torch.float32}  # float32 and logical order whatever x's dtype and layout
    unit = torch.rand(2, c, **draw)
    mu = (2 * unit[0] - 1) * n_mu
    sigma = 1 + unit[1] * (n_sigma - 1)
    shape = channel_shape(x, layout)
    m, s = mu.view(shape).expand(x.shape), sigma.view(shape).expand(x.shape)
    if r_mu > 0:  # (r_mu = 0 or r_sigma = 0: nothing to draw per activation)
        m = torch.rand(x.shape, **draw).mul(2 * r_mu).add(m - r_mu)
    if r_sigma > 0:
        s = torch.randn(x.shape, **draw).mul(r_sigma).add(s)
    return m.to(x.dtype), s.to(x.dtype), mu.to(x.dtype), sigma.to(x.dtype)
