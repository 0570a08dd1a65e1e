"""Every norm on sequences (N, T, C) with a padding mask: exact against torch / the formulas over
the documented axes (float64; each norm's row in tests/norms/specs.py), and invariant to padding in
training and evaluation."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from normbench.norms import build_norm, list_norms
from tests.norms.specs import C, affine, kw, spec

LENGTHS = (7, 4, 6, 2, 7)


def masked(name: str) -> bool:
    """Outputs at padding positions do not depend on the norm's parameters (0 or the input)."""
    return spec(name).masked


def make(name: str, **extra) -> torch.nn.Module:
    m = build_norm(name, C, "NTC", **{**kw(name), **extra}).double()
    if hasattr(m, "record_noise"):
        m.record_noise = True  # the noisy norms keep their last draw, for the references
    g = torch.Generator().manual_seed(3)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)
    return m


def batch(lengths=LENGTHS, t: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), t, C, generator=g, dtype=torch.float64) * 2 + 1
    mask = torch.arange(t)[None] < torch.tensor(lengths)[:, None]
    return x, mask


@pytest.mark.parametrize("name", list_norms())
def test_matches_reference_on_real_tokens(name: str) -> None:
    m = make(name)
    x, mask = batch()
    y = m(x, mask)
    torch.testing.assert_close(y[mask], spec(name).ntc(x, mask, m), atol=1e-10, rtol=0)
    if masked(name) and name not in ("none", "noise_only"):
        assert (y[~mask] == 0).all()


def pad(x: torch.Tensor, mask: torch.Tensor, extra_t: int = 3, extra_n: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Append ``extra_t`` pad tokens to every sentence and ``extra_n`` all-padding sentences,
    filled with large garbage."""
    n, t, c = x.shape
    g = torch.Generator().manual_seed(9)
    xp = torch.randn(n + extra_n, t + extra_t, c, generator=g, dtype=x.dtype) * 100 + 50
    mp = torch.zeros(n + extra_n, t + extra_t, dtype=torch.bool)
    xp[:n, :t][mask] = x[mask]
    mp[:n, :t] = mask
    return xp, mp


def run(m: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, dy: torch.Tensor, seed: int) -> tuple:
    x = x.clone().requires_grad_(True)
    torch.manual_seed(seed)
    y = m(x, mask)
    (y * dy).sum().backward()
    return y, x.grad, {k: p.grad for k, p in m.named_parameters()}


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", list_norms())
def test_padding_does_not_change_real_tokens(name: str, mode: str) -> None:
    # The noisy norms draw per activation, so a padded batch draws another stream; with r_mu =
    # r_sigma = 0 their noise is the step's per-channel (μ_j, σ_j), the first draws of the stream.
    base = make(name, **({"r_mu": 0.0, "r_sigma": 0.0} if name in ("bn_noisy", "noise_only") else {}))
    x, mask = batch()
    base(batch(seed=1)[0], mask)  # one training step first, so eval uses moved running statistics
    base.train(mode == "train")
    xp, mp = pad(x, mask)
    dyp = torch.randn(xp.shape, generator=torch.Generator().manual_seed(5), dtype=x.dtype)
    dy = dyp[: x.shape[0], : x.shape[1]]
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    y, gx, gp = run(a, x, mask, dy, seed=11)
    yp, gxp, gpp = run(b, xp, mp, dyp, seed=11)
    n, t = x.shape[:2]
    torch.testing.assert_close(yp[:n, :t][mask], y[mask], atol=1e-10, rtol=0)
    torch.testing.assert_close(gxp[:n, :t][mask], gx[mask], atol=1e-10, rtol=0)
    if masked(name):
        for k in gp:
            torch.testing.assert_close(gpp[k], gp[k], atol=1e-10, rtol=0)
    for (k, v), (_, vp) in zip(a.named_buffers(), b.named_buffers()):
        torch.testing.assert_close(vp, v, atol=1e-10, rtol=0, msg=f"buffer {k}")


@pytest.mark.parametrize("name", list_norms())
def test_mask_must_match_input(name: str) -> None:
    m = make(name)
    x, mask = batch()
    with pytest.raises(ValueError, match="mask must be a bool tensor of shape"):
        m(x, mask[:, :3])
    with pytest.raises(ValueError, match="masks go with layout 'NTC'"):
        build_norm(name, C, "NCHW", **kw(name))(torch.randn(2, C, 3, 3), mask)


def test_ln_on_sequences_is_per_token_instance_norm_over_channels() -> None:
    """The README's equivalence: per-token LN on (N, T, C) = InstanceNorm over C of each token."""
    m = make("ln")
    x, _ = batch()
    y_in = F.instance_norm(x.reshape(1, -1, C), eps=m.eps).reshape(x.shape)
    torch.testing.assert_close(m(x), affine(y_in, m, -1), atol=1e-12, rtol=0)


def test_ln_sample_on_images_is_groupnorm_with_one_group() -> None:
    m = build_norm("ln_sample", C, "NCHW").double()
    x = torch.randn(3, C, 4, 5, dtype=torch.float64)
    torch.testing.assert_close(m(x), F.group_norm(x, 1, m.weight, m.bias, m.eps), atol=1e-12, rtol=0)


@pytest.mark.parametrize("lengths", [(1, 0, 0), (0, 0, 0)], ids=["one real token", "all padding"])
@pytest.mark.parametrize("name", list_norms())
def test_batches_with_fewer_than_two_real_tokens_keep_buffers_finite(name: str, lengths: tuple[int, ...]) -> None:
    """The unbiased variance n/(n − 1)·σ²_B is undefined below 2 real tokens: the running
    statistics are left as they were (never NaN), and later evaluations stay finite."""
    m = make(name)
    m(*batch(seed=1))  # a normal step first
    before = {k: v.clone() for k, v in m.named_buffers()}
    x, mask = batch(lengths=lengths, seed=2)
    y = m(x, mask)
    assert torch.isfinite(y).all()
    if masked(name) and name not in ("none", "noise_only"):
        assert (y[~mask] == 0).all()
    for k, v in m.named_buffers():
        assert torch.isfinite(v).all(), f"buffer {k} is not finite"
        if k.startswith("running_") and lengths == (0, 0, 0):
            torch.testing.assert_close(v, before[k], atol=0, rtol=0, msg=f"{k} moved on an all-padding batch")
    if hasattr(m, "running_var") and lengths == (1, 0, 0):
        torch.testing.assert_close(m.running_var, before["running_var"], atol=0, rtol=0)
    m.eval()
    assert torch.isfinite(m(*batch(seed=3))).all()
