"""``hessian``: the extreme eigenvalues of the batch loss's Hessian, by Lanczos, with their residuals.

Beyond Santurkar et al. 2018: a direct measure of the local curvature at θ to set beside their
effective β (``beta_smoothness``). The Hessian H of the step's loss (train mode, the step's batch
and RNG draws) is never formed: Hessian-vector products H·v = ∇(∇L(θ)·v) come from double
back-propagation through one graph (``retain_graph``). Scipy's ARPACK ``eigsh`` (implicitly
restarted Lanczos, Lehoucq & Sorensen 1996) runs on them as a ``LinearOperator`` on flat float64
vectors and returns both λ_max and λ_min (``which="BE"``, k = 2: one eigenvalue from each end of
the spectrum, from one Krylov space; separate "LA" and "SA" runs cost 1.2-2× the products on a
small BN CNN). Early in training, BatchNorm networks have indefinite Hessians with
λ_min ≈ −λ_max, where power iteration (which finds the largest |λ|) reports either or a mixture.

Each eigenvalue comes with its residual ‖H·v − λ·v‖ / |λ| (‖v‖ = 1; ‖H·v‖ when λ = 0),
measured with one more product on the returned vector. Lanczos assumes a symmetric H, so two
more products measure how far the products are from one (``asymmetry``; PowerNorm's approximate
backward is not the gradient of its forward, and its "Hessian" is not symmetric). The run is
``converged`` when both residuals and the asymmetry are ≤ ``tol`` (ARPACK stops at that
residual, as it estimates it). A run capped at ``max_products`` reports the Rayleigh–Ritz
estimates on everything it multiplied (compressed every ``ncv`` products to the best Ritz
vectors: inner bounds λ̂_max ≤ λ_max, λ̂_min ≥ λ_min) with their measured residuals. The
residual is relative to each |λ|: near a minimum, where λ_min is a small negative number,
λ_min takes many more products than λ_max. Optionally Hutchinson's estimate of tr H (the mean
of zᵀH·z over Rademacher z; Hutchinson 1989).

The loss is evaluated in float32 whatever the training precision (``needs_fp32``: autocast is
off while the hook runs): under bf16 autocast the products' asymmetry is ~1e-3 (2e-7 in
float32) and the run would never report ``converged``.

Random numbers (the start vector, the asymmetry's vector, the probes) come from a CPU generator seeded afresh at each
call (``seed + step``): the training's RNG streams are untouched.

Under data parallelism each product is averaged over the ranks (`vectors.ranks_mean`): the spectrum
is the global batch's (what a one-process run of the same global batch measures, up to the
per-rank batch statistics of an unsynchronized BatchNorm), identical on every rank, and every
rank's eigensolver takes the same number of products, so the collectives of a synchronized
BatchNorm inside the products run in lockstep (they used to hang when one rank's Lanczos
converged first).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from torch import Tensor

from normbench.base.errors import ConfigError
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic
from normbench.diagnostics.vectors import ranks_mean


class _BudgetExhausted(Exception):
    """Raised by the operator when a Lanczos run asks for more products than it may use."""


class HessianOperator:
    """v ↦ H·v on flat float64 vectors for the Hessian of ``loss`` in ``params``.

    One graph: ∇L is taken once with ``create_graph``; each product back-propagates
    ⟨∇L, v⟩ through it again (``retain_graph``). Parameters whose gradient does not depend on θ
    (or that the loss does not use) have zero rows and columns. ``products`` counts the products.
    """

    def __init__(self, loss: Tensor, params: Sequence[Tensor]) -> None:
        self.params = list(params)
        self.size = sum(p.numel() for p in self.params)
        grads = torch.autograd.grad(loss, self.params, create_graph=True, allow_unused=True)
        self.live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
        self.grads = [grads[i] for i in self.live]
        self.products = 0

    @property
    def zero(self) -> bool:
        """H = 0 identically (no gradient depends on θ)."""
        return not self.live

    def __call__(self, v: np.ndarray) -> np.ndarray:
        flat = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64).reshape(-1))
        chunks = torch.split(flat, [p.numel() for p in self.params])
        vs = [chunks[i].view_as(self.params[i]).to(self.params[i]) for i in self.live]
        hv = torch.autograd.grad(self.grads, self.params, grad_outputs=vs, retain_graph=True, allow_unused=True)
        self.products += 1
        device = self.params[0].device
        out = torch.cat([
            torch.zeros(p.numel(), dtype=torch.float64, device=device) if h is None else h.detach().double().reshape(-1)
            for h, p in zip(hv, self.params)
        ])  # fmt: skip
        return ranks_mean([out])[0].cpu().numpy()  # under DDP: the global batch's, in lockstep (see below)


@dataclass(frozen=True)
class HessianSpectrum:
    """What `hessian_extremes` found; ``trace`` / ``trace_stderr`` are NaN without probes."""

    lambda_max: float
    lambda_min: float
    residual_max: float
    """‖H·v − λ_max·v‖ / |λ_max| for the returned unit vector v (measured, one product)."""
    residual_min: float
    asymmetry: float
    """|⟨u, H·(H·u)⟩ − ‖H·u‖²| / ‖H·u‖² for a random u: rounding-level for a true Hessian, large
    when the model's double backward is not one (a norm whose backward is not the gradient of
    its forward, such as PowerNorm's approximate backward): then the eigenvalues mean nothing."""
    products: int
    """Hessian-vector products used in all (Lanczos, residuals, asymmetry, trace probes)."""
    converged: bool
    """Both measured residuals and the asymmetry are ≤ ``tol``."""
    trace: float = float("nan")
    trace_stderr: float = float("nan")
    """Standard error of the Hutchinson mean (needs at least 2 probes)."""
    v_max: np.ndarray | None = field(default=None, repr=False)
    """The unit eigenvector estimates (flat, float64, in the order of ``params``); not logged."""
    v_min: np.ndarray | None = field(default=None, repr=False)

    def metrics(self) -> dict[str, float]:
        """The scalars, ``converged`` as 0/1."""
        return {f.name: float(getattr(self, f.name)) for f in fields(self) if f.name not in ("v_max", "v_min")}


def _residual(op: HessianOperator, lam: float, v: np.ndarray) -> float:
    """‖H·v − λ·v‖ / |λ| (‖H·v‖ when λ = 0) for a unit v; one product."""
    r = float(np.linalg.norm(op(v) - lam * v))
    return r / abs(lam) if lam != 0 else r


def _asymmetry(op: HessianOperator, u: np.ndarray) -> float:
    """|⟨u, H·(H·u)⟩ − ‖H·u‖²| / ‖H·u‖²: 0 for a symmetric H (rounding: ~1e-8 in float32); two products."""
    hu = op(u)
    sq = float(hu @ hu)
    return abs(float(u @ op(hu)) - sq) / sq if sq > 0 else 0.0


class _RitzTracker:
    """Rayleigh–Ritz on everything a Lanczos run has multiplied, in bounded memory.

    Keeps (v, H·v) pairs; when ``capacity`` more have come, they are compressed to the ``keep``
    Ritz pairs at each end of the spectrum (their images are the same combinations of the kept
    H·v: no product). The span always holds the best Ritz vectors so far, so the estimates only
    improve, from inside the spectrum: λ̂_max ≤ λ_max, λ̂_min ≥ λ_min (Courant–Fischer).
    ARPACK's own restarts keep new vectors orthogonal to its current Ritz vectors, so the last
    few products alone can miss the extreme eigenvalue entirely.
    """

    def __init__(self, capacity: int, keep: int = 2) -> None:
        self.capacity, self.keep = capacity, keep
        self.v: list[np.ndarray] = []
        self.hv: list[np.ndarray] = []

    def add(self, v: np.ndarray, hv: np.ndarray) -> None:
        self.v.append(v)
        self.hv.append(hv)
        if len(self.v) >= self.capacity + 2 * self.keep:
            _, y, hy = self.ritz()
            r = y.shape[1]
            ends = sorted({*range(min(self.keep, r)), *range(max(r - self.keep, 0), r)})
            self.v, self.hv = list(y[:, ends].T), list(hy[:, ends].T)

    def ritz(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(θ ascending, Ritz vectors Y, H·Y) of H on the span of the kept vectors."""
        v, hv = np.stack(self.v, 1), np.stack(self.hv, 1)
        u, s, wt = np.linalg.svd(v, full_matrices=False)  # orthonormal basis of the span, rank-revealing
        rank = s > s[0] * 1e-10
        q, hq = u[:, rank], hv @ (wt[rank].T / s[rank])
        t = q.T @ hq
        theta, z = np.linalg.eigh((t + t.T) / 2)
        return theta, q @ z, hq @ z

    def extremes(self) -> tuple[float, np.ndarray, float, np.ndarray]:
        theta, y, _ = self.ritz()
        return float(theta[-1]), y[:, -1], float(theta[0]), y[:, 0]


def _lanczos_extremes(
    op: HessianOperator, v0: np.ndarray, max_products: int, tol: float, ncv: int
) -> tuple[float, np.ndarray, float, np.ndarray]:
    """(λ_max, v_max, λ_min, v_min) from one Lanczos run over both ends of the spectrum: ARPACK's
    if it converged within ``max_products``, else the Rayleigh–Ritz pairs of all it multiplied."""
    from scipy.sparse.linalg import ArpackError, LinearOperator, eigsh  # here: `normbench --help` needs no scipy

    start = op.products
    seen = _RitzTracker(ncv)

    def matvec(x: np.ndarray) -> np.ndarray:
        if op.products - start >= max_products:
            raise _BudgetExhausted
        x = np.array(x, dtype=np.float64).reshape(-1)  # a copy: ARPACK hands a view of its work array
        hx = op(x)
        seen.add(x, hx)
        return hx

    linear = LinearOperator((op.size, op.size), matvec=matvec, dtype=np.float64)
    try:  # k = 2 at "BE": one eigenvalue from each end, one Krylov space for both
        vals, vecs = eigsh(linear, k=2, which="BE", v0=v0, ncv=ncv, tol=tol, maxiter=max_products)
    except (_BudgetExhausted, ArpackError):
        return seen.extremes()
    hi, lo = int(np.argmax(vals)), int(np.argmin(vals))
    return float(vals[hi]), vecs[:, hi], float(vals[lo]), vecs[:, lo]


def _dense_extremes(op: HessianOperator) -> tuple[float, np.ndarray, float, np.ndarray]:
    """Tiny Hessians (n ≤ ncv, below what ARPACK accepts): H formed column by column, n products."""
    h = np.stack([op(e) for e in np.eye(op.size)], 1)
    theta, z = np.linalg.eigh((h + h.T) / 2)
    return float(theta[-1]), z[:, -1], float(theta[0]), z[:, 0]


def hessian_extremes(
    loss_fn: Callable[[], Tensor],
    params: Sequence[Tensor],
    *,
    max_products: int = 100,
    tol: float = 1e-3,
    ncv: int = 20,
    trace_probes: int = 0,
    generator: torch.Generator | None = None,
) -> HessianSpectrum:
    """λ_max, λ_min (and optionally tr H) of the Hessian of ``loss_fn()`` in ``params``.

    ``loss_fn`` is called once; every product goes through that graph. Lanczos keeps ``ncv``
    basis vectors and stops at the relative residual ``tol`` (ARPACK's estimate) or after
    ``max_products`` products; one more product per eigenvalue measures its residual, two the
    asymmetry. Hessians with at most ``ncv`` rows are formed whole (one product a column).
    ``trace_probes`` Rademacher probes estimate tr H. The start vector (standard normal), the
    asymmetry's vector and the probes are drawn from ``generator`` (CPU), in that order.
    """
    if ncv < 3:
        raise ValueError(f"ncv={ncv} must be >= 3 (two eigenvalues + 1)")
    if tol <= 0:
        raise ValueError(f"tol={tol} must be > 0")
    op = HessianOperator(loss_fn(), params)
    if op.zero:
        return HessianSpectrum(0.0, 0.0, 0.0, 0.0, 0.0, 0, True, 0.0 if trace_probes else float("nan"))
    v0 = torch.randn(op.size, generator=generator, dtype=torch.float64).numpy()
    if op.size <= ncv:
        lam_max, v_max, lam_min, v_min = _dense_extremes(op)
    else:
        lam_max, v_max, lam_min, v_min = _lanczos_extremes(op, v0, max_products, tol, ncv)
    v_max, v_min = v_max / np.linalg.norm(v_max), v_min / np.linalg.norm(v_min)
    res_max, res_min = _residual(op, lam_max, v_max), _residual(op, lam_min, v_min)
    asym = _asymmetry(op, torch.randn(op.size, generator=generator, dtype=torch.float64).numpy())
    converged = max(res_max, res_min, asym) <= tol
    trace = stderr = float("nan")
    if trace_probes > 0:
        z = torch.randint(0, 2, (trace_probes, op.size), generator=generator, dtype=torch.float64).numpy() * 2 - 1
        quad = np.array([zi @ op(zi) for zi in z])
        trace = float(quad.mean())
        stderr = float(quad.std(ddof=1) / np.sqrt(trace_probes)) if trace_probes > 1 else float("nan")
    return HessianSpectrum(
        lam_max, lam_min, res_max, res_min, asym, op.products, converged, trace, stderr, v_max, v_min
    )


@dataclass
class HessianConfig(CadenceConfig):
    max_products: int = 100
    """Hessian-vector products at most for the Lanczos run (both eigenvalues); 4 more measure the
    residuals and the asymmetry. A run that needs more reports ``converged = 0``."""
    tol: float = 1e-3
    """Lanczos stops when its estimate of ‖H·v − λ·v‖ is at most tol·|λ|; ``converged`` needs the
    measured residuals and the asymmetry at most tol."""
    ncv: int = 20
    """Lanczos basis vectors kept between restarts (memory: about 3·ncv float64 copies of θ, on
    the CPU: ARPACK's basis and the capped run's Rayleigh–Ritz pairs)."""
    trace_probes: int = 0
    """Rademacher probes for Hutchinson's tr H (0: no trace; one product each)."""
    seed: int = 0
    """Seed of the start vector and probes (drawn afresh each time from seed + step)."""

    def check(self, name: str) -> None:
        super().check(name)
        if self.max_products < 1:
            raise ConfigError(f"diagnostics.{name}.max_products={self.max_products} must be >= 1")
        if self.tol <= 0:
            raise ConfigError(f"diagnostics.{name}.tol={self.tol} must be > 0")
        if self.ncv < 3:
            raise ConfigError(f"diagnostics.{name}.ncv={self.ncv} must be >= 3 (two eigenvalues + 1)")
        if self.trace_probes < 0:
            raise ConfigError(f"diagnostics.{name}.trace_probes={self.trace_probes} must be >= 0")


def _math_attention() -> contextlib.AbstractContextManager:
    """Fused attention kernels have no double backward; SDPA's math kernel has (the norms are
    torch ops, twice differentiable, and need no switch)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover  (older torch)
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


@register_diagnostic("hessian", HessianConfig)
class HessianHook(DiagnosticHook):
    """Logs ``lambda_max``, ``lambda_min``, ``residual_max``, ``residual_min``, ``asymmetry``,
    ``products``, ``converged`` (0/1) and, with ``trace_probes``, ``trace`` and ``trace_stderr``.
    In float32 whatever the training precision."""

    needs_fp32 = True

    def __call__(self, ctx: DiagContext) -> dict[str, float]:
        cfg: HessianConfig = self.cfg  # type: ignore[assignment]
        params = [p for p in ctx.model.parameters() if p.requires_grad]
        generator = torch.Generator().manual_seed(cfg.seed + ctx.step)
        try:
            with _math_attention():
                spectrum = hessian_extremes(
                    ctx.closure(),
                    params,
                    max_products=cfg.max_products,
                    tol=cfg.tol,
                    ncv=cfg.ncv,
                    trace_probes=cfg.trace_probes,
                    generator=generator,
                )
        except RuntimeError as e:
            if "differentiat" not in str(e) and "double backward" not in str(e):
                raise
            raise ConfigError(
                f"diagnostics.hessian needs a twice-differentiable model (Hessian-vector products), but: "
                f"{str(e).splitlines()[0]}"
            ) from None
        out = spectrum.metrics()
        if not cfg.trace_probes:
            del out["trace"], out["trace_stderr"]
        return out
