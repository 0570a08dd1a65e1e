"""``token_scale``: how large each real token comes out of a sequence norm, in the batch's long and
short sentences, and how much of the batch is padding (issue 27's padding preset: statistics taken
over padded positions count the zeros as tokens and rescale every real token).

One extra forward of the step's batch at θ_t, in train mode as the step (same RNG draws and norm
state: `DiagContext.closure`), no gradients, with forward hooks on every normbench norm. For a
norm's output y, the normalized value before its affine map is x̂ = (y − β) / γ (γ = 1, β = 0
where the norm has none), and a token's scale is its root mean square over the C channels,

    s_t = sqrt(mean_c x̂_tc²)

— exactly 1 − O(eps) for LN without affine and every token, 1 on average (over the tokens, in the
mean-square sense) for BN with masked statistics, and about sqrt(positions / real tokens) for BN
whose statistics count zero padding (its variance shrinks by the real tokens' share).

That absolute scale grows with the padding whatever the tokens hold, so two settings with
different real-token shares are not comparable on it (issue 56). The scale-free version measures
each channel in its own root mean square over the batch's real tokens,
x̃_tc = x̂_tc / sqrt(mean_{real t} x̂_tc²), and s̃_t = sqrt(mean_c x̃_tc²): under masked statistics
x̃ = x̂·sqrt((σ² + eps)/σ²) ≈ x̂ (the same numbers, up to eps), while counting padding no longer
inflates every token by 1/sqrt(real share); what remains is how a token stands against the batch's
other real tokens (e.g. the shift of the mean towards the padding). A batch with more padding but
the same real tokens, centred, has the same s̃ when padding is counted.

Logged per norm layer, over the real tokens (an (N, T) padding mask passed to the norm; all
positions when none is):

- ``<layer>/scale``: the mean of s̃_t over every real token (scale-free; before issue 56 this key
  held the absolute s_t's mean, now ``scale_abs``);
- ``<layer>/scale_long`` and ``<layer>/scale_short``: the same over the tokens of the batch's
  longer half and its shorter half of sentences (sentences sorted by real length, ties by
  position in the batch; the middle one is left out when N is odd);
- ``<layer>/scale_abs``, ``scale_long_abs``, ``scale_short_abs``: the same three of the absolute
  s_t (the identity above: BN counting zero padding puts real tokens above unit scale);
- ``first_layer/…`` the six of the first norm (the encoder's first, in normbench's Transformer),
  and ``padding_share``: the fraction of the (N, T) positions that are padding, from the first
  layer's mask.

In an image layout (``NCHW``) each pixel's C-vector is a token and there are no sentences: only
``scale`` (and ``padding_share`` 0).

Under data parallelism it reads the logging rank's shard of the batch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn

from normbench.diagnostics.layers import first_calls
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic


def normalized(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """x̂ = (y − β) / γ over the last (channel) axis; an absent γ or β counts as 1 or 0. In
    float32 at least (half-precision outputs are upcast), else in y's dtype."""
    y = y.detach()
    y = y.float() if y.dtype in (torch.float16, torch.bfloat16) else y
    if bias is not None:
        y = y - bias.detach().to(y.dtype)
    if weight is not None:
        y = y / weight.detach().to(y.dtype)
    return y


def token_scales(x_hat: Tensor) -> Tensor:
    """s = sqrt(mean over the last axis of x̂²): one scale per token, shape ``x_hat.shape[:-1]``."""
    return x_hat.pow(2).mean(-1).sqrt()


def halves(lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(indices of the shorter half, indices of the longer half) of the sentences with these real
    lengths: sorted by length, ties by position; the middle sentence is in neither when N is odd."""
    order = torch.sort(lengths, stable=True).indices
    half = lengths.numel() // 2
    return order[:half], order[lengths.numel() - half :]


def channel_relative(x_hat: Tensor, real: Tensor) -> Tensor:
    """x̃ = x̂ / sqrt(mean over the real tokens of x̂²), per channel (last axis) of an (N, T, C)
    output with its (N, T) boolean mask of real tokens; a channel that is 0 at every real token
    stays 0."""
    rms = x_hat[real].pow(2).mean(0).sqrt()
    return x_hat / torch.where(rms > 0, rms, torch.ones_like(rms))


def scale_by_length(x_hat: Tensor, mask: Tensor | None, sentences: bool = True) -> dict[str, float]:
    """``scale``, ``scale_long``, ``scale_short`` (scale-free, `channel_relative`) and the same with
    ``_abs`` (see the module) of an (N, T, C) normalized output with its (N, T) mask (True = real
    token; None = every position real). The long and short halves are left out for a batch of one
    sentence, and when not ``sentences`` (images)."""
    real = torch.ones(x_hat.shape[:-1], dtype=torch.bool, device=x_hat.device) if mask is None else mask.bool()
    out = {}
    for suffix, s in (("", token_scales(channel_relative(x_hat, real))), ("_abs", token_scales(x_hat))):  # (N, T)
        out[f"scale{suffix}"] = float(s[real].mean())
        if sentences and s.shape[0] > 1:
            short, long = halves(real.sum(1))
            out[f"scale_short{suffix}"] = float(s[short][real[short]].mean())
            out[f"scale_long{suffix}"] = float(s[long][real[long]].mean())
    return out


def padding_share(mask: Tensor | None) -> float:
    """The fraction of positions of an (N, T) mask that are padding (False); 0 without a mask."""
    return 0.0 if mask is None else float(1.0 - mask.bool().double().mean())


def channels_last(y: Tensor, layout: str) -> Tensor:
    """(N, positions, C) from an ``NTC`` sequence or an ``NCHW`` (or ``NC…``) image batch."""
    if layout == "NTC":
        return y
    return y.flatten(2).transpose(1, 2) if y.dim() > 2 else y.unsqueeze(1)


def norm_outputs_with_masks(model: nn.Module) -> AbstractContextManager[dict[str, tuple[Tensor, Tensor | None, bool]]]:
    """While inside: each norm's (normalized output x̂ as (N, positions, C), mask, is a sequence)
    of its first call, by layer name; the forward hooks are removed on leaving."""

    def capture(mod: nn.Module, x: Tensor, mask: Tensor | None, output: Tensor) -> tuple[Tensor, Tensor | None, bool]:
        layout = getattr(mod, "layout", "NCHW")
        y = channels_last(output.detach(), layout)
        x_hat = normalized(y, getattr(mod, "weight", None), getattr(mod, "bias", None))
        seq = layout == "NTC"
        return x_hat, mask.detach() if seq and mask is not None else None, seq

    return first_calls(model, capture)


@register_diagnostic("token_scale", CadenceConfig)
class TokenScaleHook(DiagnosticHook):
    def __call__(self, ctx: DiagContext) -> dict[str, Any]:
        with norm_outputs_with_masks(ctx.model) as seen, torch.no_grad():
            ctx.closure()()
        out: dict[str, Any] = {}
        for i, (name, (x_hat, mask, seq)) in enumerate(seen.items()):
            values = scale_by_length(x_hat, mask, seq)
            out.update({f"{name}/{k}": v for k, v in values.items()})
            if i == 0:
                out.update({f"first_layer/{k}": v for k, v in values.items()})
                out["padding_share"] = padding_share(mask)
        return out
