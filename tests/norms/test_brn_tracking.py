"""Batch Renorm tracks BatchNorm at batch 128 (issue 56, item 7): with bias-corrected running
averages (``debias``, the default) the running statistics are the batches' own after a few steps,
so when the 16-step warm-up of a 320-step run ends, r and d are small sampling corrections and
BRN's training output stays close to BN's; with the plain EMA (momentum 0.01) 85 % of the 0 / 1
start is still there and d sits at its ramped clip."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.norms import build_norm
from normbench.norms.batch_functional import debiased_momentum

C, N = 4, 128
MEAN, STD = torch.tensor([3.0, -2.0, 0.5, 10.0]), torch.tensor([2.0, 0.5, 1.0, 4.0])
SCHEDULE = {"warmup_steps": 16, "r_max_steps": 128, "d_max_steps": 80}  # a 320-step run's 5 %, 40 %, 25 %


def stationary_batch(step: int) -> Tensor:
    g = torch.Generator().manual_seed(step)
    return torch.randn(N, C, generator=g, dtype=torch.float64) * STD + MEAN


def track(debias: bool, steps: int = 60) -> tuple[list[float], list[tuple[int, Tensor, Tensor, Tensor, Tensor]]]:
    """Per step: RMS of BRN's training output minus BN's (batch statistics) on the same batch, and
    (step, r, d, r_max, d_max) as BRN applied them."""
    brn = build_norm("brn", C, "NCHW", debias=debias, **SCHEDULE).double()
    gaps, corrections = [], []
    for step in range(1, steps + 1):
        x = stationary_batch(step)
        renorm = None
        if step > 1:  # r and d as this step computes them, from the running statistics before it
            brn.num_batches_tracked.add_(1)
            renorm = brn.renorm()
            brn.num_batches_tracked.sub_(1)
        y = brn(x)
        bn = F.batch_norm(x, None, None, brn.weight, brn.bias, True, 0.0, brn.eps)
        gaps.append(float((y - bn).detach().pow(2).mean().sqrt()))
        if renorm is not None:
            r, d = renorm.factors(x.mean(0), x.var(0, unbiased=False), brn.eps)
            corrections.append((step, r, d, renorm.r_max, renorm.d_max))
    return gaps, corrections


def test_brn_output_tracks_bn_from_the_end_of_the_warmup() -> None:
    gaps, _ = track(debias=True)
    assert max(gaps[:16]) < 1e-12  # the warm-up: BatchNorm exactly
    # after it: r − 1 ~ 1/sqrt(2N) = 0.06 and d ~ 1/sqrt(N) = 0.09 of sampling noise, RMS ≈ 0.11
    after = gaps[16:]
    assert sum(after) / len(after) < 0.15 and max(after) < 0.3
    plain, _ = track(debias=False)
    assert sum(plain[16:]) / len(after) > 0.5  # the old EMA: d at its clip, most of the start still held


def test_r_and_d_stay_within_the_ramped_limits() -> None:
    _, corrections = track(debias=True)
    for step, r, d, r_max, d_max in corrections:
        want_r = 1 + 2 * min(max((step - 16) / (128 - 16), 0.0), 1.0)
        want_d = 5 * min(max((step - 16) / (80 - 16), 0.0), 1.0)
        assert float(r_max) == pytest.approx(want_r) and float(d_max) == pytest.approx(want_d), step
        assert bool(((r >= 1 / r_max - 1e-12) & (r <= r_max + 1e-12)).all()), step
        assert bool((d.abs() <= d_max + 1e-12).all()), step
    late = [(r, d) for step, r, d, _, _ in corrections if step > 40]
    assert max(float((r - 1).abs().max()) for r, _ in late) < 0.3  # small corrections, not clips
    assert max(float(d.abs().max()) for _, d in late) < 0.4


def test_running_statistics_are_unbiased_after_a_few_steps() -> None:
    brn = build_norm("brn", C, "NCHW", **SCHEDULE).double()
    xs = [stationary_batch(step) for step in range(1, 6)]
    for x in xs:
        brn(x)
    # the (1 − m)^k-weighted average of the 5 batches' statistics, by hand (m = 0.01)
    weights = torch.tensor([0.99 ** (4 - k) for k in range(5)], dtype=torch.float64)
    weights /= weights.sum()
    want_mean = sum(w * x.mean(0) for w, x in zip(weights, xs))
    want_var = sum(w * x.var(0, unbiased=True) for w, x in zip(weights, xs))
    torch.testing.assert_close(brn.running_mean, want_mean, atol=1e-12, rtol=0)
    torch.testing.assert_close(brn.running_var, want_var, atol=1e-12, rtol=0)
    assert ((brn.running_mean - MEAN).abs() < 4 * STD / (5 * N) ** 0.5).all()  # near the truth
    plain = build_norm("brn", C, "NCHW", debias=False, **SCHEDULE).double()
    for x in xs:
        plain(x)
    torch.testing.assert_close(plain.running_mean, (1 - 0.99**5) * want_mean, atol=0.01, rtol=0)  # 95 % of 0 left


def test_debiased_momentum_is_adams_bias_correction() -> None:
    """Updating in place with m/(1 − (1 − m)^t) gives m_t/(1 − (1 − m)^t) of the zero-started EMA."""
    m, values = 0.1, [2.0, -1.0, 5.0, 0.5]
    running, ema = torch.tensor(7.0, dtype=torch.float64), 0.0  # any start: the first weight is 1
    for t, v in enumerate(values, 1):
        w = debiased_momentum(m, torch.tensor(t))
        running = running + w * (v - running)
        ema = (1 - m) * ema + m * v
        assert float(running) == pytest.approx(ema / (1 - (1 - m) ** t)), t
