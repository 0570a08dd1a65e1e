"""The probe's ``direction`` (issue 12, point 4) on L(θ) = ½·θᵀAθ − bᵀθ, by hand.

g = Aθ − b. ``gradient``: θ_η = θ − η·g, η = m·lr. ``update``: θ_m = θ + m·Δθ with Δθ the step
the optimizer is about to take, written out by hand for SGD, SGD with momentum (and Nesterov,
weight decay) and Adam/AdamW from their update rules after two earlier steps. Losses,
gradient distances ‖A(θ − θ_s)‖ and β = ‖A·d‖/‖d‖ are the quadratic's closed forms.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor, nn

from normbench.config import as_recorded, parse
from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.probe import step_sizes
from tests.conf.test_compose import compose_cfg
from tests.diagnostics.common import context, spd_matrix

A = spd_matrix([4.0, 2.0, 1.0, 0.5, 0.2], seed=1)
B = torch.tensor([0.3, -1.0, 2.0, 0.0, 0.5], dtype=torch.float64)
THETA0 = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64)
LR = 0.05
MULTIPLES = step_sizes(1.0, 0.5, 4.0, 4)  # [0.5, 1, 2, 4]


class Quadratic(nn.Module):
    def __init__(self, theta: Tensor) -> None:
        super().__init__()
        self.theta = nn.Parameter(theta.clone())


def loss_fn(model: nn.Module, batch: object) -> Tensor:
    return 0.5 * model.theta @ A @ model.theta - B @ model.theta


def value(theta: Tensor) -> float:
    return float(0.5 * theta @ A @ theta - B @ theta)


def grad(theta: Tensor) -> Tensor:
    return A @ theta - B


def sgd_steps(
    theta: Tensor, lr: float, momentum: float, nesterov: bool, wd: float, steps: int
) -> tuple[Tensor, Tensor]:
    """(θ after ``steps`` SGD steps, the step the next one takes), from torch's SGD rule."""
    buf = None
    for t in range(steps + 1):
        g = grad(theta) + wd * theta
        if momentum:
            buf = g.clone() if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        delta = -lr * g
        if t == steps:
            return theta, delta
        theta = theta + delta
    raise AssertionError


def adam_steps(
    theta: Tensor, lr: float, betas: tuple[float, float], eps: float, wd: float, decoupled: bool, steps: int
):
    """(θ after ``steps`` Adam(W) steps, the step the next one takes), from the Adam paper's rule."""
    m = v = torch.zeros_like(theta)
    for t in range(1, steps + 2):
        g = grad(theta) + (0.0 if decoupled else wd * theta)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        delta = -lr * m_hat / (v_hat.sqrt() + eps) - (lr * wd * theta if decoupled else 0.0)
        if t == steps + 1:
            return theta, delta
        theta = theta + delta
    raise AssertionError


def expected(theta: Tensor, direction: Tensor, scales: list[float]) -> dict[str, float]:
    """The hooks' metrics for probe points θ + s·d, by hand."""
    losses = [value(theta + s * direction) for s in scales]
    dists = [s * float((A @ direction).norm()) for s in scales]
    return {
        "landscape/loss": value(theta),
        "landscape/loss_min": min(losses),
        "landscape/loss_max": max(losses),
        "predictiveness/grad_diff_min": min(dists),
        "predictiveness/grad_diff_max": max(dists),
        "predictiveness/grad_diff_mean": sum(dists) / len(dists),
        "beta_smoothness/beta": float((A @ direction).norm() / direction.norm()),
    }


def probe(model: nn.Module, optimizer: torch.optim.Optimizer, direction: str, lr: float = LR) -> dict[str, float]:
    cfg = {"every_n_steps": 1, "min_lr_multiple": 0.5, "max_lr_multiple": 4.0, "num_points": 4, "direction": direction}
    hooks = build_diagnostics(dict.fromkeys(("landscape", "predictiveness", "beta_smoothness"), cfg))
    return run_hooks(hooks, context(model, None, loss_fn, optimizer=optimizer, lr=lr))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(model, None).backward()
        optimizer.step()


def assert_metrics(out: dict[str, float], want: dict[str, float]) -> None:
    for key, v in want.items():
        assert out[key] == pytest.approx(v, rel=1e-9, abs=1e-12), key


def test_gradient_direction_is_theta_minus_eta_g_whatever_the_optimizer() -> None:
    model = Quadratic(THETA0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    train(model, optimizer, 2)
    theta = model.theta.detach().clone()
    out = probe(model, optimizer, "gradient")
    assert_metrics(out, expected(theta, -grad(theta), [m * LR for m in MULTIPLES]))
    assert torch.equal(model.theta.detach(), theta)


def test_update_direction_under_plain_sgd_is_the_gradient_probe() -> None:
    model = Quadratic(THETA0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0)
    theta, delta = sgd_steps(THETA0, LR, 0.0, False, 0.0, 0)
    assert torch.allclose(delta, -LR * grad(theta), rtol=0, atol=0)
    by_update, by_gradient = probe(model, optimizer, "update"), probe(model, optimizer, "gradient")
    assert_metrics(by_update, expected(theta, delta, MULTIPLES))
    assert_metrics(by_update, by_gradient)
    assert by_gradient == probe(model, optimizer, "auto")  # auto: plain SGD probes along the gradient


OPTIMIZERS = {
    "sgd_momentum": (
        lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9),
        lambda: sgd_steps(THETA0, LR, 0.9, False, 0.0, 2),
    ),
    "sgd_nesterov_wd": (
        lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.8, nesterov=True, weight_decay=0.1),
        lambda: sgd_steps(THETA0, LR, 0.8, True, 0.1, 2),
    ),
    "adam": (
        lambda ps: torch.optim.Adam(ps, lr=LR, betas=(0.9, 0.99), eps=1e-8),
        lambda: adam_steps(THETA0, LR, (0.9, 0.99), 1e-8, 0.0, False, 2),
    ),
    "adamw": (
        lambda ps: torch.optim.AdamW(ps, lr=LR, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1),
        lambda: adam_steps(THETA0, LR, (0.8, 0.95), 1e-6, 0.1, True, 2),
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_update_direction_is_the_optimizers_next_step_by_hand(name: str) -> None:
    make, by_hand = OPTIMIZERS[name]
    model = Quadratic(THETA0)
    optimizer = make(model.parameters())
    train(model, optimizer, 2)
    theta, delta = by_hand()
    assert torch.allclose(model.theta.detach(), theta, rtol=1e-12, atol=1e-14)  # the hand rule is torch's
    state_before = copy.deepcopy(optimizer.state_dict())
    out = probe(model, optimizer, "update")
    assert_metrics(out, expected(theta, delta, MULTIPLES))
    assert probe(model, optimizer, "auto") == out  # auto: not plain SGD, so the optimizer's step
    # the step is far from lr·g here: the gradient probe would measure something else
    assert not math.isclose(float(delta.norm()), LR * float(grad(theta).norm()), rel_tol=0.05)
    # the optimizer's state and θ are as before, and the next real step is the one probed
    after = optimizer.state_dict()
    for key, v in state_before["state"][0].items():
        assert torch.equal(torch.as_tensor(v), torch.as_tensor(after["state"][0][key])), key
    train(model, optimizer, 1)
    assert torch.allclose(model.theta.detach() - theta, delta, rtol=1e-10, atol=1e-14)


def test_update_direction_cap_and_lr_zero() -> None:
    model = Quadratic(THETA0)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    theta, delta = adam_steps(THETA0, LR, (0.9, 0.999), 1e-8, 0.0, False, 0)
    cfg = {"every_n_steps": 1, "num_points": 4, "direction": "update", "max_step_size": 1.0 * LR}
    (hook,) = build_diagnostics({"landscape": cfg})
    out = run_hooks([hook], context(model, None, loss_fn, optimizer=optimizer, lr=LR))
    losses = [value(theta + m * delta) for m in (0.5, 1.0)]  # m ≤ max_step_size / lr = 1
    assert out["landscape/loss_min"] == pytest.approx(min(losses), rel=1e-9)
    assert out["landscape/loss_max"] == pytest.approx(max(losses), rel=1e-9)
    assert run_hooks([hook], context(model, None, loss_fn, optimizer=optimizer, lr=0.0)) == {}


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        (["optimizer.momentum=0.0"], "gradient"),
        ([], "update"),  # the default: SGD with momentum 0.9
        (["optimizer.name=adamw"], "update"),
        (["optimizer.name=adam", "optimizer.momentum=0.0"], "update"),
        (["experiment=santurkar_vgg"], "gradient"),  # the paper: plain SGD
        (["optimizer.momentum=0.0", "diagnostics.landscape.direction=update"], None),
    ],
)
def test_auto_is_resolved_into_the_config(overrides: list[str], want: str | None) -> None:
    cfg = compose_cfg(["diagnostics=full", *overrides])
    config = parse(cfg)
    record = as_recorded(cfg, config)
    for name in ("landscape", "predictiveness", "beta_smoothness"):
        got = config.diagnostics[name].direction
        assert got == record["diagnostics"][name]["direction"], name  # the record says which one ran
        assert got == (want or ("update" if name == "landscape" else "gradient")), name
    assert "direction" not in record["diagnostics"]["ics"]  # only the probe diagnostics have one
    assert cfg.diagnostics.landscape.direction == ("auto" if want else "update")  # the composed config is untouched
    cfg = compose_cfg(["experiment=santurkar_vgg_cpu"])  # probe entries written without the key
    config = parse(cfg)
    assert config.diagnostics["landscape"].direction == "gradient"
    assert as_recorded(cfg, config)["diagnostics"]["landscape"]["direction"] == "gradient"
