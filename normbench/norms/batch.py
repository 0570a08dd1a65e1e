"""BatchNorm (Ioffe & Szegedy 2015).

Normalizes each channel over the batch: N×H×W positions for ``NCHW``, N×T tokens for ``NTC``.
Training: batch mean and biased batch variance, y = (x − μ_B) / sqrt(σ²_B + eps) · γ + β (eps
inside the square root); the running estimates are EMAs with ``momentum`` (running variance
updated with the unbiased batch variance, as torch does). Evaluation: running estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@dataclass
class BatchNormConfig(NormConfig):
    name: str = "bn"
    momentum: float = 0.1


@register_norm("bn", BatchNormConfig)
class BatchNorm(Norm):
    """BatchNorm over the batch axes; keeps ``running_mean`` / ``running_var`` buffers.

    With ``record_stats = True`` the last training batch's (μ_B, σ²_B) are kept in
    ``last_stats`` (detached), for diagnostics that compare them with the running estimates.
    """

    def __init__(self, num_features: int, *, momentum: float = 0.1, **kw) -> None:
        super().__init__(num_features, **kw)
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.record_stats = False
        self.last_stats: dict[str, Tensor] | None = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.training:
            self.num_batches_tracked.add_(1)
            if self.record_stats:
                mean, var = NF.batch_moments(x.detach(), self.layout)
                self.last_stats = {"mean": mean, "var": var}
        y = F.batch_norm(
            NF.to_channels_first(x, self.layout),
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training,
            self.momentum,
            self.eps,
        )
        return NF.from_channels_first(y, self.layout)
