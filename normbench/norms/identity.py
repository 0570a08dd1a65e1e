"""``none``: no normalization (the "standard" network of Santurkar et al. 2018)."""

from __future__ import annotations

from torch import Tensor

from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@register_norm("none", NormConfig)
class NoNorm(Norm):
    """Identity; holds no parameters whatever ``affine`` says."""

    NORMALIZES_OVER = {"NCHW": "nothing", "NTC": "nothing"}

    def __init__(self, num_features: int, **kw) -> None:
        kw["affine"] = False
        super().__init__(num_features, **kw)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        return x
