"""Per-position norms over the channel axis: LayerNorm (Ba et al. 2016) as Transformers use
it, RMSNorm and partial RMSNorm (Zhang & Sennrich 2019). Same computation in training and
evaluation. They never mix positions, so padding cannot reach real tokens and the mask is
ignored (outputs at padding positions are the norm of whatever the padding holds)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from normbench.base.errors import ConfigError, require_in
from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@register_norm("ln")
class LayerNorm(Norm):
    """LayerNorm over C at each position (each pixel, each token):
    (x − mean_C x) / sqrt(var_C x + eps) · γ + β, var biased, eps inside the square root."""

    NORMALIZES_OVER = {"NCHW": "C, per pixel", "NTC": "C, per token"}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        return NF.per_position_layer_norm(x, self.layout, self.weight, self.bias, self.eps)


@dataclass
class RMSNormConfig(NormConfig):
    eps: float = 1e-6


@register_norm("rms", RMSNormConfig)
class RMSNorm(Norm):
    """RMSNorm over C at each position: x / sqrt(mean_C(x²) + eps) · γ, no re-centring and no β.

    eps is inside the square root (the convention of ``torch.nn.functional.rms_norm``)."""

    NORMALIZES_OVER = {"NCHW": "C (RMS, no centring), per pixel", "NTC": "C (RMS, no centring), per token"}

    def __init__(self, num_features: int, **kw) -> None:
        super().__init__(num_features, bias=False, **kw)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        return NF.per_position_rms_norm(x, self.layout, self.weight, self.eps)


@dataclass
class PartialRMSNormConfig(NormConfig):
    eps: float = 1e-6
    p: float = 0.0625

    def __post_init__(self) -> None:
        super().__post_init__()
        require_in("norm.p", self.p, "(0, 1]")  # the fraction of channels whose RMS divides


@register_norm("prms", PartialRMSNormConfig)
class PartialRMSNorm(Norm):
    """Partial RMSNorm (Zhang & Sennrich 2019, pRMSNorm): at each position, the RMS over the
    first k = ⌈p·C⌉ channels (indices 0..k−1, at least one) divides the whole vector:
    x / sqrt(mean_{c<k}(x_c²) + eps) · γ, no β. eps is inside the square root (as ``rms``; the
    authors' code adds eps to the RMS instead), so ``p = 1`` is exactly ``rms``.
    """

    NORMALIZES_OVER = {"NCHW": "first ⌈p·C⌉ of C (RMS), per pixel", "NTC": "first ⌈p·C⌉ of C (RMS), per token"}

    def __init__(self, num_features: int, *, p: float = 0.0625, **kw) -> None:
        if not 0 < p <= 1:
            raise ConfigError(f"norm.p={p} must be in (0, 1]")
        super().__init__(num_features, bias=False, **kw)
        self.p = p
        self.k = max(1, math.ceil(p * num_features))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        return NF.partial_rms_norm(x, self.layout, self.weight, self.k, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, p={self.p}, k={self.k}"
