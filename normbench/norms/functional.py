"""The maths of the per-position and per-sample norms, as pure functions of tensors.

Layouts: ``NCHW`` has channels on axis 1 (N,C,H,W; also N,C and N,C,L); ``NTC`` has them
last (N,T,C). ``mask`` is an (N,T) bool tensor, True on real tokens, used by norms whose
statistics would otherwise mix padding in. One implementation per norm, in torch ops: torch's
fused kernels where the maths is theirs (``F.layer_norm``, ``F.rms_norm``, ``F.group_norm``),
plain reductions elsewhere, which ``torch.compile`` fuses. Everything here is twice
differentiable (Hessian-vector products) and free of host-device synchronization.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

HALF = (torch.bfloat16, torch.float16)


def channel_dim(layout: str) -> int:
    return 1 if layout == "NCHW" else -1


def channel_shape(x: Tensor, layout: str) -> list[int]:
    """The shape that broadcasts a per-channel (C,) vector against ``x``."""
    shape = [1] * x.dim()
    shape[channel_dim(layout)] = -1
    return shape


def batch_dims(x: Tensor, layout: str) -> tuple[int, ...]:
    """Every axis of ``x`` but the channel axis: BatchNorm's reduction axes."""
    c = channel_dim(layout) % x.dim()
    return tuple(d for d in range(x.dim()) if d != c)


def to_channels_first(x: Tensor, layout: str) -> Tensor:
    """View ``x`` as (N, C, *) whatever its layout (N,T,C → N,C,T)."""
    return x if layout == "NCHW" else x.transpose(1, 2)


def from_channels_first(y: Tensor, layout: str) -> Tensor:
    return y if layout == "NCHW" else y.transpose(1, 2)


def upcast(x: Tensor) -> Tensor:
    """bf16/fp16 activations (autocast) → float32 for statistics computed with plain ops."""
    return x.float() if x.dtype in HALF else x


def channel_affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, layout: str) -> Tensor:
    """y·γ + β with one (γ, β) per channel."""
    shape = channel_shape(y, layout)
    if weight is not None and bias is not None:
        return torch.addcmul(bias.view(shape), y, weight.view(shape))  # one pass
    if weight is not None:
        return y * weight.view(shape)
    return y if bias is None else y + bias.view(shape)


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


def token_weights(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """The (N, T, 1) 0/1 weights of an (N, T) mask (None: every position is real)."""
    return None if mask is None else mask.unsqueeze(-1).to(dtype)


def apply_mask(y: Tensor, w: Tensor | None) -> Tensor:
    """0 at padding positions (and no gradient through them)."""
    return y if w is None else y * w


# ---------------------------------------------------------------------------------------------
# Per-position norms over the channel axis.


def _channels_last(x: Tensor, layout: str) -> Tensor:
    """(…, C) with C last: a view for NTC, for channels_last images and for (N, C)."""
    return x if layout == "NTC" else x.movedim(1, -1)


def _channels_back(y: Tensor, layout: str) -> Tensor:
    return y if layout == "NTC" else y.movedim(-1, 1)


def per_position_layer_norm(x: Tensor, layout: str, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """LayerNorm over the channel axis at each position: (x − mean_C) / sqrt(var_C + eps)·γ + β
    (``F.layer_norm``; var biased, eps inside the square root)."""
    xc = _channels_last(x, layout)
    return _channels_back(F.layer_norm(xc, xc.shape[-1:], weight, bias, eps), layout)


def per_position_rms_norm(x: Tensor, layout: str, weight: Tensor | None, eps: float) -> Tensor:
    """RMSNorm over the channel axis at each position: x / sqrt(mean_C(x²) + eps) · γ
    (``F.rms_norm``: torch's fused kernel where it has one; eps inside the square root)."""
    xc = _channels_last(x, layout)
    if weight is not None and x.dtype in HALF:  # bf16 activations: the fused kernel wants one dtype
        weight = weight.to(x.dtype)  # (it accumulates in float32 all the same)
    return _channels_back(F.rms_norm(xc, xc.shape[-1:], weight, eps), layout)


def partial_rms_norm(x: Tensor, layout: str, weight: Tensor | None, k: int, eps: float) -> Tensor:
    """Partial RMSNorm: x / sqrt(mean(x[:k]²) + eps) · γ over the channel axis at each position.

    The RMS is taken over the first ``k`` channels only (indices 0..k−1); the whole vector is
    divided by it. eps sits inside the square root, as in `per_position_rms_norm`; k = C is
    RMSNorm. bf16/fp16 inputs: the mean of squares accumulates in float32; the output is in the
    input's dtype (a float32 γ would otherwise promote it), as ``rms`` returns it.
    """
    cdim = channel_dim(layout)
    head = upcast(x.narrow(cdim, 0, k))
    inv = torch.rsqrt(head.square().mean(cdim, keepdim=True) + eps).to(x.dtype)
    return channel_affine(x * inv, weight, None, layout).to(x.dtype)


def group_scaling(x: Tensor, layout: str, groups: int, eps: float) -> Tensor:
    """PowerNorm's GroupScaling (Shen et al. 2020): at each position, divide each group of
    C/groups channels by sqrt(mean over the group of x² + eps) — RMSNorm per group, no γ
    (``F.rms_norm`` over the group axis). bf16/fp16 inputs (autocast) are computed, and returned,
    in float32, so that PowerNorm's ψ² stays float32 too."""
    x = upcast(x)
    xc = _channels_last(x, layout)
    xg = xc.unflatten(-1, (groups, xc.shape[-1] // groups))
    return _channels_back(F.rms_norm(xg, xg.shape[-1:], None, eps).flatten(-2), layout)


# ---------------------------------------------------------------------------------------------
# Per-sample norms: statistics per sample over groups of channels.


def group_norm(x: Tensor, layout: str, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """GroupNorm: per sample, over each group of C/groups channels and all positions
    (``F.group_norm``; var biased, eps inside the square root)."""
    y = F.group_norm(to_channels_first(x, layout), groups, weight, bias, eps)
    return from_channels_first(y, layout)


def masked_group_norm(
    x: Tensor, mask: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """GroupNorm of an (N, T, C) input over real tokens: per sentence and group of C/groups
    channels, over its real tokens × the group's channels. ``groups=1`` is ``ln_sample`` (T×C),
    ``groups=C`` is ``in`` (over T). Two-pass statistics (the mean, then the centred squares),
    biased variance, eps inside the square root, then γ·x̂ + β per channel; 0 at padding and no
    gradient through padding; an all-padding sentence gives 0, not NaN. Half-precision inputs
    are computed in float32 and returned in their dtype."""
    xf = upcast(x)
    n, t, c = xf.shape
    xg = xf.view(n, t, groups, c // groups)
    w = mask.view(n, t, 1, 1).to(xf.dtype)
    count = (w.sum(1, keepdim=True) * (c // groups)).clamp_min(1)  # (N, 1, 1, 1)
    mean = (xg * w).sum((1, 3), keepdim=True) / count  # (N, 1, G, 1)
    centred = xg - mean
    var = (centred.square() * w).sum((1, 3), keepdim=True) / count
    y = (centred * torch.rsqrt(var + eps)).view(n, t, c)
    y = channel_affine(y, weight, bias, "NTC") * mask.unsqueeze(-1).to(xf.dtype)
    return y.to(x.dtype)
