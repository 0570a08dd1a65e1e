"""``hessian``: the top eigenvalue of the batch loss's Hessian, by power iteration.

Beyond Santurkar et al. 2018: a direct measure of the local smoothness at θ to set beside their
effective β (``beta_smoothness``). Power iteration on Hessian-vector products
H·v = ∇(∇L(θ)·v) (double back-propagation through one graph of the step's batch, in train mode
as the step): v ← H·v / ‖H·v‖, with the Rayleigh quotient λ = vᵀH·v as the estimate, until λ
changes by at most ``tol``·|λ| or after ``iterations`` products. Power iteration finds the
eigenvalue of largest magnitude, which near a minimum of a training loss is the largest
positive one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic
from normbench.diagnostics.vectors import dot, grads_or_zeros, sq_norm
from normbench.errors import ConfigError
from normbench.norms import kernels


def top_eigenvalue(
    loss_fn: Callable[[], Tensor],
    params: Sequence[Tensor],
    iterations: int = 20,
    tol: float = 1e-3,
    generator: torch.Generator | None = None,
) -> tuple[float, int]:
    """(λ_max estimate, Hessian-vector products used) for the Hessian of ``loss_fn()`` in ``params``.

    The start vector is drawn from ``generator`` (CPU), so the global RNG streams are untouched.
    """
    params = list(params)
    loss = loss_fn()
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]  # the others: H rows of 0
    if not live:
        return 0.0, 0
    v = [torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p) for p in params]
    scale = sq_norm(v).rsqrt()
    v = [x * scale.to(x.dtype) for x in v]
    lam: float | None = None
    used = 0
    for _ in range(iterations):
        hv = torch.autograd.grad(
            [grads[i] for i in live], params, grad_outputs=[v[i] for i in live], retain_graph=True, allow_unused=True
        )
        hv = [h.detach() for h in grads_or_zeros(hv, params)]
        used += 1
        new_lam = float(dot(v, hv))
        norm = sq_norm(hv).sqrt()
        if float(norm) == 0.0:
            return 0.0, used
        v = [h / norm.to(h.dtype) for h in hv]
        converged = lam is not None and abs(new_lam - lam) <= tol * abs(new_lam)
        lam = new_lam
        if converged:
            break
    return float(lam if lam is not None else float("nan")), used


@dataclass
class HessianConfig(CadenceConfig):
    iterations: int = 20
    """Hessian-vector products at most."""
    tol: float = 1e-3
    """Stop when the eigenvalue estimate changes by at most tol·|λ|."""
    seed: int = 0
    """Seed of the start vector (drawn afresh each time from seed + step)."""

    def check(self, name: str) -> None:
        super().check(name)
        if self.iterations < 1:
            raise ConfigError(f"diagnostics.{name}.iterations={self.iterations} must be >= 1")
        if self.tol < 0:
            raise ConfigError(f"diagnostics.{name}.tol={self.tol} must be >= 0")


@contextlib.contextmanager
def twice_differentiable(model: nn.Module) -> Iterator[None]:
    """Norms with a fused single-backward kernel switch to their differentiable-ops path meanwhile
    (BatchNorm's live-statistics path; the CPU kernels of `normbench.norms.kernels` off)."""
    switched = [m for m in model.modules() if getattr(m, "record_live_stats", True) is False]
    for m in switched:
        m.record_live_stats = True
    try:
        with _math_attention(), kernels.suspended():
            yield
    finally:
        for m in switched:
            m.record_live_stats = False
            m.last_stats_live = None


def _math_attention() -> contextlib.AbstractContextManager:
    """Fused attention kernels have no double backward; the math one has."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover  (older torch)
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


@register_diagnostic("hessian", HessianConfig)
class HessianHook(DiagnosticHook):
    name = "hessian"

    def __call__(self, ctx: DiagContext) -> dict[str, float]:
        cfg: HessianConfig = self.cfg  # type: ignore[assignment]
        params = [p for p in ctx.model.parameters() if p.requires_grad]
        generator = torch.Generator().manual_seed(cfg.seed + ctx.step)
        try:
            with twice_differentiable(ctx.model):
                lam, used = top_eigenvalue(ctx.closure(), params, cfg.iterations, cfg.tol, generator)
        except RuntimeError as e:
            if "differentiat" not in str(e) and "double backward" not in str(e):
                raise
            raise ConfigError(
                f"diagnostics.hessian needs a twice-differentiable model (Hessian-vector products), but: "
                f"{str(e).splitlines()[0]}"
            ) from None
        return {"top_eigenvalue": lam, "iterations": used}
