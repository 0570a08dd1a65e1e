"""The maths of the norms, as pure functions of tensors.

Layouts: ``NCHW`` has channels on axis 1 (N,C,H,W; also N,C and N,C,L); ``NTC`` has them
last (N,T,C). ``mask`` is an (N,T) bool tensor, True on real tokens, used by norms whose
statistics would otherwise mix padding in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


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
    y = F.layer_norm(x.movedim(1, -1), x.shape[1:2], weight, bias, eps)
    return y.movedim(-1, 1)


def per_position_rms_norm(x: Tensor, layout: str, weight: Tensor | None, eps: float) -> Tensor:
    """RMSNorm over the channel axis at each position: x / sqrt(mean_C(x²) + eps)."""
    if layout == "NTC":
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    return F.rms_norm(x.movedim(1, -1), x.shape[1:2], weight, eps).movedim(-1, 1)


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


def masked_group_norm(x: Tensor, mask: Tensor, groups: int, eps: float) -> Tensor:
    """GroupNorm of an (N, T, C) input over real tokens: per sentence and group of C/groups
    channels, over its real tokens × the group's channels. ``groups=1`` is ``ln_sample`` (T×C),
    ``groups=C`` is ``in`` (over T). Biased variance, eps inside the square root, 0 at padding.
    """
    n, t, c = x.shape
    xg = x.reshape(n, t, groups, c // groups)
    w = mask.reshape(n, t, 1, 1).to(x.dtype)
    count = w.sum(1, keepdim=True).clamp_min(1) * (c // groups)  # (N, 1, 1, 1); all-padding rows give 0
    mean = (xg * w).sum((1, 3), keepdim=True) / count
    d = (xg - mean) * w
    var = d.square().sum((1, 3), keepdim=True) / count
    return (d * torch.rsqrt(var + eps)).reshape(x.shape)


def masked_channel_affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, mask: Tensor | None) -> Tensor:
    """y·γ + β for an NTC tensor whose padding positions stay 0."""
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias if mask is None else torch.addcmul(y, mask.unsqueeze(-1).to(y.dtype), bias)
    return y


def partial_rms_norm(x: Tensor, layout: str, weight: Tensor | None, k: int, eps: float) -> Tensor:
    """Partial RMSNorm: x / sqrt(mean(x[:k]²) + eps) over the channel axis at each position.

    The RMS is taken over the first ``k`` channels only (indices 0..k−1); the whole vector is
    divided by it. eps sits inside the square root, as in `per_position_rms_norm`.
    """
    if layout == "NTC":
        ms = x[..., :k].square().mean(-1, keepdim=True)
    else:
        ms = x[:, :k].square().mean(1, keepdim=True)
    return channel_affine(x * torch.rsqrt(ms + eps), weight, None, layout)


def group_scaling(x: Tensor, layout: str, groups: int, eps: float) -> Tensor:
    """PowerNorm's GroupScaling (Shen et al. 2020): at each position, divide each group of
    C/groups channels by sqrt(mean over the group of x² + eps)."""
    c = x.shape[channel_dim(layout)]
    if layout == "NTC":
        xg = x.reshape(*x.shape[:-1], groups, c // groups)
        return (xg * torch.rsqrt(xg.square().mean(-1, keepdim=True) + eps)).reshape(x.shape)
    xg = x.reshape(x.shape[0], groups, c // groups, *x.shape[2:])
    return (xg * torch.rsqrt(xg.square().mean(2, keepdim=True) + eps)).reshape(x.shape)
