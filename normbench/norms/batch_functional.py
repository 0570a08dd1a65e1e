"""The maths of the batch-statistic norms (BatchNorm, Batch Renormalization, PowerNorm).

Every function here works on the (A, C, L) view of `functional.as_acl`: batch statistics are
per-channel sums over axes 0 and 2, restricted to real positions by 0/1 weights ``w`` of shape
(A, 1, L) (``None``: every position is real). Outputs are 0 at padding positions and no
gradient flows through them, so padding can reach real tokens neither forwards nor backwards.

Two implementations of BatchNorm with the same maths:

- `batch_norm_fused`: an autograd function with a hand-written backward, a few full passes over
  the tensor each way (the speed path; also handles eps = 0, which ``F.batch_norm`` refuses in
  training); on CPU rows (sequences) its passes run in the kernels of `normbench.norms.kernels`
  (two reads + one write forward, two reads + one write backward);
- `batch_norm_composed`: plain differentiable torch ops, whose batch statistics are live tensors
  in the autograd graph (for diagnostics that take ∂L/∂σ²_B) and whose count / sum / sum of
  squares can be all-reduced across processes with a differentiable all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.norms import kernels as K
from normbench.norms.functional import exact_precision

AllReduce = Callable[[Tensor], Tensor]


def weighted_sum(v: Tensor, w: Tensor | None) -> Tensor:
    """Σ over axes 0 and 2 of an (A, C, L) tensor, weighted by ``w`` (A, 1, L) when given → (C,)."""
    if v.shape[2] == 1:  # rows (sequences): a matrix-vector product is the fastest masked sum
        v2 = v.view(v.shape[0], v.shape[1])
        return v2.sum(0) if w is None else (w.view(1, -1) @ v2).view(-1)
    return v.sum((0, 2)) if w is None else (v * w).sum((0, 2))


def sample_sums(v3: Tensor, w: Tensor | None, num_samples: int) -> Tensor:
    """Per-sample Σ over axes 0 and 2 of an (A, C, L) tensor whose A rows are ``num_samples``
    samples of A/N rows each, weighted by ``w`` (A, 1, L) when given → (N, C)."""
    a, c, length = v3.shape
    if w is None:
        return v3.view(num_samples, -1, c, length).sum((1, 3))
    rows = a // num_samples
    if length == 1:  # sequences: one batched vector-matrix product per sentence
        return torch.bmm(w.view(num_samples, 1, rows), v3.view(num_samples, rows, c)).view(num_samples, c)
    return (v3 * w).view(num_samples, -1, c, length).sum((1, 3))


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


def _coefficients(
    mean: Tensor, var: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, renorm: Renorm | None
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor, Tensor]:
    """Per channel: (1/σ_B, r, d, scale, shift) with y = x·scale + shift the whole BatchNorm
    (renormalization and affine included): scale = γ·r/σ_B, shift = β + γ·(d − μ_B·r/σ_B)."""
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
    return invstd, r, d, scale, shift


def _grad_coefficients(
    ctx,
    sum_dy: Tensor,
    sum_dy_xhat: Tensor,
    invstd: Tensor,
    r: Tensor | None,
    d: Tensor | None,
    weight: Tensor | None,
    mean: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """BatchNorm's backward per channel from Σ dy and Σ dy·x̂ over real positions (dy the gradient
    reaching the BatchNorm output): dx = dy·g + x·k1 + k0 with g = γ·r/σ_B; (g, k1, k0, dγ, dβ),
    dγ / dβ None where ``ctx`` needs none. r and d are constants (Batch Renormalization)."""
    n = ctx.n
    gain = invstd if r is None else invstd * r
    g = gain if weight is None else gain * weight  # ∂y/∂x through the affine
    k1 = -g * invstd * sum_dy_xhat / n
    k0 = -g * sum_dy / n - k1 * mean
    dweight = None
    if weight is not None and ctx.needs_input_grad[2]:
        dweight = sum_dy_xhat if r is None else sum_dy_xhat * r + d * sum_dy
    dbias = sum_dy if ctx.needs_input_grad[3] else None
    return g, k1, k0, dweight, dbias


class _BatchNormFunction(torch.autograd.Function):
    """y = γ·((x − μ_B)/sqrt(σ²_B + eps)·r + d) + β over real positions, 0 at padding; with a
    per-sample affine (s, m), y·s + m (one (s, m) per sample and channel)."""

    @staticmethod
    @exact_precision
    def forward(ctx, x3, w, weight, bias, eps, renorm, sample_affine):  # type: ignore[override]
        ctx.segments = 0
        if x3.shape[2] == 1 and K.usable(x3, w, weight, bias, *(sample_affine or ())):
            return _BatchNormFunction.forward_rows(ctx, x3, w, weight, bias, eps, renorm, sample_affine)
        n = real_count(x3, w)
        mean = weighted_sum(x3, w) / n
        buf = x3 - mean[:, None]
        buf.mul_(buf)
        var = weighted_sum(buf, w) / n
        invstd, r, d, scale, shift = _coefficients(mean, var, weight, bias, eps, renorm)
        s = None
        if sample_affine is None:
            y = torch.addcmul(shift[:, None], x3, scale[:, None], out=buf)
        else:  # (s, m) folded into the same pass: x·(s·scale) + (s·shift + m)
            s, m = (v[:, None, :, None] for v in sample_affine)  # (N, 1, C, 1)
            x4 = x3.view(s.shape[0], -1, *x3.shape[1:])
            y = torch.addcmul(torch.addcmul(m, s, shift[:, None]), x4, s * scale[:, None], out=buf.view(x4.shape))
            y = y.view(x3.shape)
        if w is not None:
            y.mul_(w)
        ctx.save_for_backward(x3, w, weight, mean, invstd, r, d, s)
        ctx.n = n
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def forward_rows(ctx, x3, w, weight, bias, eps, renorm, sample_affine):  # type: ignore[no-untyped-def]
        """The same maths on rows (sequences) with the CPU kernels: statistics in two reads, the
        output in one read and one write, the per-sample affine folded into the coefficients."""
        x3 = x3.contiguous()
        a, c, _ = x3.shape
        nseg = K.segments(a, None if sample_affine is None else sample_affine[0].shape[0])
        xs, ws = x3.view(nseg, a // nseg, c), None if w is None else w.view(nseg, a // nseg)
        n = real_count(x3, w)
        mean = K.seg_sums(xs, ws).sum(0) / n
        var = K.seg_sums(xs, ws, mean).sum(0) / n
        invstd, r, d, scale, shift = _coefficients(mean, var, weight, bias, eps, renorm)
        s = None
        if sample_affine is not None:  # (x·scale + shift)·s + m = x·(s·scale) + (s·shift + m)
            s, m = sample_affine
            scale, shift = s * scale, torch.addcmul(m, s, shift)
        y = K.seg_affine(xs, scale, shift, ws).view(x3.shape)
        ctx.save_for_backward(x3, w, weight, mean, invstd, r, d, s)
        ctx.n = n
        ctx.segments = nseg
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward_rows(ctx, dy):  # type: ignore[no-untyped-def]
        K.single_backward_only()
        x3, w, weight, mean, invstd, r, d, s = ctx.saved_tensors
        nseg = ctx.segments
        a, c, _ = x3.shape
        xs, ws = x3.view(nseg, a // nseg, c), None if w is None else w.view(nseg, a // nseg)
        seg_dy, seg_dy_xc = K.seg_dot(dy.reshape(nseg, a // nseg, c), xs, ws, mean)
        if s is not None:  # the gradient reaching the BatchNorm output is dy·s
            seg_dy, seg_dy_xc = seg_dy * s, seg_dy_xc * s
        sum_dy, sum_dy_xhat = seg_dy.sum(0), seg_dy_xc.sum(0) * invstd
        g, k1, k0, dweight, dbias = _grad_coefficients(ctx, sum_dy, sum_dy_xhat, invstd, r, d, weight, mean)
        dx = K.seg_grad(dy.reshape(nseg, a // nseg, c), xs, g if s is None else s * g, k1, k0, ws).view(x3.shape)
        return dx, None, dweight, dbias, None, None, None

    @staticmethod
    @exact_precision
    def backward(ctx, dy, _dmean, _dvar):  # type: ignore[override]
        if ctx.segments:
            return _BatchNormFunction.backward_rows(ctx, dy)
        x3, w, weight, mean, invstd, r, d, s = ctx.saved_tensors
        dy = dy.contiguous()
        buf = x3 - mean[:, None]
        buf.mul_(dy)
        if s is None:
            sum_dy = weighted_sum(dy, w)
            sum_dy_xc = weighted_sum(buf, w)
        else:  # the gradient reaching the BatchNorm output is dy·s, never materialised
            s2 = s.view(s.shape[0], -1)
            sum_dy = (sample_sums(dy, w, s2.shape[0]) * s2).sum(0)
            sum_dy_xc = (sample_sums(buf, w, s2.shape[0]) * s2).sum(0)
        sum_dy_xhat = sum_dy_xc * invstd  # Σ dy·x̂, x̂ = (x − μ_B)/σ_B
        g, k1, k0, dweight, dbias = _grad_coefficients(ctx, sum_dy, sum_dy_xhat, invstd, r, d, weight, mean)
        dx = torch.addcmul(k0[:, None], x3, k1[:, None], out=buf)
        if s is None:
            dx.addcmul_(dy, g[:, None])
        else:
            dx.view(s.shape[0], -1, *dx.shape[1:]).addcmul_(dy.view(s.shape[0], -1, *dy.shape[1:]), s * g[:, None])
        if w is not None:
            dx.mul_(w)
        return dx, None, dweight, dbias, None, None, None


def batch_norm_fused(
    x3: Tensor,
    w: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    renorm: Renorm | None = None,
    sample_affine: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """BatchNorm (Ioffe & Szegedy 2015) over the real positions of an (A, C, L) tensor.

    Returns (y, μ_B, σ²_B) with σ²_B biased; μ_B and σ²_B carry no gradient. Exact two-pass
    statistics (the mean first, then the centred squares). eps is inside the square root and
    may be 0. With ``renorm``, Batch Renormalization's r and d are applied (see `Renorm`). With
    ``sample_affine`` = (s, m), each (N, C) where the A rows are N samples of A/N rows each, the
    output is y·s + m per sample and channel (noisy BatchNorm), in the same pass.
    """
    return _BatchNormFunction.apply(x3, w, weight, bias, eps, renorm, sample_affine)


class _SampleAffineFunction(torch.autograd.Function):
    """y = (x·s + m)·w on (N, A/N, C, L) with s, m (N, 1, C, 1); dx = dy·s·w."""

    @staticmethod
    def forward(ctx, x4, w4, s, m):  # type: ignore[override]
        y = torch.addcmul(m, x4, s)
        if w4 is not None:
            y.mul_(w4)
        ctx.save_for_backward(w4, s)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        w4, s = ctx.saved_tensors
        dx = dy * s
        return (dx if w4 is None else dx.mul_(w4)), None, None, None


class _SampleAffineRowsFunction(torch.autograd.Function):
    """`_SampleAffineFunction` on rows (N, A/N, C) with the CPU kernels: one pass each way."""

    @staticmethod
    def forward(ctx, x3, w2, s, m):  # type: ignore[override]
        ctx.save_for_backward(w2, s)
        return K.seg_affine(x3, s, m, w2)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        K.single_backward_only()
        w2, s = ctx.saved_tensors
        return K.seg_affine(dy.contiguous(), s, torch.zeros_like(s), w2), None, None, None


def sample_affine(y3: Tensor, w: Tensor | None, s: Tensor, m: Tensor) -> Tensor:
    """y·s + m with one (s, m) per sample and channel, on an (A, C, L) tensor of N samples of
    A/N rows each (s, m: (N, C), constants); 0 where the row weights ``w`` are 0."""
    n = s.shape[0]
    if y3.shape[2] == 1 and K.usable(y3, w, s, m):
        rows = y3.shape[0] // n
        w2 = None if w is None else w.view(n, rows)
        return _SampleAffineRowsFunction.apply(y3.reshape(n, rows, -1).contiguous(), w2, s, m).view(y3.shape)
    y4 = y3.view(n, -1, *y3.shape[1:])
    w4 = None if w is None else w.view(n, -1, *w.shape[1:])
    return _SampleAffineFunction.apply(y4, w4, s[:, None, :, None], m[:, None, :, None]).view(y3.shape)


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


@torch.compiler.disable  # drawn eagerly, so a compiled model draws the same stream as an eager one
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
    leaves this open). Drawn on the CPU in float32 from 2·C unit uniforms and 2·C uniforms per
    sample, such that sample i's noise does not depend on how many samples follow it (appending
    padded sentences changes nothing). With the CPU kernels (`normbench.norms.kernels`) the
    uniforms come from Philox4x32-10 under a key of two draws from the global generator (or
    ``generator``), element (i, j) at counter (j/4, i), and the whole draw is one C++ pass (M.
    Giles' single-precision erfinv; ~10x faster than torch's generator and ops, which are the
    fallback, drawing their uniforms sample after sample in one call). The stream therefore
    depends on whether the kernels are in use; the distributions do not. The normals are
    inverse-CDF ones, √2·erfinv(2u − 1) with u ≥ 2⁻²⁴ (float32 uniforms: the tails are cut at
    about ±5.3 standard deviations).
    """
    if K.usable():
        keys = torch.randint(0, 2**31 - 1, (2,), generator=generator).tolist()
        return K.santurkar_draw(num_samples, num_features, n_mu, n_sigma, r_mu, r_sigma, (keys[0], keys[1]))
    unit = torch.rand(2, num_features, generator=generator)
    u = torch.rand(num_samples, 2, num_features, generator=generator)
    mu = (2 * unit[0] - 1) * n_mu
    sigma = 1 + unit[1] * (n_sigma - 1)
    m = u[:, 0].mul(2 * r_mu).add_(mu - r_mu)
    normal = u[:, 1].mul(2).sub_(1).clamp_min_(-1 + 2**-23).erfinv_().mul_(2**0.5)
    s = normal.mul_(r_sigma).add_(sigma)
    return m, s


class _PowerNormFunction(torch.autograd.Function):
    """PowerNorm's training step, GroupScaling included, with its approximate backward
    (Shen et al. 2020, Alg. 1 as in the authors' released code). Input (A, G, C/G, L), row
    weights (A, 1, 1, 1) or None; see `power_norm_train`. One full-size tensor is allocated each
    way; x̃ = x·s is recomputed from x rather than kept."""

    @staticmethod
    @exact_precision
    def forward(ctx, x4, w4, weight, bias, psi2_running, ema_gz, eps, alpha_bkw):  # type: ignore[override]
        ctx.ema_gz = ema_gz  # a buffer updated in place by the backward: kept out of the version checks
        ctx.eps, ctx.alpha_bkw = eps, alpha_bkw
        ctx.kernels = x4.shape[3] == 1 and K.usable(x4, w4, weight, bias, psi2_running)
        if ctx.kernels:
            return _PowerNormFunction.forward_rows(ctx, x4, w4, weight, bias, psi2_running, eps)
        a, groups, cg, length = x4.shape
        # GroupScaling: s = w / sqrt(mean over the group of x² + eps) per position and group.
        y = torch.mul(x4, x4)
        inv = y.sum(2, keepdim=True).div_(cg).add_(eps).rsqrt_()
        if w4 is not None:
            inv.mul_(w4)
        n = x4.new_tensor(float(a * length)) if w4 is None else w4.sum() * length
        psi2_batch = y.mul_(inv.square()).sum((0, 3)).div_(n)  # mean of x̃² over real positions, (G, C/G)
        torch.mul(x4, inv, out=y)  # x̃, 0 at padding
        psi2 = psi2_batch if psi2_running is None else psi2_running.view(groups, cg)
        scale = (psi2 + eps).rsqrt()
        y.mul_((scale if weight is None else scale * weight.view(groups, cg))[:, :, None])
        if bias is not None and w4 is None:
            y.add_(bias.view(groups, cg, 1))
        elif bias is not None:
            y.addcmul_(w4, bias.view(groups, cg, 1))
        ctx.save_for_backward(x4, inv, w4, weight, scale, psi2_batch, n)
        ctx.mark_non_differentiable(psi2_batch)
        return y, psi2_batch.view(-1)

    @staticmethod
    def forward_rows(ctx, x4, w4, weight, bias, psi2_running, eps):  # type: ignore[no-untyped-def]
        """The same step on rows (sequences) with the CPU kernels: GroupScaling and ψ²_B in one
        read, the output in one read and one write."""
        a, groups, cg, _ = x4.shape
        x2 = x4.reshape(a, groups * cg).contiguous()
        w1 = None if w4 is None else w4.reshape(a)
        inv, sums = K.pn_rows_forward(x2, w1, groups, eps)
        n = x2.new_tensor(float(a)) if w1 is None else w1.sum()
        psi2_batch = (sums / n).view(groups, cg)
        psi2 = psi2_batch if psi2_running is None else psi2_running.view(groups, cg)
        scale = (psi2 + eps).rsqrt()
        coef = scale if weight is None else scale * weight.view(groups, cg)
        y = K.pn_rows_affine(x2, inv, coef, bias, w1).view(x4.shape)
        ctx.save_for_backward(x2, inv, w1, weight, scale, psi2_batch, n)
        ctx.mark_non_differentiable(psi2_batch)
        return y, psi2_batch.view(-1)

    @staticmethod
    def backward_rows(ctx, dy):  # type: ignore[no-untyped-def]
        K.single_backward_only()
        x2, inv, w1, weight, scale, psi2_batch, n = ctx.saved_tensors
        groups, cg = scale.shape
        gamma = torch.ones_like(scale) if weight is None else weight.view(groups, cg)
        ema = ctx.ema_gz.view(groups, cg)
        damp = 1 - ctx.alpha_bkw
        inv_batch = (psi2_batch + ctx.eps).rsqrt()
        p = gamma * inv_batch
        q = damp * ema * scale * inv_batch
        dx, sum_dy, sum_dy_xt = K.pn_rows_backward(dy.reshape(x2.shape), x2, inv, p, q, w1)
        sum_dy_xt = sum_dy_xt.view(groups, cg)
        dbias = sum_dy if ctx.needs_input_grad[3] else None
        dweight = (sum_dy_xt * scale).view(-1) if weight is not None and ctx.needs_input_grad[2] else None
        ema.add_((gamma * sum_dy_xt * scale - damp * ema * n * psi2_batch * scale.square()) / n)
        return dx.view(dy.shape), None, dweight, dbias, None, None, None, None

    @staticmethod
    @exact_precision
    def backward(ctx, dy, _dpsi2):  # type: ignore[override]
        if ctx.kernels:
            return _PowerNormFunction.backward_rows(ctx, dy)
        x4, inv, w4, weight, scale, psi2_batch, n = ctx.saved_tensors
        a, groups, cg, length = x4.shape
        gamma = torch.ones_like(scale) if weight is None else weight.view(groups, cg)
        dbias = None
        if ctx.needs_input_grad[3]:
            dbias = dy.sum((0, 3)).view(-1) if w4 is None else (w4.view(1, a) @ dy.reshape(a, -1)).view(-1)
        # ĝ = γ·dy − (1 − α_bkw)·ema_gz·z with z = x̃·scale; dx̃ = ĝ/sqrt(ψ²_B + eps) = dy·p − x̃·q
        ema = ctx.ema_gz.view(groups, cg)
        damp = 1 - ctx.alpha_bkw
        inv_batch = (psi2_batch + ctx.eps).rsqrt()
        p = gamma * inv_batch
        q = damp * ema * scale * inv_batch
        buf = torch.mul(dy, x4).mul_(inv)  # dy·x̃
        sum_dy_xt = buf.sum((0, 3))  # Σ dy·x̃ over real positions (x̃ = 0 at padding)
        dweight = (sum_dy_xt * scale).view(-1) if weight is not None and ctx.needs_input_grad[2] else None
        # GroupScaling's backward needs Σ_group dx̃·x̂ = Σ p·dy·x̃ − s²·Σ q·x² (x̂ = x̃ at real positions)
        dot = buf.mul_(p[:, :, None]).sum(2, keepdim=True)  # (A, G, 1, L)
        dot.sub_(torch.mul(x4, x4, out=buf).mul_(q[:, :, None]).sum(2, keepdim=True).mul_(inv.square()))
        # ema_gz += Σ ĝ·z / n with Σ dy·z = scale·Σ dy·x̃ and Σ z² = n·ψ²_B·scale² (after q is taken)
        ema.add_((gamma * sum_dy_xt * scale - damp * ema * n * psi2_batch * scale.square()) / n)
        # dx = s·(dx̃ − x̂·dot/(C/G)) = s·(p·dy − s·x·(q + dot/(C/G)))
        dx = torch.mul(x4, q[:, :, None], out=buf).addcmul_(x4, dot.mul_(1.0 / cg)).mul_(-inv)
        dx.addcmul_(dy, p[:, :, None]).mul_(inv)
        return dx, None, dweight, dbias, None, None, None, None


def power_norm_train(
    x4: Tensor,
    w4: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    psi2_running: Tensor | None,
    ema_gz: Tensor,
    eps: float,
    alpha_bkw: float,
) -> tuple[Tensor, Tensor]:
    """PowerNorm's training step on x viewed as (A, G, C/G, L): G GroupScaling groups, batch
    statistics over axes 0 and 3 (``NCHW`` → (N, G, C/G, H·W); ``NTC`` → (N·T, G, C/G, 1) with
    row weights ``w4`` (N·T, 1, 1, 1) from the mask). Returns (y, ψ²_B), ψ²_B per channel.

    Forward: x̃ = x / sqrt(mean over the group of x² + eps) (0 at padding); ψ²_B = mean over
    real positions of x̃²; z = x̃ / sqrt(ψ² + eps) with ψ² = ψ²_B when ``psi2_running`` is None
    (warm-up) and ``psi2_running`` otherwise; y = γ·z + β (0 at padding). Backward (approximate,
    not the derivative of the forward): ĝ = γ·dy − (1 − α_bkw)·ema_gz·z; ema_gz += mean over real
    positions of ĝ·z (in place, ĝ with the old ema_gz); dx̃ = ĝ / sqrt(ψ²_B + eps); then the exact
    backward of GroupScaling. No gradient reaches padding. One autograd node.
    """
    return _PowerNormFunction.apply(x4, w4, weight, bias, psi2_running, ema_gz, eps, alpha_bkw)
