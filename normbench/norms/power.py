"""PowerNorm (Shen et al. 2020, "PowerNorm: Rethinking Batch Normalization in Transformers"),
following the authors' released code (``MaskPowerNorm`` in their fairseq fork)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.errors import ConfigError
from normbench.norms import batch_functional as BF
from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@dataclass
class PowerNormConfig(NormConfig):
    alpha_fwd: float = 0.9
    alpha_bkw: float = 0.9
    warmup_iters: int = 10000
    groups: int = 1
    """GroupScaling groups (the authors' class default is 1; 4 = the attention heads of their
    Transformer is what ``GroupScaling1D`` defaults to)."""


@register_norm("pn", PowerNormConfig)
class PowerNorm(Norm):
    """PowerNorm: GroupScaling, then per-channel division by a quadratic mean, no re-centring.

    1. GroupScaling (per position): x̃ = x / sqrt(mean over each group of C/groups channels of
       x² + eps).
    2. ψ²_B = per-channel mean of x̃² over the batch's real positions (N×H×W, or N×T real
       tokens). Training step t (``iters``, a buffer read on the device: no host sync): the
       forward uses ψ² = ψ²_B while t ≤ ``warmup_iters`` and the running ψ² (before this
       step's update) afterwards;
       z = x̃ / sqrt(ψ² + eps); y = γ·z + β; eps inside the square root.
    3. Running ψ² (buffer ``running_psi2``): while t < ``warmup_iters`` it is first set to the
       cumulative mean ((t−1)·ψ² + ψ²_B)/t, and then, at every step, the EMA
       ψ² ← α_fwd·ψ² + (1 − α_fwd)·ψ²_B — both updates in the order of the authors' code.
    4. Backward (`batch_functional.power_norm_train`, approximate on purpose):
       ĝ = γ·dy − (1 − α_bkw)·ema_gz·z, ema_gz += mean(ĝ·z) (buffer ``ema_gz``), dx̃ = ĝ /
       sqrt(ψ²_B + eps); then the exact derivative of GroupScaling (all in one autograd node
       with a closed-form backward). The authors' code averages ĝ·z over padded positions too;
       here only real tokens count, so padding cannot reach real tokens.
    Evaluation: z = x̃ / sqrt(running ψ² + eps). Outputs at padding positions are 0.

    With ``record_stats = True`` each training forward keeps ``last_stats = {"psi2": ψ²_B}``.
    """

    def __init__(
        self,
        num_features: int,
        *,
        alpha_fwd: float = 0.9,
        alpha_bkw: float = 0.9,
        warmup_iters: int = 10000,
        groups: int = 1,
        **kw,
    ) -> None:
        if groups <= 0 or num_features % groups:
            raise ConfigError(
                f"norm.groups={groups} does not divide num_features={num_features}; choose a divisor of {num_features}"
            )
        super().__init__(num_features, **kw)
        self.alpha_fwd, self.alpha_bkw = alpha_fwd, alpha_bkw
        self.warmup_iters, self.groups = warmup_iters, groups
        self.register_buffer("running_psi2", torch.ones(num_features))
        self.register_buffer("ema_gz", torch.zeros(num_features))
        self.register_buffer("iters", torch.tensor(0, dtype=torch.long))
        self.record_stats = False
        self.last_stats: dict[str, Tensor] | None = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if not self.training:
            z = NF.group_scaling(x, self.layout, self.groups, self.eps)  # float32 for bf16 inputs
            shape = NF.channel_shape(z, self.layout)
            z = z * torch.rsqrt(self.running_psi2 + self.eps).view(shape)
            y = NF.channel_affine(z, self.weight, self.bias, self.layout)
            return NF.apply_mask(y, NF.token_weights(mask, y.dtype)).to(x.dtype)
        self.iters.add_(1)
        step = self.iters.to(self.running_psi2.dtype)  # a tensor: the warm-up is decided on the device
        xf = NF.upcast(x)  # bf16/fp16: statistics in fp32
        x3 = BF.acl(xf, self.layout)
        x4 = x3.reshape(x3.shape[0], self.groups, -1, x3.shape[2])  # (A, G, C/G, L)
        w4 = None if mask is None else mask.reshape(-1, 1, 1, 1).to(xf.dtype)
        y, psi2_batch = BF.power_norm_train(
            x4, w4, self.weight, self.bias, self.running_psi2.clone(), self.iters > self.warmup_iters,
            self.ema_gz, self.eps, self.alpha_bkw,
        )  # fmt: skip
        if self.record_stats:
            self.last_stats = {"psi2": psi2_batch}
        with torch.no_grad():
            psi2_batch = psi2_batch.to(self.running_psi2.dtype)
            cumulative = self.running_psi2 * ((step - 1) / step) + psi2_batch / step
            updated = torch.where(self.iters < self.warmup_iters, cumulative, self.running_psi2)
            updated = updated.lerp(psi2_batch, 1 - self.alpha_fwd)
            if mask is not None:  # an all-padding batch changes nothing
                updated = torch.where(mask.any(), updated, self.running_psi2)
            self.running_psi2.copy_(updated)
        return y.reshape(x.shape).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, groups={self.groups}, warmup_iters={self.warmup_iters}"
