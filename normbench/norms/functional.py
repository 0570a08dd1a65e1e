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
