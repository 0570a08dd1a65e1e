"""ics (Santurkar et al. 2018, Def. 2.1) on a two-layer linear network, computed by hand."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from normbench.base.errors import ConfigError
from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.ics import internal_covariate_shift
from normbench.diagnostics.layers import model_layers
from normbench.diagnostics.state import optimizer_step_preview
from tests.diagnostics.common import context

N, D_IN, D_HID, D_OUT = 16, 4, 3, 2


def linear_net() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, D_HID, bias=False), nn.Linear(D_HID, D_OUT, bias=False)).double()
    x, y = torch.randn(N, D_IN, dtype=torch.float64), torch.randn(N, D_OUT, dtype=torch.float64)
    return net, (x, y)


def mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return 0.5 * (model(x) - y).pow(2).sum() / len(x)


def by_hand(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(G1, G2) of L = (1/2N)·‖X W1ᵀ W2ᵀ − Y‖²: R = X W1ᵀ W2ᵀ − Y, G2 = Rᵀ(X W1ᵀ)/N, G1 = (R W2)ᵀ X / N."""
    r = x @ w1.T @ w2.T - y
    return (r @ w2).T @ x / N, r.T @ (x @ w1.T) / N


def test_g_and_g_prime_equal_the_hand_computed_gradients() -> None:
    net, (x, y) = linear_net()
    lr = 0.3
    w1, w2 = (p.detach().clone() for p in net.parameters())
    g1, g2 = by_hand(w1, w2, x, y)
    w1_next = w1 - lr * g1  # plain SGD
    _, g2_prime = by_hand(w1_next, w2, x, y)

    (hook,) = build_diagnostics({"ics": {"every_n_steps": 1, "layers": ["0", "1"]}})
    hook.setup(net)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    out = run_hooks([hook], context(net, (x, y), mse, optimizer=opt, lr=lr))
    assert out["ics/0/grad_diff"] == 0.0 and out["ics/0/cos"] == pytest.approx(1.0, abs=1e-15)
    assert out["ics/1/grad_diff"] == pytest.approx(float((g2 - g2_prime).norm()), rel=1e-10)
    want_cos = float((g2 * g2_prime).sum() / (g2.norm() * g2_prime.norm()))
    assert out["ics/1/cos"] == pytest.approx(want_cos, rel=1e-12)
    assert out["ics/1/rel_grad_diff"] == pytest.approx(float((g2 - g2_prime).norm() / g2.norm()), rel=1e-10)
    assert torch.equal(net[0].weight.detach(), w1) and torch.equal(net[1].weight.detach(), w2)


def test_pure_function_first_layer_is_exact_and_params_come_back() -> None:
    net, batch = linear_net()
    layers = [ps for _, ps in model_layers(net)]
    updated = [[p.detach() + 0.1] for p in net.parameters()]
    before = [p.detach().clone() for p in net.parameters()]
    out = internal_covariate_shift(lambda: mse(net, batch), layers, updated, [0, 1])
    assert out[0]["grad_diff"] == 0.0 and out[1]["grad_diff"] > 0
    assert all(torch.equal(p.detach(), b) for p, b in zip(net.parameters(), before))


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_preview_is_the_step_the_optimizer_takes_and_leaves_its_state(name: str) -> None:
    net, batch = linear_net()
    params = list(net.parameters())
    if name == "sgd":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-2, nesterov=True)
    else:
        opt = torch.optim.AdamW(params, lr=0.01, weight_decay=1e-2)
    for _ in range(2):  # momentum / moments in the state
        opt.zero_grad()
        mse(net, batch).backward()
        opt.step()
    grads = torch.autograd.grad(mse(net, batch), params)
    state_before = copy.deepcopy(opt.state_dict())
    preview = optimizer_step_preview(opt, params, grads)
    assert all(
        torch.equal(a, b) for a, b in zip(opt.state_dict()["state"][0].values(), state_before["state"][0].values())
    )
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    assert all(torch.equal(a, p.detach()) for a, p in zip(preview, params))


def test_unknown_layer_name_is_a_config_error_listing_layers() -> None:
    net, _ = linear_net()
    (hook,) = build_diagnostics({"ics": {"every_n_steps": 1, "layers": ["conv9"]}})
    with pytest.raises(ConfigError, match="'conv9'.*valid choices: 0, 1"):
        hook.setup(net)
