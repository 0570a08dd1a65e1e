"""grad_variance on linear regression with known noise: closed-form variance of the gradient.

x ~ N(0, I_d), y = xᵀw* + ε, ε ~ N(0, σ²), L = ½·mean((xᵀw − y)²). A sample's gradient is
x(xᵀδ) − xε with δ = w − w*; its covariance has trace V = (d + 1)·‖δ‖² + d·σ² (Gaussian fourth
moments: E[(xᵀδ)²‖x‖²] = (d + 2)‖δ‖²), so a B-sample mean gradient has total variance V/B, which
the unbiased 1/(K − 1)·Σ‖g_k − ḡ‖² over K batches has as its expectation.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normbench.base.errors import ConfigError
from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.grad_variance import gradient_variance, per_sample_gradient_variance
from tests.diagnostics.common import TinyNet, context, task_loss, tiny_task

D, SIGMA = 5, 0.5
W_STAR = torch.linspace(-1, 1, D, dtype=torch.float64)
DELTA = torch.tensor([0.6, 0.0, -0.8, 0.0, 0.0], dtype=torch.float64)  # ‖δ‖ = 1
V = (D + 1) * float(DELTA @ DELTA) + D * SIGMA**2


def draw(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, D, generator=g, dtype=torch.float64)
    return x, x @ W_STAR + SIGMA * torch.randn(n, generator=g, dtype=torch.float64)


def regression_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return 0.5 * (model(x).squeeze(-1) - y).pow(2).mean()


def regression_model() -> nn.Module:
    model = nn.Linear(D, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_((W_STAR + DELTA)[None])
    return model


def test_batch_gradient_variance_matches_the_closed_form() -> None:
    k, b = 8000, 32
    g = torch.Generator().manual_seed(0)
    batches = [draw(b, g) for _ in range(k)]
    model = regression_model()
    out = gradient_variance(lambda batch: regression_loss(model, batch), [model.weight], batches)
    # the same gradients by hand, two-pass: the streaming sums must agree to rounding
    w = model.weight.detach()[0]
    grads = torch.stack([x.T @ (x @ w - y) / b for x, y in batches])
    dev = (grads - grads.mean(0)).pow(2).sum(1)
    assert out["total"] == pytest.approx(float(dev.sum() / (k - 1)), rel=1e-10)
    assert out["relative"] == pytest.approx(float(dev.sum() / (k - 1) / grads.mean(0).pow(2).sum()), rel=1e-10)
    # against the closed form, within 4 standard errors of the estimate
    want = V / b
    tolerance = 4 * float(dev.std()) / math.sqrt(k)
    assert abs(out["total"] - want) < tolerance, (out["total"], want, tolerance)
    assert tolerance < 0.04 * want  # the check is tight enough to mean something
    assert out["relative"] == pytest.approx(want / float(DELTA @ DELTA), rel=0.1)


def test_per_sample_gradient_variance_matches_the_closed_form() -> None:
    n = 10000
    x, y = draw(n, torch.Generator().manual_seed(1))
    model = regression_model()
    out = per_sample_gradient_variance(model, regression_loss, (x, y))
    w = model.weight.detach()[0]
    per = x * (x @ w - y)[:, None]  # (n, D) per-sample gradients by hand
    dev = (per - per.mean(0)).pow(2).sum(1)
    assert out["per_sample_total"] == pytest.approx(float(dev.sum() / (n - 1)), rel=1e-10)
    assert out["total"] == pytest.approx(float(dev.sum() / (n - 1)) / n, rel=1e-10)
    tolerance = 4 * float(dev.std()) / math.sqrt(n)
    assert abs(out["per_sample_total"] - V) < tolerance < 0.1 * V


def test_small_k_is_the_unbiased_sample_variance_of_hand_computed_gradients() -> None:
    """K = 3 batches of 2 samples: Σ over coordinates of torch.var (correction 1) of the gradients
    written out by hand, x(xᵀw − y)/B per batch; the biased 1/K estimate would be 1/3 lower."""
    x = torch.tensor([[1.0, 0.0, 2.0, -1.0, 0.5], [0.0, 1.0, -1.0, 0.0, 1.0]], dtype=torch.float64)
    batches = [(x * c, torch.tensor([0.5, -1.0], dtype=torch.float64) * c) for c in (1.0, -2.0, 0.5)]
    model = regression_model()
    w = model.weight.detach()[0]
    grads = torch.stack([xb.T @ (xb @ w - yb) / 2 for xb, yb in batches])  # (K, D)
    want = float(torch.var(grads, dim=0, correction=1).sum())
    out = gradient_variance(lambda batch: regression_loss(model, batch), [model.weight], batches)
    assert out["total"] == pytest.approx(want, rel=1e-12)
    assert out["total"] == pytest.approx(1.5 * float(torch.var(grads, dim=0, correction=0).sum()), rel=1e-12)
    assert out["grad_sq_norm"] == pytest.approx(float(grads.mean(0).pow(2).sum()), rel=1e-12)


def test_per_sample_refuses_batch_statistic_norms_and_says_why() -> None:
    with pytest.raises(ConfigError, match="depends on the whole batch.*method=batches"):
        per_sample_gradient_variance(TinyNet("bn"), lambda m, b: m(b[0]).sum(), (torch.zeros(2, 3, 8, 8),))
    (hook,) = build_diagnostics({"grad_variance": {"every_n_steps": 1, "method": "per_sample"}})
    with pytest.raises(ConfigError, match="norm1"):
        hook.setup(TinyNet("bn"))


@pytest.mark.parametrize("method", ["batches", "per_sample"])
def test_hook_logs_totals_and_per_layer_values(method: str) -> None:
    task = tiny_task()
    model = TinyNet("gn" if method == "per_sample" else "bn", dropout=0.0)
    (hook,) = build_diagnostics({"grad_variance": {"every_n_steps": 1, "num_batches": 3, "method": method}})
    hook.setup(model)
    batch = next(task.train_batches(0, torch.Generator().manual_seed(0)))
    out = run_hooks([hook], context(model, batch, task_loss(task), task=task))
    layers = ("conv", "norm1", "fc")
    assert sum(out[f"grad_variance/{name}/total"] for name in layers) == pytest.approx(
        out["grad_variance/total"], rel=1e-9
    )
    assert out["grad_variance/relative"] == pytest.approx(
        out["grad_variance/total"] / out["grad_variance/grad_sq_norm"], rel=1e-12
    )
