"""PowerNorm against a float64 reference written from the formulas of Shen et al. 2020 / the
authors' code, over several steps across the warm-up switch.

``gradcheck`` is not the right test here: PowerNorm's backward is an approximation by design
(not the derivative of its forward). The test compares forward outputs, the input gradient
that the approximate backward produces, the parameter gradients, and the buffers running ψ²,
ema_gz and the step counter after every step, with the reference's.
"""

from __future__ import annotations

import pytest
import torch

from normbench.norms import build_norm

C, GROUPS, EPS, A_FWD, A_BKW, WARMUP = 8, 2, 1e-5, 0.8, 0.7, 2


def group_scale(x: torch.Tensor, on: bool = True) -> torch.Tensor:  # (M, C) real tokens
    if not on:  # group_scaling=False
        return x
    g = x.view(x.shape[0], GROUPS, C // GROUPS)
    return (g / torch.sqrt(g.pow(2).mean(-1, keepdim=True) + EPS)).view_as(x)


def rows(mask: torch.Tensor | None, v: torch.Tensor) -> torch.Tensor:
    """The (M, C) matrix of real positions: real tokens of NTC, or every pixel of NCHW."""
    return v[mask] if mask is not None else v.movedim(1, -1).reshape(-1, C)


class Reference:
    """PowerNorm on the (M, C) matrix of real positions, from the formulas; ``batch``: PN-V (ψ²_B
    in every forward, the derivative of that forward as the backward); ``scaling``: GroupScaling."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, batch: bool = False, scaling: bool = True) -> None:
        self.weight, self.bias, self.batch, self.scaling = weight, bias, batch, scaling
        self.running = torch.ones(C, dtype=torch.float64)
        self.ema_gz = torch.zeros(C, dtype=torch.float64)
        self.t = 0

    def step(self, x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.t += 1
        x = x.clone().requires_grad_(True)
        xs = group_scale(x, self.scaling)
        if self.batch:  # PN-V: y = γ·x̃/sqrt(mean(x̃²) + eps) + β, differentiated by autograd
            psi2_b = xs.pow(2).mean(0)
            z = xs / torch.sqrt(psi2_b + EPS)
            (dy * z * self.weight).sum().backward()
            psi2_b = psi2_b.detach()
            if self.t < WARMUP:
                self.running = self.running * (self.t - 1) / self.t + psi2_b / self.t
            self.running = A_FWD * self.running + (1 - A_FWD) * psi2_b
            return self.weight * z.detach() + self.bias, x.grad, (dy * z.detach()).sum(0), dy.sum(0)
        psi2_b = xs.detach().pow(2).mean(0)
        psi2 = psi2_b if self.t <= WARMUP else self.running.clone()
        z = xs.detach() / torch.sqrt(psi2 + EPS)
        y = self.weight * z + self.bias
        if self.t < WARMUP:
            self.running = self.running * (self.t - 1) / self.t + psi2_b / self.t
        self.running = A_FWD * self.running + (1 - A_FWD) * psi2_b
        g = dy * self.weight
        g_hat = g - (1 - A_BKW) * self.ema_gz * z
        self.ema_gz = self.ema_gz + (g_hat * z).mean(0)
        xs.backward(g_hat / torch.sqrt(psi2_b + EPS))
        return y, x.grad, (dy * z).sum(0), dy.sum(0)


@pytest.mark.parametrize("layout", ["NTC", "NCHW"])
@pytest.mark.parametrize(
    ("forward_stats", "group_scaling"),
    [("running", True), ("running", False), ("batch", True), ("batch", False)],
    ids=["pn", "pn-no-groupscaling", "pn-v", "pn-v-no-groupscaling"],
)
def test_matches_reference_over_warmup_and_after(layout: str, forward_stats: str, group_scaling: bool) -> None:
    """Each step of the BN → PN-V → PN chain, and each with and without GroupScaling."""
    m = build_norm(
        "pn", C, layout, eps=EPS, alpha_fwd=A_FWD, alpha_bkw=A_BKW, warmup_iters=WARMUP, groups=GROUPS,
        forward_stats=forward_stats, group_scaling=group_scaling,
    ).double()  # fmt: skip
    g = torch.Generator().manual_seed(0)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)
    ref = Reference(m.weight.detach().clone(), m.bias.detach().clone(), forward_stats == "batch", group_scaling)
    for t in range(5):
        if layout == "NTC":
            x = torch.randn(4, 6, C, generator=g, dtype=torch.float64) * (1 + t) + 0.5
            mask = torch.arange(6)[None] < torch.tensor([6, 2, 5, 3])[:, None]
        else:
            x = torch.randn(3, C, 2, 3, generator=g, dtype=torch.float64) * (1 + t) + 0.5
            mask = None
        dy = torch.randn(x.shape, generator=g, dtype=torch.float64)
        xi = x.clone().requires_grad_(True)
        m.zero_grad()
        y = m(xi, mask)
        (y * dy).sum().backward()
        y_ref, dx_ref, dw_ref, db_ref = ref.step(rows(mask, x), rows(mask, dy))
        torch.testing.assert_close(rows(mask, y), y_ref, atol=1e-10, rtol=0, msg=f"y at step {t + 1}")
        torch.testing.assert_close(rows(mask, xi.grad), dx_ref, atol=1e-10, rtol=0, msg=f"dx at step {t + 1}")
        torch.testing.assert_close(m.weight.grad, dw_ref, atol=1e-10, rtol=0)
        torch.testing.assert_close(m.bias.grad, db_ref, atol=1e-10, rtol=0)
        torch.testing.assert_close(m.running_psi2, ref.running, atol=1e-12, rtol=0)
        torch.testing.assert_close(m.ema_gz, ref.ema_gz, atol=1e-12, rtol=0)
        assert int(m.iters) == t + 1
        if mask is not None:
            assert (y[~mask] == 0).all() and (xi.grad[~mask] == 0).all()
    m.eval()
    y = m(x, mask)
    z = group_scale(rows(mask, x), group_scaling) / torch.sqrt(ref.running + EPS)
    torch.testing.assert_close(rows(mask, y), ref.weight * z + ref.bias, atol=1e-10, rtol=0)


def test_record_stats_keeps_batch_psi2() -> None:
    m = build_norm("pn", C, "NTC", groups=GROUPS, eps=EPS).double()
    m.record_stats = True
    x = torch.randn(3, 4, C, dtype=torch.float64)
    m(x)
    torch.testing.assert_close(m.last_stats["psi2"], group_scale(x.reshape(-1, C)).pow(2).mean(0), atol=1e-12, rtol=0)


def test_bfloat16_input_keeps_fp32_statistics() -> None:
    """bf16 activations (autocast): statistics and buffers in fp32, output in bf16, close to fp32."""
    m16, m32 = (build_norm("pn", C, "NTC", groups=GROUPS, warmup_iters=1) for _ in range(2))
    x = torch.randn(3, 4, C)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    for _ in range(2):
        x16 = x.bfloat16().requires_grad_(True)
        y16 = m16(x16, mask)
        y16.float().sum().backward()
        y32 = m32(x16.detach().float(), mask)
        assert y16.dtype == torch.bfloat16 and x16.grad.dtype == torch.bfloat16
        assert m16.running_psi2.dtype == torch.float32
        torch.testing.assert_close(y16.float(), y32, atol=0.05, rtol=0.02)
        torch.testing.assert_close(m16.running_psi2, m32.running_psi2)


def test_pn_v_is_batchnorm_without_the_mean() -> None:
    """PN-V without GroupScaling on zero-mean data equals BatchNorm's training forward and backward
    (the chain's first step removes only the mean subtraction): torch's own layer as the reference."""
    pnv = build_norm("pn", C, "NCHW", eps=EPS, forward_stats="batch", group_scaling=False).double()
    bn = torch.nn.BatchNorm2d(C, eps=EPS).double()
    x = torch.randn(6, C, 3, 3, dtype=torch.float64)
    x = x - x.mean((0, 2, 3), keepdim=True)  # per-channel batch mean 0: ψ²_B = σ²_B
    dy = torch.randn(x.shape, dtype=torch.float64)
    grads = []
    for layer in (pnv, bn):
        xi = x.clone().requires_grad_(True)
        y = layer(xi)
        (y * dy).sum().backward()
        grads.append((y.detach(), xi.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-10, rtol=0)
    # BN's backward has a mean term Σdy/n per channel that PN-V's lacks: equal only where it is 0
    dy0 = dy - dy.mean((0, 2, 3), keepdim=True)
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    for layer, xi in zip((pnv, bn), xs, strict=True):
        (layer(xi) * dy0).sum().backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, atol=1e-10, rtol=0)


def test_unknown_forward_stats_is_refused() -> None:
    from normbench.base.errors import ConfigError
    from normbench.norms.power import PowerNormConfig

    with pytest.raises(ConfigError, match="norm.forward_stats=mean is not allowed; .* one of running, batch"):
        PowerNormConfig(forward_stats="mean")
