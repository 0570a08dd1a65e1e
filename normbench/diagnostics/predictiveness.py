"""``predictiveness``: how much the gradient changes along the step (Santurkar et al. 2018, Fig. 4b).

‖∇L(θ) − ∇L(θ_s)‖₂ on the step's batch, for the probe's points θ_s (see
`normbench.diagnostics.probe`): θ_η = θ − η·∇L(θ) (``direction=gradient``, the paper) or
θ_m = θ + m·Δθ with Δθ the optimizer's next step (``direction=update``). Small values mean the
gradient at θ predicts the gradient a step away. Logged: min, max and mean over the scales. In
float32 whatever the training precision (the probe's ``needs_fp32``).
"""

from __future__ import annotations

from dataclasses import dataclass

from normbench.diagnostics.probe import StepProbe, StepProbeConfig, StepProbeHook
from normbench.diagnostics.registry import register_diagnostic


def compute(probe: StepProbe) -> dict[str, float]:
    """``grad_diff_min``, ``grad_diff_max``, ``grad_diff_mean`` of ‖∇L(θ) − ∇L(θ_s)‖₂ over the scales."""
    dists = probe.grad_dists
    if dists is None:
        raise ValueError("predictiveness needs a probe computed with gradients")
    return {"grad_diff_min": min(dists), "grad_diff_max": max(dists), "grad_diff_mean": sum(dists) / len(dists)}


@dataclass
class PredictivenessConfig(StepProbeConfig):
    pass


@register_diagnostic("predictiveness", PredictivenessConfig)
class PredictivenessHook(StepProbeHook):
    def summarize(self, probe: StepProbe) -> dict[str, float]:
        return compute(probe)
