"""Per-position norms over the channel axis: LayerNorm (Ba et al. 2016) as Transformers use
it, and RMSNorm (Zhang & Sennrich 2019). Same computation in training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@dataclass
class LayerNormConfig(NormConfig):
    name: str = "ln"


@register_norm("ln", LayerNormConfig)
class LayerNorm(Norm):
    """LayerNorm over C at each position (each pixel, each token):
    (x − mean_C x) / sqrt(var_C x + eps) · γ + β, var biased, eps inside the square root."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return NF.per_position_layer_norm(x, self.layout, self.weight, self.bias, self.eps)


@dataclass
class RMSNormConfig(NormConfig):
    name: str = "rms"
    eps: float = 1e-6


@register_norm("rms", RMSNormConfig)
class RMSNorm(Norm):
    """RMSNorm over C at each position: x / sqrt(mean_C(x²) + eps) · γ, no re-centring and no β.

    eps is inside the square root (the convention of ``torch.nn.functional.rms_norm``)."""

    def __init__(self, num_features: int, **kw) -> None:
        super().__init__(num_features, bias=False, **kw)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return NF.per_position_rms_norm(x, self.layout, self.weight, self.eps)
