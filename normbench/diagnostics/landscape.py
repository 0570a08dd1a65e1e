"""``landscape``: the loss along the step (Santurkar et al. 2018, Figure 4a).

L(θ_s) on the step's batch along the probe's direction (see `normbench.diagnostics.probe`):
``direction=gradient``, θ_η = θ − η·∇L(θ) for step sizes η from ``min_lr_multiple``·lr to
``max_lr_multiple``·lr (log-spaced; the paper, plain SGD); ``direction=update``, θ_m = θ + m·Δθ
for the same multiples m of the optimizer's next step Δθ (momentum, Adam). Logged: the smallest
and largest of these losses and the range (max − min) — the shaded band of their Figure 4a —
and the loss at θ itself. Train mode, as the step: BatchNorm uses the batch's statistics. In
float32 whatever the training precision (the probe's ``needs_fp32``).
"""

from __future__ import annotations

from dataclasses import dataclass

from normbench.diagnostics.probe import StepProbe, StepProbeConfig, StepProbeHook
from normbench.diagnostics.registry import register_diagnostic


def compute(probe: StepProbe) -> dict[str, float]:
    """``loss_min``, ``loss_max``, ``loss_range`` over the step sizes, and ``loss`` = L(θ)."""
    lo, hi = min(probe.losses), max(probe.losses)
    return {"loss_min": lo, "loss_max": hi, "loss_range": hi - lo, "loss": probe.loss}


@dataclass
class LandscapeConfig(StepProbeConfig):
    pass


@register_diagnostic("landscape", LandscapeConfig)
class LandscapeHook(StepProbeHook):
    with_grads = False  # losses only: one forward per step size

    def summarize(self, probe: StepProbe) -> dict[str, float]:
        return compute(probe)
