"""Norms with batch statistics: BatchNorm, Batch Renormalization, noisy BatchNorm, and the
noise of Santurkar et al. 2018 on its own.

Statistics are per channel over N×H×W positions (``NCHW``) or over the N×T real tokens
(``NTC`` with a mask, as Shen et al. 2020 do for Transformers). Outputs at padding positions
are 0 and carry no gradient. The maths lives in `normbench.norms.batch_functional`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.errors import ConfigError
from normbench.norms import batch_functional as BF
from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm

EVAL_STATS = ("running", "population")


@dataclass
class BatchNormConfig(NormConfig):
    name: str = "bn"
    momentum: float = 0.1
    sync: bool = False
    """All-reduce the statistics across processes when torch.distributed is initialized."""
    eval_stats: str = "running"
    """``running``: the EMA estimates; ``population``: exact statistics of ``population_batches``
    training batches, recomputed before each evaluation (`normbench.norms.population`)."""
    population_batches: int = 50


def _differentiable_all_reduce() -> BF.AllReduce | None:
    """A differentiable sum over the default process group, or None when not distributed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    from torch.distributed.nn.functional import all_reduce

    return all_reduce


@register_norm("bn", BatchNormConfig)
class BatchNorm(Norm):
    """BatchNorm (Ioffe & Szegedy 2015): per channel, over the batch axes.

    Training: y = (x − μ_B) / sqrt(σ²_B + eps) · γ + β with the batch mean and the biased batch
    variance over real positions (eps inside the square root; eps = 0 is allowed). The running
    estimates are EMAs with ``momentum``; the running variance is updated with the unbiased
    batch variance n/(n−1)·σ²_B (as torch does). Evaluation: the running estimates, or with
    ``eval_stats="population"`` the buffers ``population_mean`` / ``population_var`` that
    `normbench.norms.population.refresh_population_stats` fills before each evaluation.

    ``sync=True``: when torch.distributed is initialized, count, sum and sum of squares are
    all-reduced with a differentiable all-reduce (CPU/gloo and CUDA, with masks), so every
    process normalizes with the statistics of the whole global batch and gets the gradients of
    the single-process computation.

    Diagnostics: with ``record_stats = True`` each training forward keeps
    ``last_stats = {"mean": μ_B, "var": σ²_B}`` (detached), from whichever kernel runs (no extra
    pass, no change to the numbers). With ``record_live_stats = True`` it also keeps
    ``last_stats_live``, the same tensors still in the autograd graph (call ``retain_grad()`` on
    them before ``backward`` to read ∂L/∂σ²_B); that switches to the differentiable-ops
    implementation (slower, same maths, and twice differentiable: Hessian-vector products).
    """

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.1,
        sync: bool = False,
        eval_stats: str = "running",
        population_batches: int = 50,
        **kw,
    ) -> None:
        if eval_stats not in EVAL_STATS:
            raise ConfigError(f"norm.eval_stats={eval_stats!r} is unknown; valid choices: {', '.join(EVAL_STATS)}")
        if population_batches <= 0:
            raise ConfigError(f"norm.population_batches={population_batches} must be positive")
        super().__init__(num_features, **kw)
        self.momentum = momentum
        self.sync = sync
        self.eval_stats = eval_stats
        self.population_batches = population_batches
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        if eval_stats == "population":
            self.register_buffer("population_mean", torch.zeros(num_features))
            self.register_buffer("population_var", torch.ones(num_features))
            self.register_buffer("population_count", torch.tensor(0.0, dtype=torch.float64))
        self.record_stats = False
        self.record_live_stats = False
        self.last_stats: dict[str, Tensor] | None = None
        self.last_stats_live: dict[str, Tensor] | None = None
        self.population_sums: list[Tensor] | None = None
        """Set by `normbench.norms.population`: [Σn, Σn·μ_B, Σn·σ²_B, Σ(n − 1)] over batches."""

    def renorm(self) -> BF.Renorm | None:
        """Batch Renormalization's correction for this step (None: plain BatchNorm)."""
        return None

    def sample_noise(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """Per-sample (s, m), each (N, C), applied as y·s + m after the affine (None: no noise)."""
        return None

    def _use_torch_kernel(self, x: Tensor, mask: Tensor | None) -> bool:
        # cuDNN's fused kernel is faster on CUDA; on the CPU our own pass is (scripts/bench_norms.py).
        plain = type(self).renorm is BatchNorm.renorm and type(self).sample_noise is BatchNorm.sample_noise
        return x.is_cuda and mask is None and self.eps > 0 and plain

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if not self.training:
            return self._normalize_fixed(x, mask)
        self.num_batches_tracked.add_(1)
        xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
        y, mean, var, n = self._normalize_batch(xf, mask)
        if self.record_stats:
            self.last_stats = {"mean": mean.detach(), "var": var.detach()}
        self._update_running(mean, var, n)
        return y.to(x.dtype)

    def _normalize_batch(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x3 = NF.as_acl(x, self.layout)  # (A, C, L)
        if x3.shape[0] * x3.shape[2] < 2:
            raise ValueError(f"BatchNorm needs more than 1 value per channel in training, got input {tuple(x.shape)}")
        w = NF.acl_weights(mask, x.dtype)
        all_reduce = _differentiable_all_reduce() if self.sync else None
        renorm = self.renorm()
        noise = self.sample_noise(x)
        if all_reduce is not None or self.record_live_stats:
            y3, mean, var, n = BF.batch_norm_composed(
                x3, w, self.weight, self.bias, self.eps, renorm, all_reduce, shift=self.running_mean
            )
            if noise is not None:
                y3 = BF.sample_affine(y3, w, *noise)
            if self.record_live_stats:
                self.last_stats_live = {"mean": mean, "var": var}
            return y3.reshape(x.shape), mean.detach(), var.detach(), n.detach()
        if self._use_torch_kernel(x, mask):
            var, mean = torch.var_mean(x3.detach(), (0, 2), correction=0)
            y = F.batch_norm(x3, None, None, self.weight, self.bias, True, 0.0, self.eps)
            return y.reshape(x.shape), mean, var, BF.real_count(x3, w)
        y3, mean, var = BF.batch_norm_fused(x3, w, self.weight, self.bias, self.eps, renorm, noise)
        return y3.reshape(x.shape), mean, var, BF.real_count(x3, w)

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, n: Tensor) -> None:
        if self.population_sums is not None:
            for acc, v in zip(self.population_sums, (n, n * mean, n * var, n - 1)):
                acc.add_(v.to(acc.dtype))
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
        self.running_var.lerp_((var * (n / (n - 1))).to(self.running_var.dtype), self.momentum)

    def eval_statistics(self) -> tuple[Tensor, Tensor]:
        """(mean, variance) used in evaluation."""
        if self.eval_stats == "population":
            if float(self.population_count) == 0:
                raise RuntimeError(
                    "norm eval_stats=population but no population statistics were computed; call "
                    "normbench.norms.population.refresh_population_stats before evaluating"
                )
            return self.population_mean, self.population_var
        return self.running_mean, self.running_var

    def _normalize_fixed(self, x: Tensor, mask: Tensor | None) -> Tensor:
        mean, var = self.eval_statistics()
        scale = torch.rsqrt(var + self.eps)
        if self.weight is not None:
            scale = scale * self.weight
        shift = -mean * scale
        if self.bias is not None:
            shift = shift + self.bias
        x3 = NF.as_acl(x, self.layout)
        y = torch.addcmul(shift[:, None].to(x.dtype), x3, scale[:, None].to(x.dtype))
        if mask is not None:
            y = y * NF.acl_weights(mask, y.dtype)
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        extra = ", sync=True" if self.sync else ""
        return f"{super().extra_repr()}, momentum={self.momentum}, eval_stats={self.eval_stats}{extra}"


@dataclass
class BatchRenormConfig(BatchNormConfig):
    name: str = "brn"
    momentum: float = 0.01
    r_max: float = 3.0
    d_max: float = 5.0
    warmup_steps: int = 5000
    """Plain BatchNorm (r_max = 1, d_max = 0) for this many training steps."""
    r_max_steps: int = 40000
    """r_max grows linearly from 1 after the warm-up to its final value at this step."""
    d_max_steps: int = 25000
    """d_max grows linearly from 0 after the warm-up to its final value at this step."""


@register_norm("brn", BatchRenormConfig)
class BatchRenorm(BatchNorm):
    """Batch Renormalization (Ioffe 2017), a small-batch remedy beside GroupNorm.

    Training: y = γ·((x − μ_B)/σ_B · r + d) + β with σ_B = sqrt(σ²_B + eps),
    r = clip(σ_B/σ, 1/r_max, r_max), d = clip((μ_B − μ)/σ, −d_max, d_max), σ = sqrt(running
    variance + eps), μ the running mean, both taken before this step's update; r and d are
    constants for the backward. Evaluation: (x − μ)/σ·γ + β, as BatchNorm. The running
    estimates are EMAs of μ_B and of the unbiased σ²_B, exactly as in ``bn`` (the paper keeps an
    EMA of σ_B; the variance EMA makes ``brn`` with r_max = 1, d_max = 0 equal to ``bn``, also in
    evaluation). Schedule of the paper's experiments: plain BatchNorm for 5000 steps, then r_max
    grows linearly to 3 at step 40k and d_max to 5 at step 25k.
    """

    def __init__(
        self,
        num_features: int,
        *,
        r_max: float = 3.0,
        d_max: float = 5.0,
        warmup_steps: int = 5000,
        r_max_steps: int = 40000,
        d_max_steps: int = 25000,
        momentum: float = 0.01,
        **kw,
    ) -> None:
        if r_max < 1 or d_max < 0:
            raise ConfigError(f"norm.r_max={r_max} must be >= 1 and norm.d_max={d_max} >= 0")
        super().__init__(num_features, momentum=momentum, **kw)
        self.r_max, self.d_max = r_max, d_max
        self.warmup_steps, self.r_max_steps, self.d_max_steps = warmup_steps, r_max_steps, d_max_steps

    def limits(self, step: int) -> tuple[float, float]:
        """(r_max, d_max) at training step ``step`` (1-based) of the schedule."""

        def ramp(end: int) -> float:
            if step <= self.warmup_steps:
                return 0.0
            return min((step - self.warmup_steps) / max(end - self.warmup_steps, 1), 1.0)

        return 1 + (self.r_max - 1) * ramp(self.r_max_steps), self.d_max * ramp(self.d_max_steps)

    def renorm(self) -> BF.Renorm:
        r_max, d_max = self.limits(int(self.num_batches_tracked))
        return BF.Renorm(self.running_mean.clone(), self.running_var.clone(), r_max, d_max)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, r_max={self.r_max}, d_max={self.d_max}"


@dataclass
class NoiseConfig(NormConfig):
    name: str = "noise_only"
    n_mu: float = 0.5
    n_sigma: float = 1.25
    r_mu: float = 0.1
    r_sigma: float = 0.1


class SanturkarNoise:
    """Mixin: the distributional noise of Santurkar et al. 2018 (Appendix A.2.1, Algorithm 1)."""

    n_mu: float
    n_sigma: float
    r_mu: float
    r_sigma: float
    layout: str

    def _set_noise(self, n_mu: float, n_sigma: float, r_mu: float, r_sigma: float) -> None:
        if n_sigma < 1 or min(n_mu, r_mu, r_sigma) < 0:
            raise ConfigError(
                f"noise parameters n_mu={n_mu}, n_sigma={n_sigma}, r_mu={r_mu}, r_sigma={r_sigma}: "
                "need n_sigma >= 1 and n_mu, r_mu, r_sigma >= 0"
            )
        self.n_mu, self.n_sigma, self.r_mu, self.r_sigma = n_mu, n_sigma, r_mu, r_sigma
        self.last_noise: tuple[Tensor, Tensor] | None = None

    def draw_noise(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """A fresh (s, m), each (N, C) in ``x``'s dtype and device; kept as ``last_noise`` = (m, s)."""
        c = x.shape[NF.channel_dim(self.layout)]
        m, s = BF.santurkar_noise(x.shape[0], c, self.n_mu, self.n_sigma, self.r_mu, self.r_sigma)
        s, m = s.to(x.device, x.dtype), m.to(x.device, x.dtype)
        self.last_noise = (m, s)
        return s, m


@dataclass
class NoisyBatchNormConfig(BatchNormConfig):
    name: str = "bn_noisy"
    n_mu: float = 0.5
    n_sigma: float = 1.25
    r_mu: float = 0.1
    r_sigma: float = 0.1


@register_norm("bn_noisy", NoisyBatchNormConfig)
class NoisyBatchNorm(SanturkarNoise, BatchNorm):
    """BatchNorm followed, in training only, by the noise of Santurkar et al. 2018 (Appendix
    A.2.1, Algorithm 1), after the affine: at each step, per channel j, μ_j ~ U(−n_μ, n_μ) and
    σ_j ~ U(1, n_σ); per sample i and channel j, m_ij ~ U(μ_j − r_μ, μ_j + r_μ) and
    s_ij ~ N(σ_j, r_σ) — r_σ taken as a standard deviation, which the paper leaves open; output
    s_ij·a_ij + m_ij. In conv layers H and W count as batch axes (one draw per sample and
    channel), in sequences T does. Draws come from torch's global CPU generator (seeded runs
    repeat). Evaluation: plain BatchNorm, no noise. ``last_noise`` holds the last (m, s).
    """

    def __init__(
        self,
        num_features: int,
        *,
        n_mu: float = 0.5,
        n_sigma: float = 1.25,
        r_mu: float = 0.1,
        r_sigma: float = 0.1,
        **kw,
    ) -> None:
        super().__init__(num_features, **kw)
        self._set_noise(n_mu, n_sigma, r_mu, r_sigma)

    def sample_noise(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.draw_noise(x)


@register_norm("noise_only", NoiseConfig)
class NoiseOnly(SanturkarNoise, Norm):
    """The noise of ``bn_noisy`` with no BatchNorm before it (training only; identity in
    evaluation; no parameters). Santurkar et al. 2018 report that this noise alone stops a
    network from training, while BatchNorm + noise trains."""

    def __init__(
        self,
        num_features: int,
        *,
        n_mu: float = 0.5,
        n_sigma: float = 1.25,
        r_mu: float = 0.1,
        r_sigma: float = 0.1,
        **kw,
    ) -> None:
        kw["affine"] = False
        super().__init__(num_features, **kw)
        self._set_noise(n_mu, n_sigma, r_mu, r_sigma)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if not self.training:
            return x
        s, m = self.draw_noise(x)
        return BF.sample_affine(NF.as_acl(x, self.layout), NF.acl_weights(mask, x.dtype), s, m).reshape(x.shape)
