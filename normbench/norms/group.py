"""Per-sample norms with statistics over groups of channels: GroupNorm, InstanceNorm and
LayerNorm over whole samples. Same computation in training and evaluation; no running
statistics. eps sits inside the square root: (x − μ) / sqrt(σ² + eps), σ² biased.

On sequences (NTC) with a mask, the statistics are taken over real tokens only and the
outputs at padding positions are 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from normbench.base.errors import require
from normbench.norms import functional as NF
from normbench.norms.base import Norm, check_groups
from normbench.norms.registry import NormConfig, register_norm


@dataclass
class GroupNormConfig(NormConfig):
    groups: int = 8
    """Must divide every normalized layer's channels (16/32/64 in ResNet20)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.groups > 0, "norm.groups", self.groups, "a positive integer (dividing every layer's channels)")


@register_norm("gn", GroupNormConfig)
class GroupNorm(Norm):
    """GroupNorm (Wu & He 2018): per sample, over C/G channels × all positions of each group."""

    NORMALIZES_OVER = {"NCHW": "C/G×H×W, per sample and group", "NTC": "C/G×T real tokens, per sentence and group"}

    def __init__(self, num_features: int, *, groups: int = 8, **kw) -> None:
        check_groups(groups, num_features)
        super().__init__(num_features, **kw)
        self.groups = groups

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if mask is not None:
            return NF.masked_group_norm(x, mask, self.groups, self.weight, self.bias, self.eps)
        return NF.group_norm(x, self.layout, self.groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, groups={self.groups}"


@register_norm("in")
class InstanceNorm(Norm):
    """InstanceNorm (Ulyanov et al. 2016): per sample and channel, over H×W (or over the real
    tokens of T)."""

    NORMALIZES_OVER = {"NCHW": "H×W, per sample and channel", "NTC": "T real tokens, per sentence and channel"}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if mask is not None:
            return NF.masked_group_norm(x, mask, self.num_features, self.weight, self.bias, self.eps)
        return NF.group_norm(x, self.layout, self.num_features, self.weight, self.bias, self.eps)


@register_norm("ln_sample")
class SampleLayerNorm(Norm):
    """LayerNorm over every non-batch axis of each sample (C×H×W, or T×C for sequences), as
    in Ba et al. 2016 for conv nets; equal to GroupNorm with one group. On sequences with a
    mask: over the T×C real positions of each sentence. γ, β per channel."""

    NORMALIZES_OVER = {"NCHW": "C×H×W, per sample", "NTC": "T×C real tokens, per sentence"}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if mask is not None:
            return NF.masked_group_norm(x, mask, 1, self.weight, self.bias, self.eps)
        if self.layout == "NTC":  # one fused pass over the contiguous T×C block of each sample
            y = F.layer_norm(x, x.shape[1:], None, None, self.eps)  # float32 under autocast
            return NF.channel_affine(y, self.weight, self.bias, self.layout).to(x.dtype)
        return NF.group_norm(x, self.layout, 1, self.weight, self.bias, self.eps)
