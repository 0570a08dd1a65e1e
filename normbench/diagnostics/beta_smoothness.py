"""``beta_smoothness``: "effective β-smoothness" (Santurkar et al. 2018, Figure 4c).

max over the probe's points θ_s of ‖∇L(θ) − ∇L(θ_s)‖₂ / ‖θ − θ_s‖₂, on the step's batch (see
`normbench.diagnostics.probe`), with θ_η = θ − η·∇L(θ) (``direction=gradient``, the paper) or
θ_m = θ + m·Δθ, Δθ the optimizer's next step (``direction=update``; ‖θ − θ_m‖ = m·‖Δθ‖): the
largest gradient Lipschitz ratio seen along the step. ``hessian`` gives the local curvature at
θ to set beside it. In float32 whatever the training precision (the probe's ``needs_fp32``).
"""

from __future__ import annotations

from dataclasses import dataclass

from normbench.diagnostics.probe import StepProbe, StepProbeConfig, StepProbeHook
from normbench.diagnostics.registry import register_diagnostic


def compute(probe: StepProbe) -> dict[str, float]:
    """``beta``: max over the scales of the ratio; nan where the direction is 0 (no step was taken)."""
    if probe.grad_dists is None:
        raise ValueError("beta_smoothness needs a probe computed with gradients")
    ratios = [d / s for d, s in zip(probe.grad_dists, probe.step_norms) if s > 0]
    return {"beta": max(ratios) if ratios else float("nan")}


@dataclass
class BetaSmoothnessConfig(StepProbeConfig):
    pass


@register_diagnostic("beta_smoothness", BetaSmoothnessConfig)
class BetaSmoothnessHook(StepProbeHook):
    def summarize(self, probe: StepProbe) -> dict[str, float]:
        return compute(probe)
