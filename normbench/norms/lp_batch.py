"""ℓp BatchNorm (Santurkar et al. 2018, "How Does Batch Normalization Help Optimization?", §3.3
and its appendix): BatchNorm's centring, then division by the batch's ℓp norm of the activations
as they were *before* the mean was shifted, for p = 1, 2 and ∞ (``bn_l1``, ``bn_l2``, ``bn_linf``).

The paper's words (§3.3): schemes "that fix the first order moment of the activations, as
BatchNorm does, and then normalize them by the average of their ℓp-norm (before shifting the
mean)". We read "(before shifting the mean)" as saying whose ℓp norm: the activations' before the
mean is subtracted, so the divisor is uncentred, and "the average of their ℓp-norm" per channel,
over the batch, as BatchNorm's σ is: the power mean s_p = (mean_B |x|^p)^(1/p), and s_∞ = max_B |x|.
Then y = (x − μ_B) / (s_p + eps); ``bn_l2`` divides by the root mean square sqrt(σ²_B + μ²_B), not
by σ_B. Until issue 43 this module divided by the *centred* deviation (mean_B |x − μ_B|^p)^(1/p)
(``bn_l2`` then BatchNorm with eps outside the root); ``centred: true`` keeps that reading for
comparison. Another reading — one ℓp norm per sample over the layer's units, averaged over the
batch, a scalar per layer — is not what this module computes (the paper's PDF could not be reached
from this machine; the quoted sentence is the module's earlier quotation of it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.base.errors import require_in
from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


def lp_batch_stats(
    x: Tensor, layout: str, p: float, mask: Tensor | None = None, centred: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """(μ_B, s_p, n) per channel over the batch axes of ``x`` (N×H×W, or the N×T real tokens of
    a masked NTC input): μ_B the mean, s_p = (mean |x|^p)^(1/p) (p = ∞: the largest |x|; with
    ``centred``: of x − μ_B instead of x), n the number of real positions (a 0-dim tensor). No eps
    here; an all-padding batch gives μ_B = s_p = 0. Differentiable (at a tie of the ∞ norm,
    autograd's amax splits the gradient evenly between the tied positions)."""
    dims = NF.batch_dims(x, layout)
    w = NF.token_weights(mask, x.dtype)
    if w is None:
        count = x.new_tensor(float(x.numel() // x.shape[NF.channel_dim(layout)]))
        mean = x.mean(dims)
    else:
        count = w.sum()
        mean = (x * w).sum(dims) / count.clamp_min(1)
    shape = NF.channel_shape(x, layout)
    dev = (x - mean.view(shape) if centred else x).abs()
    if w is not None:
        dev = dev * w  # padding counts as 0: it adds nothing to a sum, nor to a max of |·| ≥ 0
    if math.isinf(p):
        s = dev.amax(dims)
    elif p == 1:
        s = dev.sum(dims) / count.clamp_min(1)
    else:
        s = (dev.pow(p).sum(dims) / count.clamp_min(1)).pow(1 / p)
    return mean, s, count


def lp_batch_norm(
    x: Tensor, layout: str, mean: Tensor, s: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """y = (x − μ) / (s + eps) · γ + β per channel; eps outside the ℓp norm (for every p)."""
    shape = NF.channel_shape(x, layout)
    z = (x - mean.view(shape)) / (s + eps).view(shape)
    return NF.channel_affine(z, weight, bias, layout)


def _over(p: str) -> dict[str, str]:
    """What an ℓp BatchNorm normalizes over, per layout (``NORMALIZES_OVER``)."""
    what = f"{p} norm of the uncentred activations"
    return {"NCHW": f"N×H×W, per channel ({what})", "NTC": f"N×T real tokens, per channel ({what})"}


@dataclass
class LpBatchNormConfig(NormConfig):
    momentum: float = 0.1
    """The weight of the new batch's μ_B and s_p in the running estimates (torch's convention)."""
    centred: bool = False
    """Divide by the ℓp norm of x − μ_B (the pre-issue-43 reading) instead of x's (the paper's)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_in("norm.momentum", self.momentum, "[0, 1]")


class LpBatchNorm(Norm):
    """ℓp BatchNorm: per channel, over the batch axes (N×H×W, or the N×T real tokens).

    Training: y = (x − μ_B) / (s_p + eps) · γ + β with the batch mean μ_B and the batch's ℓp
    power mean s_p of the uncentred activations (`lp_batch_stats`; eps outside it; ``centred``:
    of x − μ_B). Running estimates: EMAs with ``momentum``
    of μ_B and of s_p (biased: no Bessel-like correction exists for a general p); a batch with
    fewer than 2 real positions leaves them as they were. Evaluation: the running estimates in
    place of μ_B and s_p. Outputs at padding positions are 0 and carry no gradient.

    With ``record_stats = True`` each training forward keeps ``last_stats = {"mean": μ_B,
    "dev": s_p, "count": n}`` (detached).
    """

    P: float = 2.0
    NORMALIZES_OVER = _over("ℓp")
    """Each registered subclass declares its own, with its p."""

    def __init__(self, num_features: int, *, momentum: float = 0.1, centred: bool = False, **kw) -> None:
        super().__init__(num_features, **kw)
        self.momentum = momentum
        self.centred = centred
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_dev", torch.ones(num_features))
        self.record_stats = False
        self.last_stats: dict[str, Tensor] | None = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        xf = NF.upcast(x)  # bf16/fp16: statistics in fp32
        if self.training:
            mean, s, count = lp_batch_stats(xf, self.layout, self.P, mask, self.centred)
            with torch.no_grad():
                keep = count < 2  # a 0-dim tensor: decided on the device, no host sync
                for buf, new in ((self.running_mean, mean), (self.running_dev, s)):
                    buf.copy_(torch.where(keep, buf, buf.lerp(new.detach().to(buf.dtype), self.momentum)))
            if self.record_stats:
                self.last_stats = {"mean": mean.detach(), "dev": s.detach(), "count": count.detach()}
        else:
            mean, s = self.running_mean.to(xf.dtype), self.running_dev.to(xf.dtype)
        y = lp_batch_norm(xf, self.layout, mean, s, self.weight, self.bias, self.eps)
        return NF.apply_mask(y, NF.token_weights(mask, y.dtype)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, p={self.P:g}, momentum={self.momentum}, centred={self.centred}"


@register_norm("bn_l1", LpBatchNormConfig)
class L1BatchNorm(LpBatchNorm):
    """ℓ1 BatchNorm: divides by the batch's mean absolute activation (see `LpBatchNorm`)."""

    NORMALIZES_OVER = _over("ℓ1")
    P = 1.0


@register_norm("bn_l2", LpBatchNormConfig)
class L2BatchNorm(LpBatchNorm):
    """ℓ2 BatchNorm: divides by the batch's root mean square activation plus eps (see `LpBatchNorm`)."""

    NORMALIZES_OVER = _over("ℓ2")
    P = 2.0


@register_norm("bn_linf", LpBatchNormConfig)
class LinfBatchNorm(LpBatchNorm):
    """ℓ∞ BatchNorm: divides by the batch's largest absolute activation (see `LpBatchNorm`)."""

    NORMALIZES_OVER = _over("ℓ∞")
    P = math.inf
