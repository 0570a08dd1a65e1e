"""The noise of Santurkar et al. 2018 (``bn_noisy``, ``noise_only``; Appendix A.2.1, Algorithm 1):
per unit μ_j ~ U(−n_μ, n_μ), σ_j ~ U(1, n_σ) once per step; per activation (every sample and
position) m ~ U(μ_j − r_μ, μ_j + r_μ), s ~ N(σ_j, r_σ). Its distributions, its structure, none in
evaluation, repeatable under a seed."""

from __future__ import annotations

import pytest
import torch

from normbench.norms import build_norm
from normbench.norms.batch_functional import santurkar_noise

N_MU, N_SIGMA, R_MU, R_SIGMA = 0.5, 1.25, 0.1, 0.1


def test_draws_follow_the_specified_distributions() -> None:
    torch.manual_seed(0)
    x = torch.empty(50, 16, 8, 10)  # 4000 activations per channel
    units_mu, units_sigma = [], []
    for _ in range(40):  # steps
        m, s, mu, sigma = santurkar_noise(x, "NCHW", N_MU, N_SIGMA, R_MU, R_SIGMA)
        m_c, s_c = m.transpose(0, 1).reshape(16, -1), s.transpose(0, 1).reshape(16, -1)
        # per activation: m ~ U(μ_j − r_μ, μ_j + r_μ), s ~ N(σ_j, r_σ) about the step's unit draws
        assert (m_c.min(1).values >= mu - R_MU).all() and (m_c.max(1).values <= mu + R_MU).all()
        assert torch.allclose(m_c.max(1).values - m_c.min(1).values, torch.full((16,), 2 * R_MU), atol=0.002)
        assert torch.allclose(m_c.mean(1), mu, atol=0.005)  # sd of the mean: 0.2/√12/√4000 ≈ 0.0009
        assert torch.allclose(s_c.mean(1), sigma, atol=0.006)  # sd of the mean: 0.1/√4000 ≈ 0.0016
        assert torch.allclose(s_c.std(1), torch.full((16,), R_SIGMA), atol=0.006)
        units_mu.append(mu)
        units_sigma.append(sigma)
    mu, sigma = torch.cat(units_mu), torch.cat(units_sigma)
    # per unit: μ_j ~ U(−n_μ, n_μ), σ_j ~ U(1, n_σ) (640 draws each)
    assert len({float(v) for v in mu}) == mu.numel()  # a fresh draw of every unit at every step
    assert mu.min() >= -N_MU and mu.max() <= N_MU and mu.max() - mu.min() > 2 * N_MU - 0.05
    assert abs(float(mu.mean())) < 0.04 and abs(float(mu.var()) - (2 * N_MU) ** 2 / 12) < 0.012
    assert sigma.min() >= 1 and sigma.max() <= N_SIGMA
    assert abs(float(sigma.mean()) - (1 + N_SIGMA) / 2) < 0.01


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_one_draw_per_activation_sharing_the_units_of_the_step(layout: str) -> None:
    """On a constant input every activation gets its own (m, s): a feature map is not one value
    (as it was with one draw per sample and channel), positions are uncorrelated, and all of a
    channel's draws scatter about the one (μ_j, σ_j) of the step."""
    torch.manual_seed(1)
    m = build_norm("noise_only", 6, layout).double()
    m.record_noise = True
    shape = (64, 6, 8, 8) if layout == "NCHW" else (64, 50, 6)
    y = m(torch.full(shape, 2.0, dtype=torch.float64))
    shift, scale = m.last_noise
    assert shift.shape == scale.shape == y.shape
    torch.testing.assert_close(y, 2 * scale + shift, atol=1e-12, rtol=0)
    per_channel = y.movedim(1 if layout == "NCHW" else -1, 0).reshape(6, 64, -1)  # (C, N, positions)
    assert (per_channel.std(2) > 0.1).all()  # every feature map / sentence varies over its positions
    within = per_channel - per_channel.mean((1, 2), keepdim=True)  # about each channel's (μ_j, σ_j)
    first, second = within[:, :, 0].reshape(-1), within[:, :, 1].reshape(-1)
    assert abs(float(torch.corrcoef(torch.stack([first, second]))[0, 1])) < 0.2  # 384 pairs: sd ≈ 0.05
    mu, sigma = m.last_noise_units
    torch.testing.assert_close(per_channel.mean((1, 2)), 2 * sigma + mu, atol=0.02, rtol=0)
    assert list(m.parameters()) == []


def test_padding_gets_no_noise_and_real_tokens_do() -> None:
    m = build_norm("noise_only", 4, "NTC")
    mask = torch.arange(5)[None] < torch.tensor([5, 2])[:, None]
    y = m(torch.ones(2, 5, 4), mask)
    assert (y[~mask] == 0).all() and (y[mask] != 1).all()


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
