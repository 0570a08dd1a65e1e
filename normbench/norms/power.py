"""PowerNorm (Shen et al. 2020, "PowerNorm: Rethinking Batch Normalization in Transformers"),
following the authors' released code (``MaskPowerNorm`` in their fairseq fork), with the steps of
the paper's chain from BN to PN as options (``forward_stats``, ``group_scaling``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.base.errors import require, require_in
from normbench.norms import functional as NF
from normbench.norms import power_functional as PF
from normbench.norms import schedule
from normbench.norms.base import Norm, check_groups
from normbench.norms.registry import NormConfig, register_norm

FORWARD_STATS = ("running", "batch")
"""PN (running ψ² in the forward, approximate backward) and PN-V (batch ψ²_B, exact backward)."""

WARMUP_FRACTION = 0.1
"""The default warm-up: 10 % of the run (the authors' class default, 10,000 iterations, read as a
fraction of a 100k-step run, the basis on which Batch Renorm's 5k/40k/25k are 5/40/25 %)."""


@dataclass
class PowerNormConfig(NormConfig):
    alpha_fwd: float = 0.9
    """EMA rate of the running ψ²."""
    alpha_bkw: float = 0.9
    """Backward: ĝ = γ·dy − (1 − alpha_bkw)·ema_gz·z."""
    warmup_iters: int | None = None
    """The warm-up in training steps; when set, ``warmup_fraction`` is not used."""
    warmup_fraction: float | None = WARMUP_FRACTION
    """The warm-up as a fraction of the run's training steps (planned by the runner)."""
    groups: int = 1
    """GroupScaling groups (the authors' class default is 1; 4 = the attention heads of their
    Transformer is what ``GroupScaling1D`` defaults to)."""
    forward_stats: str = "running"
    """What divides in the training forward: ``running`` (PN: the running ψ² after the warm-up,
    with the approximate backward) or ``batch`` (PN-V, the chain's step before PN: the batch's ψ²_B
    at every step, exact backward through it; the running ψ² is still kept for evaluation)."""
    group_scaling: bool = True
    """GroupScaling before the division (the authors' code; the paper's algorithms omit it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_in("norm.alpha_fwd", self.alpha_fwd, "[0, 1]")  # an EMA rate
        require_in("norm.alpha_bkw", self.alpha_bkw, "[0, 1]")
        schedule.checked(self.warmup_iters, self.warmup_fraction, "warmup_iters", "warmup_fraction")
        require(self.groups > 0, "norm.groups", self.groups, "a positive integer (dividing every layer's channels)")
        choices = f"one of {', '.join(FORWARD_STATS)}"
        require(self.forward_stats in FORWARD_STATS, "norm.forward_stats", self.forward_stats, choices)


@register_norm("pn", PowerNormConfig)
class PowerNorm(Norm):
    """PowerNorm: GroupScaling, then per-channel division by a quadratic mean, no re-centring.

    1. GroupScaling (per position): x̃ = x / sqrt(mean over each group of C/groups channels of
       x² + eps).
    2. ψ²_B = per-channel mean of x̃² over the batch's real positions (N×H×W, or N×T real
       tokens). Training step t (``iters``, a buffer read on the device: no host sync): the
       forward uses ψ² = ψ²_B while t ≤ ``warmup_iters`` and the running ψ² (before this
       step's update) afterwards; ``warmup_iters`` is given, or ``warmup_fraction`` of the run's
       steps once `plan_schedule` has been called (`normbench.norms.schedule`);
       z = x̃ / sqrt(ψ² + eps); y = γ·z + β; eps inside the square root.
    3. Running ψ² (buffer ``running_psi2``): while t < ``warmup_iters`` it is first set to the
       cumulative mean ((t−1)·ψ² + ψ²_B)/t, and then, at every step, the EMA
       ψ² ← α_fwd·ψ² + (1 − α_fwd)·ψ²_B — both updates in the order of the authors' code.
    4. Backward (`power_functional.power_norm_train`, approximate on purpose):
       ĝ = γ·dy − (1 − α_bkw)·ema_gz·z, ema_gz += mean(ĝ·z) (buffer ``ema_gz``), dx̃ = ĝ /
       sqrt(ψ²_B + eps); then the exact derivative of GroupScaling (all in one autograd node
       with a closed-form backward). The authors' code averages ĝ·z over padded positions too;
       here only real tokens count, so padding cannot reach real tokens.
    Evaluation: z = x̃ / sqrt(running ψ² + eps). Outputs at padding positions are 0.

    The chain BN → PN-V → PN (their §4), as options: ``forward_stats="batch"`` is PN-V — step 2
    divides by ψ²_B at every training step and the backward is autograd's, exact through ψ²_B
    (`power_functional.power_norm_batch`; ``ema_gz`` stays 0, the running ψ² is updated as in 3
    for evaluation); ``group_scaling=False`` drops step 1 (x̃ = x), in either mode.

    With ``record_stats = True`` each training forward keeps ``last_stats = {"psi2": ψ²_B}``.
    """

    NORMALIZES_OVER = {
        "NCHW": "C/G per pixel, then N×H×W per channel (quadratic mean)",
        "NTC": "C/G per token, then N×T real tokens per channel (quadratic mean)",
    }

    def __init__(
        self,
        num_features: int,
        *,
        alpha_fwd: float = 0.9,
        alpha_bkw: float = 0.9,
        warmup_iters: int | None = None,
        warmup_fraction: float | None = WARMUP_FRACTION,
        groups: int = 1,
        forward_stats: str = "running",
        group_scaling: bool = True,
        **kw,
    ) -> None:
        self.warmup_fraction = schedule.checked(warmup_iters, warmup_fraction, "warmup_iters", "warmup_fraction")
        check_groups(groups, num_features)
        super().__init__(num_features, **kw)
        self.alpha_fwd, self.alpha_bkw = alpha_fwd, alpha_bkw
        self.groups = groups
        self.forward_stats, self.group_scaling = forward_stats, group_scaling
        self.warmup_iters = warmup_iters  # given, or planned from warmup_fraction (None until then)
        self.register_buffer("running_psi2", torch.ones(num_features))
        self.register_buffer("ema_gz", torch.zeros(num_features))
        self.register_buffer("iters", torch.tensor(0, dtype=torch.long))
        self.record_stats = False
        self.last_stats: dict[str, Tensor] | None = None

    def plan_schedule(self, total_steps: int) -> None:
        """The warm-up for a run of ``total_steps`` training steps (a given count stays as it is)."""
        if self.warmup_fraction is not None:
            self.warmup_iters = schedule.steps_of(self.warmup_fraction, total_steps)

    def planned_steps(self) -> dict[str, int | None]:
        """The planned schedule: ``{"warmup_iters": steps}`` (None before `plan_schedule`)."""
        return {"warmup_iters": self.warmup_iters}

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if not self.training:
            z = NF.group_scaling(x, self.layout, self.groups, self.eps) if self.group_scaling else NF.upcast(x)
            shape = NF.channel_shape(z, self.layout)
            z = z * torch.rsqrt(self.running_psi2 + self.eps).view(shape)
            y = NF.channel_affine(z, self.weight, self.bias, self.layout)
            return NF.apply_mask(y, NF.token_weights(mask, y.dtype)).to(x.dtype)
        self.iters.add_(1)
        warmup = schedule.UNPLANNED if self.warmup_iters is None else self.warmup_iters
        step = self.iters.to(self.running_psi2.dtype)  # a tensor: the warm-up is decided on the device
        xf = NF.upcast(x)  # bf16/fp16: statistics in fp32
        x3 = PF.acl(xf, self.layout)
        x4 = x3.reshape(x3.shape[0], self.groups, -1, x3.shape[2])  # (A, G, C/G, L)
        w4 = None if mask is None else mask.reshape(-1, 1, 1, 1).to(xf.dtype)
        if self.forward_stats == "batch":  # PN-V
            y, psi2_batch = PF.power_norm_batch(x4, w4, self.weight, self.bias, self.eps, self.group_scaling)
        else:
            y, psi2_batch = PF.power_norm_train(
                x4, w4, self.weight, self.bias, self.running_psi2.clone(), self.iters > warmup,
                self.ema_gz, self.eps, self.alpha_bkw, self.group_scaling,
            )  # fmt: skip
        if self.record_stats:
            self.last_stats = {"psi2": psi2_batch}
        with torch.no_grad():
            psi2_batch = psi2_batch.to(self.running_psi2.dtype)
            cumulative = self.running_psi2 * ((step - 1) / step) + psi2_batch / step
            updated = torch.where(self.iters < warmup, cumulative, self.running_psi2)
            updated = updated.lerp(psi2_batch, 1 - self.alpha_fwd)
            if mask is not None:  # an all-padding batch changes nothing
                updated = torch.where(mask.any(), updated, self.running_psi2)
            self.running_psi2.copy_(updated)
        return y.reshape(x.shape).to(x.dtype)

    def extra_repr(self) -> str:
        fraction = "" if self.warmup_fraction is None else f" ({self.warmup_fraction:g} of the run)"
        chain = "" if self.forward_stats == "running" else ", forward_stats=batch (PN-V)"
        chain += "" if self.group_scaling else ", group_scaling=False"
        return f"{super().extra_repr()}, groups={self.groups}, warmup_iters={self.warmup_iters}{fraction}{chain}"
