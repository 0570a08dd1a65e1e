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
