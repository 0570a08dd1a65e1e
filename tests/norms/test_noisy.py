"""The noise of Santurkar et al. 2018 (``bn_noisy``, ``noise_only``): its distributions, one draw
per sample and channel, none in evaluation, repeatable under a seed."""

from __future__ import annotations

import pytest
import torch

from normbench.norms import build_norm
from normbench.norms.batch_functional import santurkar_noise

N_MU, N_SIGMA, R_MU, R_SIGMA = 0.5, 1.25, 0.1, 0.1


@pytest.mark.parametrize("cpu_kernels", ["1", "0"])  # uniforms from Philox / from torch's generator
def test_draws_follow_the_specified_distributions(cpu_kernels: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMBENCH_CPU_KERNELS", cpu_kernels)
    g = torch.Generator().manual_seed(0)
    units_mu, units_sigma = [], []
    for _ in range(40):  # steps
        m, s = santurkar_noise(4000, 32, N_MU, N_SIGMA, R_MU, R_SIGMA, generator=g)
        lo, hi = m.min(0).values, m.max(0).values
        # per sample: m_ij ~ U(μ_j − r_μ, μ_j + r_μ): range 2·r_μ, centre μ_j
        assert torch.allclose(hi - lo, torch.full_like(hi, 2 * R_MU), atol=0.002)
        # s_ij ~ N(σ_j, r_σ): standard deviation r_σ about σ_j
        assert torch.allclose(s.std(0), torch.full((32,), R_SIGMA, dtype=s.dtype), atol=0.01)
        units_mu.append((hi + lo) / 2)
        units_sigma.append(s.mean(0))
    mu, sigma = torch.cat(units_mu), torch.cat(units_sigma)
    # per unit: μ_j ~ U(−n_μ, n_μ), σ_j ~ U(1, n_σ) (1280 draws each)
    assert len({float(v) for v in mu}) == mu.numel()  # a fresh draw of every unit at every step
    assert mu.min() > -N_MU - 0.01 and mu.max() < N_MU + 0.01 and mu.max() - mu.min() > 2 * N_MU - 0.05
    assert abs(float(mu.mean())) < 0.03 and abs(float(mu.var()) - (2 * N_MU) ** 2 / 12) < 0.01
    assert sigma.min() > 1 - 0.01 and sigma.max() < N_SIGMA + 0.01
    assert abs(float(sigma.mean()) - (1 + N_SIGMA) / 2) < 0.01


def test_noise_only_is_one_draw_per_sample_and_channel() -> None:
    m = build_norm("noise_only", 6, "NCHW").double()
    x = torch.ones(5, 6, 3, 4, dtype=torch.float64) * 2
    y = m(x)
    shift, scale = m.last_noise
    torch.testing.assert_close(y, (2 * scale + shift)[:, :, None, None].expand_as(y), atol=1e-12, rtol=0)
    assert list(m.parameters()) == []


def test_no_noise_in_eval_and_seeded_runs_repeat() -> None:
    x = torch.randn(4, 5, 6, dtype=torch.float64)
    m = build_norm("bn_noisy", 6, "NTC").double()
    outs = []
    for _ in range(2):
        torch.manual_seed(123)
        outs.append(m(x))
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    assert not torch.allclose(outs[0], m(x))  # a fresh draw at each step
    m.eval()
    plain = build_norm("bn", 6, "NTC").double()
    plain.load_state_dict(m.state_dict())
    plain.eval()
    torch.testing.assert_close(m(x), plain(x), atol=0, rtol=0)
