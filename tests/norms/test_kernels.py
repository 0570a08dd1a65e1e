"""The CPU kernels (normbench/norms/kernels.py) against the torch-op path they replace.

Every registered norm runs twice on the same float64 input and parameters, with the kernels and
with ``NORMBENCH_CPU_KERNELS=0`` (the torch-op path, itself checked against torch and the
formulas by test_sequences / test_registry): outputs, input and parameter gradients and buffers
must agree to 1e-12, on sequences with padding and on images; in training over several steps and
in evaluation. The kernels' own functions are checked against explicit formulas too.
"""

from __future__ import annotations

import copy

import pytest
import torch

from normbench.norms import batch_functional as BF
from normbench.norms import build_norm, kernels, list_norms

C = 16
KW = {"gn": {"groups": 4}, "pn": {"groups": 4}}

pytestmark = pytest.mark.skipif(not kernels.usable(torch.zeros(1)), reason="the CPU kernels could not be built")


def _inputs(layout: str, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    if layout == "NCHW":
        return torch.randn(4, C, 3, 5, generator=g, dtype=torch.float64) * 3 + 2, None
    lengths = torch.tensor([6, 2, 5, 6, 1])
    mask = torch.arange(6)[None] < lengths[:, None]
    return torch.randn(5, 6, C, generator=g, dtype=torch.float64) * 3 + 2, mask


def _run(m: torch.nn.Module, layout: str, kernels_on: bool, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    monkeypatch.setenv("NORMBENCH_CPU_KERNELS", "1" if kernels_on else "0")
    out = []
    m.train()
    for step in range(3):
        torch.manual_seed(step)  # the same noise draws (bn_noisy, noise_only) on both paths
        x, mask = _inputs(layout, step)
        x.requires_grad_(True)
        y = m(x, mask)
        dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(10 + step), dtype=y.dtype)
        params = [p for p in m.parameters() if p.requires_grad]
        grads = torch.autograd.grad(y, [x, *params], dy, allow_unused=True)
        out += [y.detach(), *(g for g in grads if g is not None)]
    out += [b.clone() for b in m.buffers()]
    m.eval()
    x, mask = _inputs(layout, 7)
    with torch.no_grad():
        out.append(m(x, mask))
    return out


@pytest.mark.parametrize("layout", ["NTC", "NCHW"])
@pytest.mark.parametrize("name", list_norms())
def test_kernels_equal_torch_ops(name: str, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    m = build_norm(name, C, layout, **KW.get(name, {})).double()
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)
    # The noise of bn_noisy / noise_only comes from Philox with the kernels and from torch's
    # generator without them (same distributions, test_noisy): the torch-op run replays the draws.
    draws: list[tuple[torch.Tensor, torch.Tensor]] = []
    draw = BF.santurkar_noise
    monkeypatch.setattr(BF, "santurkar_noise", lambda *a, **kw: draws.append(draw(*a, **kw)) or draws[-1])
    with_kernels = _run(copy.deepcopy(m), layout, True, monkeypatch)
    replay = iter(list(draws))
    monkeypatch.setattr(BF, "santurkar_noise", lambda *a, **kw: next(replay))
    with_ops = _run(copy.deepcopy(m), layout, False, monkeypatch)
    assert len(with_kernels) == len(with_ops)
    for a, b in zip(with_kernels, with_ops):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_segment_kernels_match_their_formulas() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    dy = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    w = (torch.rand(3, 5, generator=g) > 0.3).double()
    a, b = torch.randn(3, 7, generator=g, dtype=torch.float64), torch.randn(7, generator=g, dtype=torch.float64)
    center = torch.randn(3, 7, generator=g, dtype=torch.float64)
    wx = w[..., None]
    torch.testing.assert_close(kernels.seg_sums(x, w), (wx * x).sum(1), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(
        kernels.seg_sums(x, w, center), (wx * (x - center[:, None]) ** 2).sum(1), rtol=1e-13, atol=1e-13
    )
    torch.testing.assert_close(kernels.seg_sums(x, None), x.sum(1), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(kernels.seg_affine(x, a, b, w), (x * a[:, None] + b) * wx, rtol=0, atol=1e-14)
    s0, s1 = kernels.seg_dot(dy, x, w, center)
    torch.testing.assert_close(s0, (wx * dy).sum(1), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(s1, (wx * dy * (x - center[:, None])).sum(1), rtol=1e-13, atol=1e-13)
    p, q, r = a, b, center
    expected = (dy * p[:, None] + x * q + r[:, None]) * wx
    torch.testing.assert_close(kernels.seg_grad(dy, x, p, q, r, w), expected, rtol=0, atol=1e-13)
    u, v = torch.randn(3, 5, generator=g, dtype=torch.float64), torch.randn(3, 5, generator=g, dtype=torch.float64)
    expected = (dy * p[:, None] * u[..., None] + x * q + r[:, None]) * wx
    torch.testing.assert_close(kernels.seg_grad(dy, x, p, q, r, w, u), expected, rtol=0, atol=1e-13)
    expected = (x * a[:, None] + b) * wx + v[..., None]
    torch.testing.assert_close(kernels.seg_affine(x, a, b, w, v), expected, rtol=0, atol=1e-14)
    torch.testing.assert_close(
        kernels.seg_row_dot(dy, x, a, center), (dy * (x * a[:, None] + center[:, None])).sum(2), rtol=1e-13, atol=1e-13
    )


@pytest.mark.parametrize("k", [1, 5, 16])
@pytest.mark.parametrize("with_gamma", [True, False])
def test_row_rms_kernels_match_autograd(k: int, with_gamma: bool) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 16, generator=g, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(16, generator=g, dtype=torch.float64, requires_grad=True) if with_gamma else None
    dy = torch.randn(9, 16, generator=g, dtype=torch.float64)
    s = torch.rsqrt(x[:, :k].pow(2).mean(1, keepdim=True) + 1e-5)
    ref = x * s * (gamma if with_gamma else 1)
    ref_grads = torch.autograd.grad(ref, [x] + ([gamma] if with_gamma else []), dy)
    y, inv = kernels.row_rms_forward(x.detach(), gamma, k, 1e-5)
    torch.testing.assert_close(y, ref.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(inv, s.detach().view(-1), rtol=1e-13, atol=1e-13)
    dx, dgamma = kernels.row_rms_backward(dy, x.detach(), inv, gamma, k)
    torch.testing.assert_close(dx, ref_grads[0], rtol=1e-12, atol=1e-12)
    if with_gamma:
        torch.testing.assert_close(dgamma, ref_grads[1], rtol=1e-12, atol=1e-12)
    else:
        assert dgamma is None


def test_philox_matches_its_known_answer_and_draws_rows_independently() -> None:
    """Random123's known-answer vector for Philox4x32-10 with counter 0 and key 0 (0x6627e8d5,
    0xe169c58d, 0xbc57ac4c, 0x9b00dbd8; 24-bit uniforms keep the top 24 bits); row r's draws do
    not depend on how many rows are drawn; moments of U(0, 1)."""
    expected = torch.tensor([0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]) >> 8
    assert torch.equal((kernels.philox_uniform(1, 4, (0, 0), 0)[0] * 2**24).long(), expected)
    few, many = kernels.philox_uniform(3, 10, (5, 6), 1), kernels.philox_uniform(7, 10, (5, 6), 1)
    assert torch.equal(few, many[:3])
    assert not torch.equal(few, kernels.philox_uniform(3, 10, (5, 7), 1))
    assert not torch.equal(few, kernels.philox_uniform(3, 10, (5, 6), 2))
    u = kernels.philox_uniform(500, 400, (123, 456), 1).double()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 3e-3 and abs(u.var() - 1 / 12) < 1e-3
    assert abs((u[:, 1:] * u[:, :-1]).mean() - 0.25) < 3e-3  # neighbours uncorrelated


def test_noise_erfinv_matches_torch() -> None:
    """The inverse-CDF normals of the kernels' noise draw (Giles' single-precision erfinv with a
    series logarithm) against torch.erfinv in float64, over 170,000 uniforms from 2⁻²⁴ to 1 − 2⁻²⁴."""
    v = torch.cat([torch.arange(0, 2**24, 97, dtype=torch.float64) / 2**24, torch.tensor([0.0, 1 - 2**-24, 0.5])])
    ours = kernels.erfinv_of_uniform(v.float()).double()
    ref = torch.erfinv(2 * v.clamp_min(2**-24) - 1)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    assert ref.abs().max() > 3.7  # the tails were reached


def test_disabled_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMBENCH_CPU_KERNELS", "0")
    assert not kernels.usable(torch.zeros(1))
    monkeypatch.setenv("NORMBENCH_CPU_KERNELS", "1")
    assert kernels.usable(torch.zeros(1))
    assert not kernels.usable(torch.zeros(1, dtype=torch.bfloat16))
    assert not kernels.usable(torch.zeros(1), torch.zeros(1, dtype=torch.float64))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")  # from torch.func.hessian
@pytest.mark.parametrize("name,layout", [("bn", "NTC"), ("gn", "NTC"), ("rms", "NTC"), ("pn", "NTC"), ("ln", "NCHW")])
def test_double_backward_is_refused_with_kernels_and_exact_when_suspended(name: str, layout: str) -> None:
    """A second derivative through a kernel would be silently wrong (its backward is opaque to
    autograd): it raises; inside `kernels.suspended()` the torch-op path runs and, where it is
    twice differentiable, gives the same Hessian-vector product as with the kernels off."""
    m = build_norm(name, C, layout, **KW.get(name, {})).double()
    x, mask = _inputs(layout, 0)
    x.requires_grad_(True)
    v = torch.randn_like(x)

    def hvp() -> torch.Tensor:
        y = m(x, mask)
        (g,) = torch.autograd.grad((y.sin()).sum(), x, create_graph=True)
        return torch.autograd.grad((g * v).sum(), x)[0]

    with pytest.raises(RuntimeError, match="double backward"):
        hvp()
    if name in ("pn", "bn"):  # PowerNorm's backward is not a derivative; BN switches path itself
        return
    with kernels.suspended():
        assert not kernels.usable(x)
        try:
            suspended = hvp()
        except RuntimeError:  # gn, rms: their torch-op path is not twice differentiable either (out= ops)
            return
    x_ref = x.detach().requires_grad_(True)
    ref = torch.func.hessian(lambda z: m(z, mask).sin().sum())(x_ref)
    torch.testing.assert_close(suspended, (ref.reshape(x.numel(), x.numel()) @ v.reshape(-1)).view_as(x))
