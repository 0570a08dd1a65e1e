"""The step probe behind ``landscape``, ``predictiveness`` and ``beta_smoothness``.

Santurkar, Tsipras, Ilyas, Madry 2018 ("How Does Batch Normalization Help Optimization?"),
Appendix A.2.2: at step t with parameters θ, the step's batch and its gradient g = ∇L(θ), move
along a direction d, θ_s = θ + s·d, for a range of scales s, all on the same batch and in the
same (train) mode as the step itself, and record

- the loss L(θ_s) (Figure 4a, "loss landscape"),
- ‖∇L(θ) − ∇L(θ_s)‖₂ (Figure 4b, "gradient predictiveness"),
- ‖∇L(θ) − ∇L(θ_s)‖₂ / ‖θ − θ_s‖₂ (Figure 4c, "effective β-smoothness").

Two directions (``direction``):

- ``gradient`` (the paper, which trains with plain SGD): d = −g and s = η, step sizes that are
  multiples m of the current learning rate, η = m·lr (½× to 4× for VGG with lr 0.1, capped at
  η = 0.4), log-spaced;
- ``update``: d = Δθ, the step the run's optimizer is about to take (momentum, Adam's moments,
  weight decay and the current learning rate included; computed without changing the optimizer
  state), and s = m, the same log-spaced multiples: θ_m = θ + m·Δθ, ‖θ − θ_m‖ = m·‖Δθ‖. Under
  momentum or Adam the real step is far longer (or shorter) than lr·‖g‖, so only this direction
  probes the neighbourhood the training actually moves through. Under plain SGD without weight
  decay Δθ = −lr·g and both directions coincide.
- ``auto`` (the default) resolves to ``gradient`` for plain SGD (``optimizer.name=sgd`` with
  ``momentum=0``) and to ``update`` otherwise, when the config is parsed
  (`choose_probe_directions`); the logged config records the choice.

`gradient_step_probe` is pure: it takes a loss closure, the parameters it reads and the
direction, and leaves the parameters as it found them. Every evaluation goes through the
context's closure, which puts the norms' buffers and the RNG streams back first
(`DiagContext.reset`), so stateful norms do not change the function between evaluations.

The probes run in float32 whatever the training precision (``needs_fp32``: the loss is
evaluated with autocast off): differences of losses and gradients a step apart are what they
measure, and bf16 rounding is of their size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from normbench.base.errors import ConfigError
from normbench.diagnostics.registry import DIAGNOSTICS, CadenceConfig, DiagContext, DiagnosticHook
from normbench.diagnostics.state import optimizer_step_preview
from normbench.diagnostics.vectors import grads_or_zeros, ranks_mean, sq_dist, sq_norm

DIRECTIONS = ("gradient", "update", "auto")


@dataclass
class StepProbeConfig(CadenceConfig):
    """The scales s: log-spaced multiples m in [min_lr_multiple, max_lr_multiple]; η = m·lr
    along −g for ``direction=gradient``, m times the optimizer's step for ``update``."""

    min_lr_multiple: float = 0.5
    max_lr_multiple: float = 4.0
    num_points: int = 8
    max_step_size: float | None = None
    """Cap on η = m·lr (the paper's 0.4 for VGG at lr 0.1); ``update``: on m·lr likewise
    (m ≤ max_step_size / lr). None: no cap."""
    direction: str = "auto"
    """``gradient`` (θ − η·g), ``update`` (θ + m·Δθ, the optimizer's next step) or ``auto``:
    ``gradient`` for plain SGD (no momentum), ``update`` otherwise."""

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
        if self.direction not in DIRECTIONS:
            raise ConfigError(
                f"unknown diagnostics.{name}.direction {self.direction!r}; valid choices: {', '.join(DIRECTIONS)}"
            )


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


def probe_scales(cfg: StepProbeConfig, lr: float, direction: str) -> list[float]:
    """The scales s of θ + s·d: η = m·lr for ``gradient``, the multiples m for ``update``.

    An lr of 0 gives none (there is no step to probe).
    """
    if lr <= 0:
        return []
    if direction == "gradient":
        return step_sizes(lr, cfg.min_lr_multiple, cfg.max_lr_multiple, cfg.num_points, cfg.max_step_size)
    cap = None if cfg.max_step_size is None else cfg.max_step_size / lr
    return step_sizes(1.0, cfg.min_lr_multiple, cfg.max_lr_multiple, cfg.num_points, cap)


def auto_direction(optimizer_name: str, momentum: float) -> str:
    """``gradient`` for plain SGD (the paper's setting), ``update`` for momentum, Adam, AdamW."""
    return "gradient" if optimizer_name == "sgd" and momentum == 0 else "update"


def optimizer_direction(optimizer: torch.optim.Optimizer) -> str:
    """`auto_direction` read off an optimizer object (for contexts built outside the runner)."""
    plain = type(optimizer) is torch.optim.SGD and all(g.get("momentum", 0) == 0 for g in optimizer.param_groups)
    return "gradient" if plain else "update"


def choose_probe_directions(diagnostics: Mapping[str, Any] | None, optimizer_name: str, momentum: float) -> Any:
    """The diagnostics' settings (name -> its settings, as composed or recorded, not yet typed) with
    ``direction: auto`` of every probe (a diagnostic whose registered config is a `StepProbeConfig`)
    replaced by `auto_direction` of the run's optimizer: ``gradient`` for plain SGD, ``update``
    otherwise. A new mapping; what is not a mapping of settings is returned as given, for
    `normbench.diagnostics.registry.diagnostics_config` to refuse."""
    if not isinstance(diagnostics, Mapping):
        return diagnostics
    choice = auto_direction(optimizer_name, momentum)
    chosen = dict(diagnostics)
    for name, sub in diagnostics.items():
        schema = DIAGNOSTICS.entry(name).config  # an unknown name: one line listing the registered ones
        if not (isinstance(schema, type) and issubclass(schema, StepProbeConfig)):
            continue
        if dataclasses.is_dataclass(sub) and not isinstance(sub, type):
            sub = dataclasses.asdict(sub)
        if sub is None or isinstance(sub, Mapping):
            sub = dict(sub or {})
            if sub.get("direction", schema.direction) == "auto":
                chosen[name] = {**sub, "direction": choice}
    return chosen


@dataclass
class StepProbe:
    """What the probe measured at θ along θ + s·d, one entry per scale s."""

    direction: str
    """``gradient`` (d = −g, s = η) or ``update`` (d = Δθ, s = m)."""
    step_sizes: list[float]
    """The scales s."""
    loss: float
    """L(θ)."""
    grad_norm: float
    """‖g‖₂."""
    direction_norm: float
    """‖d‖₂: ‖g‖₂ for ``gradient``, ‖Δθ‖₂ for ``update``."""
    losses: list[float]
    """L(θ + s·d)."""
    step_norms: list[float]
    """‖θ − θ_s‖₂ = s·‖d‖₂."""
    grad_dists: list[float] | None
    """‖∇L(θ) − ∇L(θ_s)‖₂; None when the probe was asked for losses only."""


def gradient_step_probe(
    loss_fn: Callable[[], Tensor],
    params: Sequence[Tensor],
    etas: Sequence[float],
    with_grads: bool = True,
    direction_of: Callable[[list[Tensor]], list[Tensor]] | None = None,
) -> StepProbe:
    """Losses (and gradient changes) at θ_s = θ + s·d for each scale s in ``etas``.

    ``loss_fn()`` evaluates the loss at the current values of ``params`` (leaf tensors that
    require grad). d = −∇L(θ) (s = η, the paper's probe) unless ``direction_of(g)`` gives the
    direction from the gradient g (``update``: the optimizer's step Δθ). The parameters are
    moved in place and restored bit for bit at the end.
    """
    params = list(params)
    loss0 = loss_fn()
    g = ranks_mean(grads_or_zeros(torch.autograd.grad(loss0, params, allow_unused=True), params))  # DDP: global
    (loss0,) = ranks_mean([loss0])
    d = [-x for x in g] if direction_of is None else [x.detach() for x in direction_of(g)]
    saved = [p.detach().clone() for p in params]
    grad_norm, direction_norm = (float(v) for v in torch.stack([sq_norm(g), sq_norm(d)]).sqrt().tolist())
    losses, dists = [], []
    try:
        for s in etas:
            with torch.no_grad():
                for p, p0, di in zip(params, saved, d):
                    p.copy_(p0).add_(di, alpha=s)
            if with_grads:
                loss = loss_fn()
                g_s = ranks_mean(grads_or_zeros(torch.autograd.grad(loss, params, allow_unused=True), params))
                dists.append(sq_dist(g, g_s).sqrt())
            else:
                with torch.no_grad():
                    loss = loss_fn()
            losses.append(ranks_mean([loss])[0].double())
    finally:
        with torch.no_grad():
            for p, p0 in zip(params, saved):
                p.copy_(p0)

    def floats(xs: list[Tensor]) -> list[float]:
        return torch.stack(xs).tolist() if xs else []

    return StepProbe(
        direction="gradient" if direction_of is None else "update",
        step_sizes=list(etas),
        loss=float(loss0.detach()),
        grad_norm=grad_norm,
        direction_norm=direction_norm,
        losses=floats(losses),
        step_norms=[s * direction_norm for s in etas],
        grad_dists=floats(dists) if with_grads else None,
    )


def update_direction(
    optimizer: torch.optim.Optimizer, params: Sequence[Tensor]
) -> Callable[[list[Tensor]], list[Tensor]]:
    """g ↦ Δθ, the step ``optimizer`` would take from the current ``params`` with gradients g
    (its state left unchanged)."""

    def direction(grads: list[Tensor]) -> list[Tensor]:
        new = optimizer_step_preview(optimizer, params, grads)
        return [n - p.detach() for n, p in zip(new, params)]

    return direction


def probe_at_step(ctx: DiagContext, cfg: StepProbeConfig, with_grads: bool) -> StepProbe | None:
    """The probe at the context's step, shared by the hooks due at that step that ask for the
    same direction and scales.

    A probe computed with gradients also answers a request for losses only. ``direction=auto``
    not resolved by the runner is resolved from ``ctx.optimizer``. None when the learning rate
    is 0 (no step to probe).
    """
    direction = optimizer_direction(ctx.optimizer) if cfg.direction == "auto" else cfg.direction
    scales = probe_scales(cfg, ctx.lr, direction)
    if not scales:
        return None
    cache: dict[tuple[Any, ...], StepProbe] = ctx.extra.setdefault("gradient_step_probe", {})
    key = (direction, *scales)
    probe = cache.get(key)
    if probe is None or (with_grads and probe.grad_dists is None):
        params = [p for p in ctx.model.parameters() if p.requires_grad]
        direction_of = update_direction(ctx.optimizer, params) if direction == "update" else None
        probe = gradient_step_probe(ctx.closure(), params, scales, with_grads, direction_of)
        cache[key] = probe
    return probe


class StepProbeHook(DiagnosticHook):
    """A hook that summarises the gradient-step probe; subclasses say how."""

    with_grads = True
    order = -1  # the probe hooks run before the others
    needs_fp32 = True  # losses and gradients along the step in float32, whatever the training precision

    def __init__(self, cfg: StepProbeConfig) -> None:
        super().__init__(cfg)
        if self.with_grads:  # a probe with gradients first, so that a losses-only one reuses it
            self.order = -2

    def __call__(self, ctx: DiagContext) -> dict[str, float]:
        probe = probe_at_step(ctx, self.cfg, self.with_grads)  # type: ignore[arg-type]
        return {} if probe is None else self.summarize(probe)

    def summarize(self, probe: StepProbe) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError
