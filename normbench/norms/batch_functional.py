"""The maths of the batch-statistic norms (BatchNorm, Batch Renormalization, the noise of
Santurkar et al. 2018, PowerNorm), as pure functions of tensors in torch ops.

Inputs keep their layout (``NCHW``: channels on axis 1; ``NTC``: channels last); batch statistics
are per channel over every other axis, restricted to real tokens by 0/1 weights ``w`` of shape
(N, T, 1) (``None``: every position is real). Outputs are 0 at padding positions and no gradient
flows through them. Nothing here synchronizes the host with the device: schedules are tensors,
noise is drawn on the input's device with torch's generator.
"""

from __future__ import annotations

import functools
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
    x: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor, running_var: Tensor,
    momentum: float, eps: float,
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
def ema_update(running: Tensor, value: Tensor, momentum: float, valid: Tensor) -> None:
    """running ← (1 − momentum)·running + momentum·value, only where ``valid`` (a bool tensor):
    a batch with too few real positions leaves the running estimate as it was."""
    running.copy_(torch.where(valid, running.lerp(value.to(running.dtype), momentum), running))


@dataclass(frozen=True)
class Renorm:
    """Batch Renormalization's correction (Ioffe 2017): r = clip(σ_B/σ, 1/r_max, r_max),
    d = clip((μ_B − μ)/σ, −d_max, d_max), σ_B = sqrt(σ²_B + eps), σ = sqrt(running_var + eps);
    r and d are treated as constants by the backward (stop-gradient), as in the paper. r_max and
    d_max are 0-dim tensors (a schedule read on the device)."""

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


def renormalized_affine(
    weight: Tensor | None, bias: Tensor | None, r: Tensor, d: Tensor
) -> tuple[Tensor, Tensor]:
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


# ---------------------------------------------------------------------------------------------
# PowerNorm


def exact_precision(method: Callable) -> Callable:
    """For an autograd Function's forward/backward: run with autocast off, so that its reductions
    keep the dtype of the tensors given (autocast would run matrix products in half precision)."""

    @functools.wraps(method)
    def run(ctx, first: Tensor, *args):
        with torch.autocast(first.device.type, enabled=False):
            return method(ctx, first, *args)

    return run


class _PowerNormFunction(torch.autograd.Function):
    """PowerNorm's training step, GroupScaling included, with its approximate backward
    (Shen et al. 2020, Alg. 1 as in the authors' released code). Input (A, G, C/G, L), row
    weights (A, 1, 1, 1) or None; see `power_norm_train`. x̃ = x·s is recomputed from x in the
    backward rather than kept."""

    @staticmethod
    @exact_precision
    def forward(ctx, x4, w4, weight, bias, psi2_running, use_running, ema_gz, eps, alpha_bkw):  # type: ignore[override]
        a, groups, cg, length = x4.shape
        # GroupScaling: s = 1 / sqrt(mean over the group of x² + eps) per position and group.
        inv = x4.square().mean(2, keepdim=True).add(eps).rsqrt()  # (A, G, 1, L)
        if w4 is not None:
            inv = inv * w4  # 0 at padding
        xt = x4 * inv  # x̃, 0 at padding
        n = x4.new_tensor(float(a * length)) if w4 is None else w4.sum() * length
        psi2_batch = xt.square().sum((0, 3)) / n.clamp_min(1)  # mean of x̃² over real positions, (G, C/G)
        # ψ² = running (past the warm-up) or batch. Under torch.compile, AOT autograd would recompute
        # `scale` in the backward from the running-ψ² buffer *after* this step's in-place update
        # (wrong gradients; torch 2.14, pytorch/pytorch#197039). A detached value is saved by the
        # default partitioner and a reduction is never recomputed by the min-cut one, so the choice
        # is written as a (bit-exact) weighted sum. tests/norms/test_compile.py checks it.
        choice = torch.stack([use_running, ~use_running]).to(psi2_batch.dtype).view(2, 1, 1)
        psi2 = (torch.stack([psi2_running.view(groups, cg), psi2_batch]) * choice).sum(0)
        scale = (psi2 + eps).rsqrt().detach()
        coef = scale if weight is None else scale * weight.view(groups, cg)
        y = xt * coef[:, :, None]
        if bias is not None:
            b = bias.view(groups, cg, 1)
            y = y + (b if w4 is None else w4 * b)
        ctx.save_for_backward(x4, inv, w4, weight, scale, psi2_batch, n)
        ctx.ema_gz = ema_gz  # a buffer the backward updates in place: read when the backward runs, as the authors do
        ctx.eps, ctx.alpha_bkw = eps, alpha_bkw
        ctx.mark_non_differentiable(psi2_batch)
        return y, psi2_batch.view(-1)

    @staticmethod
    @exact_precision
    def backward(ctx, dy, _dpsi2):  # type: ignore[override]
        x4, inv, w4, weight, scale, psi2_batch, n = ctx.saved_tensors
        groups, cg = scale.shape
        gamma = torch.ones_like(scale) if weight is None else weight.view(groups, cg)
        dbias = None
        if ctx.needs_input_grad[3]:
            dbias = (dy if w4 is None else dy * w4).sum((0, 3)).view(-1)
        # ĝ = γ·dy − (1 − α_bkw)·ema_gz·z with z = x̃·scale; dx̃ = ĝ/sqrt(ψ²_B + eps) = dy·p − x̃·q
        ema = ctx.ema_gz.view(groups, cg)
        damp = 1 - ctx.alpha_bkw
        inv_batch = (psi2_batch + ctx.eps).rsqrt()
        p = gamma * inv_batch
        q = damp * ema * scale * inv_batch
        xt = x4 * inv
        dy_xt = dy * xt
        sum_dy_xt = dy_xt.sum((0, 3))  # Σ dy·x̃ over real positions (x̃ = 0 at padding)
        dweight = (sum_dy_xt * scale).view(-1) if weight is not None and ctx.needs_input_grad[2] else None
        # GroupScaling's backward needs Σ_group dx̃·x̂ = Σ p·dy·x̃ − Σ q·x̃²  (x̂ = x̃ at real positions)
        dxt = dy * p[:, :, None] - xt * q[:, :, None]
        dot = (dxt * xt).sum(2, keepdim=True)  # (A, G, 1, L)
        # ema_gz += Σ ĝ·z / n with Σ dy·z = scale·Σ dy·x̃ and Σ z² = n·ψ²_B·scale² (with the old ema)
        with torch.no_grad():  # a running estimate, not part of any graph (a double backward records none)
            ema.add_((gamma * sum_dy_xt * scale - damp * ema * n * psi2_batch * scale.square()) / n.clamp_min(1))
        # dx = s·(dx̃ − x̃·mean_group(dx̃·x̃)) — the exact backward of x̃ = x·s, s = 1/rms_group(x)
        dx = inv * (dxt - xt * (dot / cg))
        return dx, None, dweight, dbias, None, None, None, None, None


def power_norm_train(
    x4: Tensor,
    w4: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    psi2_running: Tensor,
    use_running: Tensor,
    ema_gz: Tensor,
    eps: float,
    alpha_bkw: float,
) -> tuple[Tensor, Tensor]:
    """PowerNorm's training step on x viewed as (A, G, C/G, L): G GroupScaling groups, batch
    statistics over axes 0 and 3 (``NCHW`` → (N, G, C/G, H·W); ``NTC`` → (N·T, G, C/G, 1) with
    row weights ``w4`` (N·T, 1, 1, 1) from the mask). Returns (y, ψ²_B), ψ²_B per channel.

    Forward: x̃ = x / sqrt(mean over the group of x² + eps) (0 at padding); ψ²_B = mean over
    real positions of x̃²; z = x̃ / sqrt(ψ² + eps) with ψ² = ``psi2_running`` where
    ``use_running`` (a bool tensor: past the warm-up) and ψ²_B otherwise; y = γ·z + β (0 at
    padding). Backward (approximate, not the derivative of the forward): ĝ = γ·dy −
    (1 − α_bkw)·ema_gz·z; ema_gz += mean over real positions of ĝ·z (in place, ĝ with the old
    ema_gz); dx̃ = ĝ / sqrt(ψ²_B + eps); then the exact backward of GroupScaling. No gradient
    reaches padding. One autograd node.
    """
    return _PowerNormFunction.apply(x4, w4, weight, bias, psi2_running, use_running, ema_gz, eps, alpha_bkw)


def acl(x: Tensor, layout: str) -> Tensor:
    """View ``x`` as (A, C, L) with batch statistics over axes 0 and 2: ``NCHW`` → (N, C, H·W),
    ``NTC`` → (N·T, C, 1)."""
    if layout == "NCHW":
        return x.reshape(x.shape[0], x.shape[1], -1)
    return x.reshape(-1, x.shape[-1], 1)

