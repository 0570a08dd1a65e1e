"""The optimizer's weight-decay groups: with ``optimizer.no_decay_norm_and_bias`` the norms' γ/β and
every bias are not decayed; by default everything is."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.norms import build_norm, list_norms
from normbench.optim import OptimizerConfig, build_optimizer


def net(norm: str) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, bias=True),
        build_norm(norm, 8, "NCHW", **({"groups": 4} if norm in ("gn", "pn") else {})),
        nn.Flatten(),
        nn.LazyLinear(2),
    )


@pytest.mark.parametrize("norm", list_norms())
@pytest.mark.parametrize("exempt", [False, True])
def test_decay_reaches_exactly_the_parameters_it_should(norm: str, exempt: bool) -> None:
    model = net(norm)
    model(torch.randn(2, 3, 5, 5))  # materialize the lazy layer
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    opt = build_optimizer(model, OptimizerConfig(momentum=0.0, no_decay_norm_and_bias=exempt), lr=1.0, weight_decay=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # the step is the decay alone: p ← p·(1 − lr·wd)
    opt.step()
    for k, p in model.named_parameters():
        is_norm_or_bias = k.startswith("1.") or k.endswith("bias")
        factor = 1.0 if exempt and is_norm_or_bias else 0.9
        torch.testing.assert_close(p.detach(), before[k] * factor, rtol=0, atol=1e-7, msg=k)


def adam_step_by_formula(p: torch.Tensor, g: torch.Tensor, lr: float, wd: float, decoupled: bool) -> torch.Tensor:
    """One Adam step from zero moments (m̂ = g', v̂ = g'², bias-corrected; eps 1e-8): with decoupled
    decay (AdamW; fairseq's Adam, `fairseq/optim/adam.py`: p ← p − wd·lr·p, then the Adam step on g)
    or with the decay added to the gradient (torch.optim.Adam: g' = g + wd·p)."""
    g_eff = g if decoupled else g + wd * p
    update = lr * g_eff / (g_eff.abs() + 1e-8)
    return (p * (1 - lr * wd) if decoupled else p) - update


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_weight_decay_coupled_or_decoupled(name: str) -> None:
    """``adamw`` decays the weights apart from the gradient (Loshchilov & Hutter; what fairseq's Adam
    does), ``adam`` adds the decay to the gradient: each update equals its formula and not the other's."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    grads = {k: torch.randn_like(p) for k, p in model.named_parameters()}
    lr, wd = 0.1, 0.5
    opt = build_optimizer(model, OptimizerConfig(name=name), lr=lr, weight_decay=wd)
    for k, p in model.named_parameters():
        p.grad = grads[k].clone()
    opt.step()
    for k, p in model.named_parameters():
        want = adam_step_by_formula(before[k], grads[k], lr, wd, decoupled=name == "adamw")
        other = adam_step_by_formula(before[k], grads[k], lr, wd, decoupled=name != "adamw")
        torch.testing.assert_close(p.detach(), want, rtol=0, atol=1e-6, msg=k)
        assert not torch.allclose(p.detach(), other, atol=1e-4), k


def test_adamw_matches_torch_adamw_over_steps() -> None:
    """Over several steps the ``adamw`` optimizer's weights equal torch.optim.AdamW's on the same gradients."""
    torch.manual_seed(1)
    ours, ref = nn.Linear(5, 2), nn.Linear(5, 2)
    ref.load_state_dict(ours.state_dict())
    opt = build_optimizer(ours, OptimizerConfig(name="adamw", betas=[0.9, 0.98]), lr=0.01, weight_decay=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-8, weight_decay=1e-2)
    for _ in range(5):
        x = torch.randn(7, 5)
        for m, o in ((ours, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    for (k, a), (_, b) in zip(ours.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=k)
