"""hessian: the top eigenvalue by power iteration against known spectra."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.hessian import top_eigenvalue
from tests.diagnostics.common import Quadratic, context, quadratic_loss, spd_matrix


def test_top_eigenvalue_of_a_quadratic_is_the_largest_eigenvalue_of_a() -> None:
    a = spd_matrix([7.0, 3.0, 1.0, 0.2])
    theta = torch.randn(4, dtype=torch.float64, requires_grad=True)
    lam, used = top_eigenvalue(
        lambda: 0.5 * theta @ a @ theta, [theta], iterations=200, tol=1e-14, generator=torch.Generator().manual_seed(1)
    )
    assert lam == pytest.approx(7.0, rel=1e-10)
    assert used < 200  # stopped on the tolerance


def test_top_eigenvalue_matches_the_explicit_hessian_of_a_small_network() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(32, 3, dtype=torch.float64), torch.randn(32, 1, dtype=torch.float64)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()
    params = list(net.parameters())
    sizes = [p.numel() for p in params]

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        chunks = torch.split(flat, sizes)
        w1, b1, w2, b2 = (c.view_as(p) for c, p in zip(chunks, params))
        return (torch.tanh(x @ w1.T + b1) @ w2.T + b2 - y).pow(2).mean()

    flat = torch.cat([p.detach().reshape(-1) for p in params])
    eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of, flat))
    want = eigenvalues[eigenvalues.abs().argmax()]
    lam, _ = top_eigenvalue(lambda: (net(x) - y).pow(2).mean(), params, 500, 1e-13, torch.Generator().manual_seed(0))
    assert lam == pytest.approx(float(want), rel=1e-6)


def test_hook_logs_the_eigenvalue_and_draws_no_global_random_numbers() -> None:
    (hook,) = build_diagnostics({"hessian": {"every_n_steps": 1, "iterations": 100, "tol": 1e-12}})
    model = Quadratic(spd_matrix([4.0, 2.0, 1.0]), torch.ones(3, dtype=torch.float64))
    before = torch.get_rng_state()
    out = hook(context(model, None, quadratic_loss))
    assert torch.equal(torch.get_rng_state(), before)
    assert out["top_eigenvalue"] == pytest.approx(4.0, rel=1e-8)
    assert run_hooks([hook], context(model, None, quadratic_loss))["diag/hessian/top_eigenvalue"] == pytest.approx(
        4.0, rel=1e-8
    )
