"""Every norm's backward is the exact derivative of its forward, and every norm is twice
differentiable (the Hessian diagnostic takes Hessian-vector products through them): ``gradcheck``
and ``gradgradcheck`` in float64 on both layouts, with a padding mask on sequences. PowerNorm's
backward is approximate on purpose (Shen et al. 2020) and is checked against its own formulas in
``test_powernorm.py``."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from normbench.norms import batch_functional as BF
from normbench.norms import build_norm, list_norms
from tests.norms.specs import SPECS

D = torch.float64
KW = {
    "gn": {"groups": 2},
    "pn": {"groups": 2},
    "brn": {"warmup_steps": 0, "r_max_steps": 1, "d_max_steps": 1, "d_max": 0.5},
}
C = 6


def _case(layout: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(0)
    if layout == "NCHW":
        return torch.randn(3, C, 2, 3, generator=g, dtype=D) * 2 + 1, None
    mask = torch.arange(4)[None] < torch.tensor([4, 2, 3])[:, None]
    return torch.randn(3, 4, C, generator=g, dtype=D) * 2 + 1, mask


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
@pytest.mark.parametrize("name", [n for n in list_norms() if n not in SPECS or SPECS[n].exact_backward])
def test_gradcheck_and_gradgradcheck(name: str, layout: str) -> None:
    m = build_norm(name, C, layout, eps=0.1, **KW.get(name, {})).double()
    x, mask = _case(layout)
    if name == "brn":  # past its warm-up, running statistics far from the batch's: r, d clipped at
        m.running_mean.fill_(100.0)  # 1/r_max and −d_max, constants also for finite differences
        m.running_var.fill_(1e4)
    buffers = {k: v.clone() for k, v in m.named_buffers()}
    names = [k for k, _ in m.named_parameters()]

    def f(a: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        state = {k: v.clone() for k, v in buffers.items()}  # every evaluation at the same running stats and steps
        state.update(zip(names, params))
        torch.manual_seed(7)  # the noisy norms: the same draw every time
        return torch.func.functional_call(m, state, (a, mask))

    inputs = (x.requires_grad_(True), *[p.detach().clone().requires_grad_(True) for p in m.parameters()])
    assert gradcheck(f, inputs, fast_mode=True)
    assert gradgradcheck(f, inputs, fast_mode=True)


@pytest.mark.parametrize("with_mask", [False, True])
def test_composed_batch_norm_with_renorm_gradcheck(with_mask: bool) -> None:
    """`batch_norm_composed` with Batch Renormalization's r and d (constants for the backward)."""
    x, mask = _case("NTC")
    w = mask.unsqueeze(-1).to(D) if with_mask else None
    # running statistics far from the batch's: r = 1/r_max, d = −d_max (clipped, so constant also
    # for gradcheck's finite differences)
    renorm = BF.Renorm(torch.full((C,), 100.0, dtype=D), torch.full((C,), 1e4, dtype=D), torch.tensor(2.0, dtype=D),
                       torch.tensor(0.5, dtype=D))  # fmt: skip
    weight, bias = torch.randn(C, dtype=D, requires_grad=True), torch.randn(C, dtype=D, requires_grad=True)

    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return BF.batch_norm_composed(a, "NTC", w, b, c, 1e-3, renorm)[0]

    assert gradcheck(f, (x.requires_grad_(True), weight, bias))
    r, d = renorm.factors(*BF.batch_moments(x.detach(), "NTC", w)[:2], 1e-3)
    torch.testing.assert_close(r, torch.full((C,), 0.5, dtype=D))
    torch.testing.assert_close(d, torch.full((C,), -0.5, dtype=D))
    # = γ·(x̂·r + d) + β at real positions, 0 at padding
    y = f(x, weight, bias)
    mean, var, _ = BF.batch_moments(x.detach(), "NTC", w)
    xhat = (x.detach() - mean) / torch.sqrt(var + 1e-3)
    expected = (xhat * r + d) * weight + bias
    torch.testing.assert_close(y, expected if w is None else expected * w, atol=1e-12, rtol=0)
