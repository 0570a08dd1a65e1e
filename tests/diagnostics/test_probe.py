"""landscape, predictiveness and beta_smoothness against the closed forms of a quadratic loss."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.probe import gradient_step_probe, step_sizes
from tests.diagnostics.common import Quadratic, context, quadratic_loss, spd_matrix

A = spd_matrix([5.0, 3.0, 1.0, 0.5, 0.1])
THETA = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64)


def closed_forms(eta: float) -> tuple[float, float, float]:
    """(L(θ − ηg), ‖∇L(θ) − ∇L(θ − ηg)‖ = η‖Ag‖, ratio ‖Ag‖/‖g‖) for L = ½θᵀAθ, g = Aθ."""
    g = A @ THETA
    moved = THETA - eta * g
    return float(0.5 * moved @ A @ moved), eta * float((A @ g).norm()), float((A @ g).norm() / g.norm())


def test_step_sizes_are_log_spaced_multiples_of_the_lr_and_capped() -> None:
    etas = step_sizes(0.1, 0.5, 4.0, 4)
    assert etas == pytest.approx([0.05, 0.1, 0.2, 0.4])
    assert step_sizes(0.1, 0.5, 4.0, 4, max_step=0.15) == pytest.approx([0.05, 0.1, 0.15])
    assert step_sizes(0.0, 0.5, 4.0, 8) == []
    ratios = [b / a for a, b in zip(etas, etas[1:])]
    assert ratios == pytest.approx([2.0, 2.0, 2.0])


def test_probe_matches_the_quadratic_closed_forms_and_restores_theta() -> None:
    theta = THETA.clone().requires_grad_(True)
    etas = [0.01, 0.05, 0.1]
    probe = gradient_step_probe(lambda: 0.5 * theta @ A @ theta, [theta], etas)
    assert torch.equal(theta.detach(), THETA)
    assert probe.loss == pytest.approx(float(0.5 * THETA @ A @ THETA), rel=1e-12)
    assert probe.grad_norm == pytest.approx(float((A @ THETA).norm()), rel=1e-12)
    for eta, loss, dist, step in zip(etas, probe.losses, probe.grad_dists, probe.step_norms):
        want_loss, want_dist, want_ratio = closed_forms(eta)
        assert loss == pytest.approx(want_loss, rel=1e-12)
        assert dist == pytest.approx(want_dist, rel=1e-10)
        assert dist / step == pytest.approx(want_ratio, rel=1e-10)


def test_hooks_log_the_closed_forms_and_share_one_probe() -> None:
    lr = 0.02
    cfg = {
        name: {"every_n_steps": 1, "min_lr_multiple": 0.5, "max_lr_multiple": 4.0, "num_points": 5}
        for name in ("landscape", "predictiveness", "beta_smoothness")
    }
    hooks = build_diagnostics(cfg)
    model = Quadratic(A, THETA)
    ctx = context(model, None, quadratic_loss, lr=lr)
    calls = []
    loss_fn = ctx.loss_fn
    ctx.loss_fn = lambda m, b: calls.append(1) or loss_fn(m, b)
    out = run_hooks(hooks, ctx)
    etas = step_sizes(lr, 0.5, 4.0, 5)
    losses = [closed_forms(e)[0] for e in etas]
    dists = [closed_forms(e)[1] for e in etas]
    assert out["landscape/loss_min"] == pytest.approx(min(losses), rel=1e-12)
    assert out["landscape/loss_max"] == pytest.approx(max(losses), rel=1e-12)
    assert out["landscape/loss_range"] == pytest.approx(max(losses) - min(losses), rel=1e-9)
    assert out["predictiveness/grad_diff_min"] == pytest.approx(min(dists), rel=1e-10)
    assert out["predictiveness/grad_diff_max"] == pytest.approx(max(dists), rel=1e-10)
    assert out["predictiveness/grad_diff_mean"] == pytest.approx(sum(dists) / len(dists), rel=1e-10)
    assert out["beta_smoothness/beta"] == pytest.approx(closed_forms(1.0)[2], rel=1e-10)
    assert len(calls) == 1 + len(etas)  # one probe (with gradients) served all three
    assert torch.equal(model.theta.detach(), THETA)


def test_landscape_alone_needs_no_gradients_and_lr_zero_logs_nothing() -> None:
    (hook,) = build_diagnostics({"landscape": {"every_n_steps": 1}})
    model = Quadratic(A, THETA)
    out = run_hooks([hook], context(model, None, quadratic_loss, lr=0.01))
    assert math.isfinite(out["landscape/loss_range"])
    assert run_hooks([hook], context(model, None, quadratic_loss, lr=0.0)) == {}
