"""The gradient-step probe behind ``landscape``, ``predictiveness`` and ``beta_smoothness``.

Santurkar, Tsipras, Ilyas, Madry 2018 ("How Does Batch Normalization Help Optimization?"),
Appendix A.2.2: at step t with parameters θ, the step's batch and its gradient g = ∇L(θ), move
along the gradient, θ_η = θ − η·g, for a range of step sizes η, all on the same batch and in the
same (train) mode as the step itself, and record

- the loss L(θ_η) (Figure 4a, "loss landscape"),
- ‖∇L(θ) − ∇L(θ_η)‖₂ (Figure 4b, "gradient predictiveness"),
- ‖∇L(θ) − ∇L(θ_η)‖₂ / ‖θ − θ_η‖₂ (Figure 4c, "effective β-smoothness").

The step sizes are multiples of the current learning rate (the paper: ½× to 4× for VGG with
lr 0.1, capped at η = 0.4), log-spaced. `gradient_step_probe` is pure: it takes a loss closure
and the parameters it reads, and leaves the parameters as it found them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook
from normbench.diagnostics.vectors import grads_or_zeros, sq_dist, sq_norm
from normbench.errors import ConfigError


@dataclass
class StepProbeConfig(CadenceConfig):
    """The step sizes η = m·lr for m log-spaced in [min_lr_multiple, max_lr_multiple]."""

    min_lr_multiple: float = 0.5
    max_lr_multiple: float = 4.0
    num_points: int = 8
    max_step_size: float | None = None
    """Cap on η (the paper's 0.4 for VGG at lr 0.1); none by default."""

    def check(self, name: str) -> None:
        super().check(name)
        if not 0 < self.min_lr_multiple <= self.max_lr_multiple:
            raise ConfigError(
                f"diagnostics.{name}: need 0 < min_lr_multiple <= max_lr_multiple, "
                f"got {self.min_lr_multiple} and {self.max_lr_multiple}"
            )
        if self.num_points < 1:
            raise ConfigError(f"diagnostics.{name}.num_points={self.num_points} must be >= 1")
        if self.max_step_size is not None and self.max_step_size <= 0:
            raise ConfigError(f"diagnostics.{name}.max_step_size={self.max_step_size} must be positive")


def step_sizes(
    lr: float, min_multiple: float, max_multiple: float, num_points: int, max_step: float | None = None
) -> list[float]:
    """``num_points`` step sizes from ``min_multiple·lr`` to ``max_multiple·lr``, log-spaced, capped.

    Capped values that coincide are kept once; an lr of 0 gives no step sizes.
    """
    if lr <= 0:
        return []
    lo, hi = math.log(min_multiple * lr), math.log(max_multiple * lr)
    if num_points == 1:
        etas = [math.exp(lo)]
    else:
        etas = [math.exp(lo + (hi - lo) * i / (num_points - 1)) for i in range(num_points)]
    if max_step is not None:
        etas = [min(eta, max_step) for eta in etas]
    return sorted(set(etas))


@dataclass
class StepProbe:
    """What the probe measured at θ along −g, one entry per step size."""

    step_sizes: list[float]
    loss: float
    """L(θ)."""
    grad_norm: float
    """‖g‖₂."""
    losses: list[float]
    """L(θ_η)."""
    step_norms: list[float]
    """‖θ − θ_η‖₂ = η·‖g‖₂."""
    grad_dists: list[float] | None
    """‖∇L(θ) − ∇L(θ_η)‖₂; None when the probe was asked for losses only."""


def gradient_step_probe(
    loss_fn: Callable[[], Tensor], params: Sequence[Tensor], etas: Sequence[float], with_grads: bool = True
) -> StepProbe:
    """Losses (and gradient changes) along the gradient step θ_η = θ − η·∇L(θ), for each η.

    ``loss_fn()`` evaluates the loss at the current values of ``params`` (leaf tensors that
    require grad). The parameters are moved in place and restored bit for bit at the end.
    """
    params = list(params)
    loss0 = loss_fn()
    g = [x.detach() for x in grads_or_zeros(torch.autograd.grad(loss0, params, allow_unused=True), params)]
    saved = [p.detach().clone() for p in params]
    grad_norm = float(sq_norm(g).sqrt())
    losses, dists = [], []
    try:
        for eta in etas:
            with torch.no_grad():
                for p, p0, gi in zip(params, saved, g):
                    p.copy_(p0).add_(gi, alpha=-eta)
            if with_grads:
                loss = loss_fn()
                g_eta = grads_or_zeros(torch.autograd.grad(loss, params, allow_unused=True), params)
                dists.append(sq_dist(g, g_eta).sqrt())
            else:
                with torch.no_grad():
                    loss = loss_fn()
            losses.append(loss.detach().double())
    finally:
        with torch.no_grad():
            for p, p0 in zip(params, saved):
                p.copy_(p0)

    def floats(xs: list[Tensor]) -> list[float]:
        return torch.stack(xs).tolist() if xs else []

    return StepProbe(
        step_sizes=list(etas),
        loss=float(loss0.detach()),
        grad_norm=grad_norm,
        losses=floats(losses),
        step_norms=[eta * grad_norm for eta in etas],
        grad_dists=floats(dists) if with_grads else None,
    )


def probe_at_step(ctx: DiagContext, cfg: StepProbeConfig, with_grads: bool) -> StepProbe | None:
    """The probe at the context's step, shared by the hooks due at that step that ask for the same η.

    A probe computed with gradients also answers a request for losses only. None when the
    learning rate is 0 (no step to probe).
    """
    etas = step_sizes(ctx.lr, cfg.min_lr_multiple, cfg.max_lr_multiple, cfg.num_points, cfg.max_step_size)
    if not etas:
        return None
    cache: dict[tuple[float, ...], StepProbe] = ctx.extra.setdefault("gradient_step_probe", {})
    key = tuple(etas)
    probe = cache.get(key)
    if probe is None or (with_grads and probe.grad_dists is None):
        params = [p for p in ctx.model.parameters() if p.requires_grad]
        probe = gradient_step_probe(ctx.closure(), params, etas, with_grads)
        cache[key] = probe
    return probe


class StepProbeHook(DiagnosticHook):
    """A hook that summarises the gradient-step probe; subclasses say how."""

    with_grads = True
    order = -1  # the probe hooks run before the others

    def __init__(self, cfg: StepProbeConfig) -> None:
        super().__init__(cfg)
        if self.with_grads:  # a probe with gradients first, so that a losses-only one reuses it
            self.order = -2

    def __call__(self, ctx: DiagContext) -> dict[str, float]:
        probe = probe_at_step(ctx, self.cfg, self.with_grads)  # type: ignore[arg-type]
        return {} if probe is None else self.summarize(probe)

    def summarize(self, probe: StepProbe) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError
