"""The distributional noise of Santurkar et al. 2018 ("How Does Batch Normalization Help
Optimization?", Appendix A.2.1, Algorithm 1): after BatchNorm (``bn_noisy``) or on its own
(``noise_only``), in training only.

At each training step, per unit (channel) j: μ_j ~ U(−n_μ, n_μ), σ_j ~ U(1, n_σ); then per
activation — each sample, and each position, since the paper treats H and W (here also T) as
batch axes — m ~ U(μ_j − r_μ, μ_j + r_μ), s ~ N(σ_j, r_σ) (r_σ a standard deviation, which the
paper leaves open); the output is s·a + m. The draws come from torch's generator of the input's
device (`batch_functional.santurkar_noise`): seeded runs repeat, compiled and eager runs draw the
same stream, and a diagnostic that rewinds the RNG to the step redraws the step's noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from normbench.base.errors import ConfigError, require_in
from normbench.norms import batch_functional as BF
from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.batch import BatchNorm, BatchNormConfig
from normbench.norms.registry import NormConfig, register_norm


@dataclass
class NoiseFields:
    """The noise's settings (Algorithm 1's n_μ, n_σ, r_μ, r_σ), shared by both norms' configs."""

    n_mu: float = 0.5
    """Per unit: μ_j ~ U(−n_mu, n_mu)."""
    n_sigma: float = 1.25
    """Per unit: σ_j ~ U(1, n_sigma)."""
    r_mu: float = 0.1
    """Per sample: m_ij ~ U(μ_j − r_mu, μ_j + r_mu)."""
    r_sigma: float = 0.1
    """Per sample: s_ij ~ N(σ_j, r_sigma), r_sigma a standard deviation."""

    def __post_init__(self) -> None:
        """Checks the noise's keys, then the norm's (the config class after this mixin in the bases)."""
        require_in("norm.n_mu", self.n_mu, "[0, inf)")
        require_in("norm.n_sigma", self.n_sigma, "[1, inf)")
        require_in("norm.r_mu", self.r_mu, "[0, inf)")
        require_in("norm.r_sigma", self.r_sigma, "[0, inf)")
        super().__post_init__()  # type: ignore[misc]


@dataclass
class NoiseConfig(NoiseFields, NormConfig):
    pass


@dataclass
class NoisyBatchNormConfig(NoiseFields, BatchNormConfig):
    pass


class SanturkarNoise:
    """Mixin (before the norm class in the bases): takes the noise's settings, draws the noise and
    keeps what the tests and diagnostics read.

    ``last_noise_units`` = (μ, σ), each (C,), of the last draw; with ``record_noise = True`` also
    ``last_noise`` = (m, s), each of the input's shape (off by default: two full-size tensors)."""

    layout: str

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
        if n_sigma < 1 or min(n_mu, r_mu, r_sigma) < 0:
            raise ConfigError(
                f"noise parameters n_mu={n_mu}, n_sigma={n_sigma}, r_mu={r_mu}, r_sigma={r_sigma}: "
                "need n_sigma >= 1 and n_mu, r_mu, r_sigma >= 0"
            )
        super().__init__(num_features, **kw)  # the norm class after the mixin
        self.n_mu, self.n_sigma, self.r_mu, self.r_sigma = n_mu, n_sigma, r_mu, r_sigma
        self.record_noise = False
        self.last_noise: tuple[Tensor, Tensor] | None = None
        self.last_noise_units: tuple[Tensor, Tensor] | None = None

    def add_noise(self, y: Tensor, w: Tensor | None) -> Tensor:
        """s·y + m with a fresh draw per activation; 0 at padding (weights ``w``)."""
        y = NF.upcast(y)  # bf16 activations: the noise is applied in float32
        m, s, mu, sigma = BF.santurkar_noise(y, self.layout, self.n_mu, self.n_sigma, self.r_mu, self.r_sigma)
        self.last_noise_units = (mu, sigma)
        self.last_noise = (m, s) if self.record_noise else None
        return NF.apply_mask(y * s + m, w)


@register_norm("bn_noisy", NoisyBatchNormConfig)
class NoisyBatchNorm(SanturkarNoise, BatchNorm):
    """BatchNorm, then in training only the noise of Santurkar et al. 2018 after the affine:
    s·BN(x) + m with (m, s) drawn per activation (see the module docstring). Evaluation: plain
    BatchNorm, no noise. Running statistics as ``bn`` (they see no noise)."""

    NORMALIZES_OVER = {
        "NCHW": "N×H×W, per channel, then noise (training)",
        "NTC": "N×T real tokens, per channel, then noise (training)",
    }

    def post_affine(self, y: Tensor, w: Tensor | None) -> Tensor:
        return self.add_noise(y, w)


@register_norm("noise_only", NoiseConfig)
class NoiseOnly(SanturkarNoise, Norm):
    """The noise of ``bn_noisy`` with no BatchNorm before it (training only; identity in
    evaluation; no parameters). Santurkar et al. 2018 report that this noise alone stops a
    network from training, while BatchNorm + noise trains."""

    NORMALIZES_OVER = {"NCHW": "nothing (noise only, in training)", "NTC": "nothing (noise only, in training)"}

    def __init__(self, num_features: int, **kw) -> None:
        kw["affine"] = False
        super().__init__(num_features, **kw)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if not self.training:
            return x
        return self.add_noise(x, NF.token_weights(mask, x.dtype)).to(x.dtype)
