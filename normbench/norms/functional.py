"""The maths of the norms, as pure functions of tensors.

Layouts: ``NCHW`` has channels on axis 1 (N,C,H,W; also N,C and N,C,L); ``NTC`` has them
last (N,T,C). ``mask`` is an (N,T) bool tensor, True on real tokens, used by norms whose
statistics would otherwise mix padding in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.norms import kernels as K


def channel_dim(layout: str) -> int:
    return 1 if layout == "NCHW" else -1


def to_channels_first(x: Tensor, layout: str) -> Tensor:
    """View ``x`` as (N, C, *) whatever its layout (N,T,C → N,C,T)."""
    return x if layout == "NCHW" else x.transpose(1, 2)


def from_channels_first(y: Tensor, layout: str) -> Tensor:
    return y if layout == "NCHW" else y.transpose(1, 2)


def channel_affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, layout: str) -> Tensor:
    """y·γ + β with one (γ, β) per channel."""
    if weight is None and bias is None:
        return y
    shape = [1] * y.dim()
    shape[channel_dim(layout)] = -1
    if weight is not None:
        y = y * weight.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    return y


def per_position_layer_norm(x: Tensor, layout: str, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """LayerNorm over the channel axis at each position: (x − mean_C) / sqrt(var_C + eps)."""
    if layout == "NTC":
        return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    if x.dim() > 2 and K.usable(x, weight, bias):  # NCHW without moving C last (two copies)
        return _ChannelLayerNormFunction.apply(as_acl(x, layout).contiguous(), weight, bias, eps).reshape(x.shape)
    y = F.layer_norm(x.movedim(1, -1), x.shape[1:2], weight, bias, eps)
    return y.movedim(-1, 1)


class _ChannelLayerNormFunction(torch.autograd.Function):
    """LayerNorm over axis 1 of an (N, C, L) tensor at each (n, l), with the CPU kernels (the
    tensor is N segments of C rows: sums over rows are sums over channels).

    Forward: μ, σ² over C (biased, two reads), y = (x − μ)/sqrt(σ² + eps)·γ + β in one pass.
    Backward, g = γ·dy, x̂ = (x − μ)·s, s = 1/sqrt(σ² + eps): dx = s·(g − mean_C g − x̂·mean_C g·x̂),
    dγ = Σ_{n,l} dy·x̂, dβ = Σ_{n,l} dy.
    """

    @staticmethod
    def forward(ctx, x3, weight, bias, eps):  # type: ignore[override]
        n, c, _ = x3.shape
        mean = K.seg_sums(x3, None) / c  # (N, L)
        inv = (K.seg_sums(x3, None, mean) / c).add_(eps).rsqrt_()
        gw = None if weight is None else weight.detach().expand(n, c)
        bv = None if bias is None else bias.detach().expand(n, c)
        y = K.seg_affine(x3, inv, -mean * inv, gw, bv)
        ctx.save_for_backward(x3, mean, inv, weight)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        K.single_backward_only()
        x3, mean, inv, weight = ctx.saved_tensors
        n, c, _ = x3.shape
        dy = dy.contiguous()
        gw = None if weight is None else weight.detach().expand(n, c)
        sum_g, sum_g_xc = K.seg_dot(dy, x3, gw, mean)  # Σ_C g, Σ_C g·(x − μ), (N, L)
        q = -inv * inv * sum_g_xc * inv / c  # coefficient of x: −s·mean_C(g·x̂)·s
        r = -inv * sum_g / c - mean * q
        dx = K.seg_grad(dy, x3, inv, q, r, None, gw)
        dweight = None
        if weight is not None and ctx.needs_input_grad[1]:
            dweight = K.seg_row_dot(dy, x3, inv, -mean * inv).sum(0)
        dbias = dy.sum((0, 2)) if ctx.needs_input_grad[2] else None
        return dx, dweight, dbias, None


def per_position_rms_norm(x: Tensor, layout: str, weight: Tensor | None, eps: float) -> Tensor:
    """RMSNorm over the channel axis at each position: x / sqrt(mean_C(x²) + eps) · γ."""
    c = x.shape[channel_dim(layout)]
    return channel_rms_norm(as_acl(x, layout), weight, c, eps).reshape(x.shape)


def group_norm(x: Tensor, layout: str, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """GroupNorm: per sample, over each group of C/groups channels and all positions."""
    y = F.group_norm(to_channels_first(x, layout), groups, weight, bias, eps)
    return from_channels_first(y, layout)


def batch_moments(x: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """Per-channel mean and biased variance over every axis but the channel axis."""
    xc = to_channels_first(x, layout)
    dims = [0, *range(2, xc.dim())]
    var, mean = torch.var_mean(xc, dim=dims, correction=0)
    return mean, var


# ---------------------------------------------------------------------------------------------
# Masks. A mask is (N, T) bool, True on real tokens, and goes with the NTC layout only.


def check_mask(x: Tensor, layout: str, mask: Tensor | None) -> None:
    """Raise ``ValueError`` unless ``mask`` is None or an (N, T) bool tensor for an NTC input."""
    if mask is None:
        return
    if layout != "NTC":
        raise ValueError(f"mask given for layout {layout!r}; masks go with layout 'NTC' (N, T, C) only")
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"mask must be a bool tensor of shape {tuple(x.shape[:2])}, got {mask.dtype} {tuple(mask.shape)}"
        )


def as_acl(x: Tensor, layout: str) -> Tensor:
    """View ``x`` as (A, C, L) so that batch statistics are sums over axes 0 and 2.

    ``NCHW`` → (N, C, H·W); ``NTC`` → (N·T, C, 1). A view when ``x`` is contiguous.
    """
    if layout == "NCHW":
        return x.reshape(x.shape[0], x.shape[1], -1)
    return x.reshape(-1, x.shape[-1], 1)


def acl_weights(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """The (N·T, 1, 1) 0/1 weights of `as_acl`'s rows for an (N, T) mask."""
    return None if mask is None else mask.reshape(-1, 1, 1).to(dtype)


def partial_rms_norm(x: Tensor, layout: str, weight: Tensor | None, k: int, eps: float) -> Tensor:
    """Partial RMSNorm: x / sqrt(mean(x[:k]²) + eps) over the channel axis at each position.

    The RMS is taken over the first ``k`` channels only (indices 0..k−1); the whole vector is
    divided by it. eps sits inside the square root, as in `per_position_rms_norm`.
    """
    return channel_rms_norm(as_acl(x, layout), weight, k, eps).reshape(x.shape)


def group_scaling(x: Tensor, layout: str, groups: int, eps: float) -> Tensor:
    """PowerNorm's GroupScaling (Shen et al. 2020): at each position, divide each group of
    C/groups channels by sqrt(mean over the group of x² + eps). bf16/fp16 inputs (autocast)
    are computed, and returned, in float32, so that PowerNorm's ψ² stays float32 too."""
    x = x if x.dtype in (torch.float32, torch.float64) else x.float()
    c = x.shape[channel_dim(layout)]
    x3 = as_acl(x, layout)  # (A, C, L)
    xg = x3.reshape(x3.shape[0] * groups, c // groups, x3.shape[2])  # each group its own row
    return channel_rms_norm(xg, None, c // groups, eps).reshape(x.shape)


def exact_precision(method: Callable) -> Callable:
    """For an autograd Function's forward/backward: run with autocast off, so that its matrix
    products (masked sums) keep the dtype of the tensors given (autocast would run them in half
    precision)."""

    @functools.wraps(method)
    def run(ctx, first: Tensor, *args):
        with torch.autocast(first.device.type, enabled=False):
            return method(ctx, first, *args)

    return run


class _ChannelRMSFunction(torch.autograd.Function):
    """y = x·s·γ with s = 1 / sqrt(mean_{c<k} x_c² + eps) per (a, l) of an (A, C, L) tensor.

    Backward, with x̂ = x·s and g = dy·γ: dx = s·(g − [c < k]·x̂·Σ_c g·x̂ / k), dγ = Σ_{a,l} dy·x̂.
    One full-size tensor is allocated each way (on a busy CPU fresh allocations cost more than
    passes over memory), so x̂ is recomputed rather than kept.
    """

    @staticmethod
    @exact_precision
    def forward(ctx, x3, weight, k, eps):  # type: ignore[override]
        ctx.k = k
        ctx.kernels = x3.shape[2] == 1 and K.usable(x3, weight)
        if ctx.kernels:  # rows: one read for the RMS, one read + one write for y
            x2 = x3.reshape(x3.shape[0], x3.shape[1]).contiguous()
            y, inv = K.row_rms_forward(x2, weight, k, eps)
            ctx.save_for_backward(x2, inv, weight)
            return y.view(x3.shape)
        xk = x3 if k == x3.shape[1] else x3[:, :k]
        if x3.shape[2] == 1:  # rows: a reduction over the contiguous axis
            inv = torch.linalg.vector_norm(xk, dim=1, keepdim=True).square_().div_(k).add_(eps).rsqrt_()
            y = x3 * inv
        else:  # vector_norm over a strided axis is slow on the CPU: square into the output first
            y = torch.empty_like(x3)
            inv = torch.mul(xk, xk, out=y[:, :k]).sum(1, keepdim=True).div_(k).add_(eps).rsqrt_()  # (A, 1, L)
            torch.mul(x3, inv, out=y)
        if weight is not None:
            y.mul_(weight[:, None])
        ctx.save_for_backward(x3, inv, weight)
        ctx.k = k
        return y

    @staticmethod
    @exact_precision
    def backward(ctx, dy):  # type: ignore[override]
        x3, inv, weight = ctx.saved_tensors
        k = ctx.k
        if ctx.kernels:
            K.single_backward_only()
            dx, dweight = K.row_rms_backward(dy.reshape(x3.shape), x3, inv, weight, k)
            return dx.view(dy.shape), (dweight if ctx.needs_input_grad[1] else None), None, None
        buf = torch.mul(dy, x3)  # dy·x = dy·x̂/s
        a, c, length = x3.shape
        gamma = None if weight is None else weight.to(buf.dtype)
        need_dweight = weight is not None and ctx.needs_input_grad[1]
        dweight = None
        if length == 1:  # rows: Σ over rows and over channels as matrix-vector products
            rows = buf.view(a, c)
            if need_dweight:
                dweight = (inv.view(1, a) @ rows).view(-1)
            sum_gx = (rows.sum(1) if gamma is None else rows @ gamma).view(a, 1, 1)  # Σ_c γ·dy·x
            coef = sum_gx.mul_(inv.pow(3)).mul_(-1.0 / k)  # −s²·Σ_c g·x̂ / k, (A, 1, L)
        else:
            buf.mul_(inv)  # dy·x̂
            if need_dweight:
                dweight = buf.sum((0, 2))
            if gamma is not None:
                buf.mul_(gamma[:, None])
            coef = buf.sum(1, keepdim=True).mul_(inv.square()).mul_(-1.0 / k)
        dx = buf.copy_(dy) if weight is None else torch.mul(dy, weight[:, None], out=buf)
        dx.mul_(inv)
        if k == c:
            dx.addcmul_(x3, coef)
        else:
            dx[:, :k].addcmul_(x3[:, :k], coef)
        return dx, dweight, None, None


def channel_rms_norm(x3: Tensor, weight: Tensor | None, k: int, eps: float) -> Tensor:
    """RMS normalization over axis 1 of an (A, C, L) tensor (see `as_acl`):
    x / sqrt(mean_{c<k} x_c² + eps) · γ at each (a, l), the mean over the first ``k`` channels
    (k = C: RMSNorm; k < C: partial RMSNorm; no γ: GroupScaling with one group per row). eps
    inside the square root. One autograd node with a closed-form backward."""
    return _ChannelRMSFunction.apply(x3, weight, k, eps)


def _per_channel(v: Tensor, c: int) -> Tensor:
    """(N, 1, G, 1) group statistics → (N, 1, C), each group's value on its C/G channels."""
    n, _, groups, _ = v.shape
    return v.expand(n, 1, groups, c // groups).reshape(n, 1, c)


class _MaskedGroupNormFunction(torch.autograd.Function):
    """Masked GroupNorm of an (N, T, C) tensor with 0/1 token weights w (N, T, 1), G groups.

    Forward: μ, σ² per (sentence, group) over real tokens × the group's channels (two passes:
    the mean, then the centred squares), d = (x − μ)·w, x̂ = d/sqrt(σ² + eps), y = γ·x̂ + β·w.
    Backward (m = real count per group, sums over the group's real positions, g = γ·dy):
    dx = w/σ̃·(g − Σg/m − x̂·Σ(g·x̂)/m), σ̃ = sqrt(σ² + eps); dγ = Σ dy·x̂; dβ = Σ dy·w.
    Full-size work is done on (N, T, C) with per-channel (N, 1, C) coefficients (vectorises
    also for G = C), masked sums are batched vector-matrix products, and one full-size tensor is
    allocated each way.
    """

    @staticmethod
    @exact_precision
    def forward(ctx, x, w, weight, bias, groups, eps):  # type: ignore[override]
        n, t, c = x.shape
        w3 = w.view(n, 1, t)
        count = w3.sum(2).clamp_min(1).mul_(c // groups).view(n, 1, 1, 1)  # all-padding sentences: no 0/0
        ctx.kernels = K.usable(x, w, weight, bias)
        if ctx.kernels:  # the same sums in single passes (normbench.norms.kernels)
            sums = K.seg_sums(x, w.view(n, t)).view(n, 1, c)
        else:
            sums = torch.bmm(w3, x)  # Σ_t w·x per sentence and channel, (N, 1, C)
        mean = _per_channel(sums.view(n, 1, groups, -1).sum(3, keepdim=True) / count, c)  # (N, 1, C)
        if ctx.kernels:
            sq = K.seg_sums(x, w.view(n, t), mean).view(n, 1, c)
        else:
            y = torch.sub(x, mean).square_()
            sq = torch.bmm(w3, y)
        var = sq.view(n, 1, groups, -1).sum(3, keepdim=True) / count  # Σ_t w·(x − μ)², per group
        inv = _per_channel(var.add_(eps).rsqrt_(), c)  # (N, 1, C)
        scale = inv if weight is None else inv * weight
        shift = -mean * scale if bias is None else torch.addcmul(bias, mean, scale, value=-1)
        if ctx.kernels:
            y = K.seg_affine(x, scale, shift, w.view(n, t))
        else:
            torch.addcmul(shift, x, scale, out=y).mul_(w)  # ((x − μ)·scale + β)·w in two passes
        ctx.save_for_backward(x, w, mean, inv, weight, count)
        ctx.groups = groups
        return y

    @staticmethod
    @exact_precision
    def backward(ctx, dy):  # type: ignore[override]
        x, w, mean, inv, weight, count = ctx.saved_tensors
        n, t, c = x.shape
        groups = ctx.groups
        dy = dy.contiguous()
        if ctx.kernels:
            K.single_backward_only()
            sum_dy, sum_dy_xc = K.seg_dot(dy, x, w.view(n, t), mean)
            sum_dy, sum_dy_xhat = sum_dy.view(n, 1, c), sum_dy_xc.view(n, 1, c).mul_(inv)
        else:
            sum_dy = torch.bmm(w.view(n, 1, t), dy)  # Σ_t w·dy, (N, 1, C)
            buf = torch.sub(x, mean).mul_(dy)
            sum_dy_xhat = torch.bmm(w.view(n, 1, t), buf).mul_(inv)  # Σ_t w·dy·x̂, (N, 1, C)
        gamma = torch.ones(c, dtype=x.dtype, device=x.device) if weight is None else weight

        def group_mean(v: Tensor) -> Tensor:
            return _per_channel(v.view(n, 1, groups, -1).sum(3, keepdim=True) / count, c)

        mean_g = group_mean(sum_dy * gamma)  # Σ g / m
        mean_gx = group_mean(sum_dy_xhat * gamma)  # Σ g·x̂ / m
        # dx = w·(x·k + (−σ̃⁻¹·Σg/m − μ·k) + σ̃⁻¹·γ·dy), k = −σ̃⁻²·Σg·x̂/m
        coef_x = -inv * inv * mean_gx
        if ctx.kernels:
            dx = K.seg_grad(dy, x, inv * gamma, coef_x, -inv * mean_g - mean * coef_x, w.view(n, t))
        else:
            dx = torch.addcmul(-inv * mean_g - mean * coef_x, x, coef_x, out=buf)
            dx.addcmul_(dy, inv * gamma).mul_(w)
        dweight = sum_dy_xhat.sum((0, 1)) if weight is not None and ctx.needs_input_grad[2] else None
        dbias = sum_dy.sum((0, 1)) if ctx.needs_input_grad[3] else None
        return dx, None, dweight, dbias, None, None


def masked_group_norm(
    x: Tensor, mask: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """GroupNorm of an (N, T, C) input over real tokens: per sentence and group of C/groups
    channels, over its real tokens × the group's channels. ``groups=1`` is ``ln_sample`` (T×C),
    ``groups=C`` is ``in`` (over T). Biased variance, eps inside the square root, then γ·x̂ + β
    per channel; 0 at padding and no gradient through padding. One autograd node with a
    closed-form backward; half-precision inputs are computed in float32."""
    xf = x if x.dtype in (torch.float32, torch.float64) else x.float()  # bf16/fp16: compute in fp32
    w = mask.unsqueeze(-1).to(xf.dtype)  # (N, T, 1)
    return _MaskedGroupNormFunction.apply(xf.contiguous(), w, weight, bias, groups, eps).to(x.dtype)
