"""The hand-written backward passes of the fast paths are exact derivatives (``gradcheck``, float64
finite differences): RMS normalization over channels (rms, prms, GroupScaling), masked GroupNorm
(gn / in / ln_sample on sequences), BatchNorm with the per-sample noise folded in, and the
per-sample affine of ``noise_only``."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

from normbench.norms import batch_functional as BF
from normbench.norms import functional as NF

D = torch.float64


def _param(c: int) -> torch.Tensor:
    return torch.randn(c, dtype=D, requires_grad=True)


@pytest.mark.parametrize("k", [6, 2])  # k = C: RMSNorm; k < C: partial RMSNorm
@pytest.mark.parametrize("length", [1, 5])  # rows (sequences) and (N, C, H·W)
@pytest.mark.parametrize("affine", [True, False])
def test_channel_rms_norm(k: int, length: int, affine: bool) -> None:
    x3 = torch.randn(4, 6, length, dtype=D, requires_grad=True)
    weight = _param(6) if affine else None
    inputs = (x3, weight) if affine else (x3,)
    assert gradcheck(lambda a, *w: NF.channel_rms_norm(a, w[0] if w else None, k, 0.1), inputs)


@pytest.mark.parametrize("groups", [1, 2, 6])  # ln_sample, gn, in
@pytest.mark.parametrize("affine", [True, False])
def test_masked_group_norm(groups: int, affine: bool) -> None:
    x = torch.randn(4, 5, 6, dtype=D, requires_grad=True)
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 0, 1])[:, None]  # an all-padding and a 1-token sentence
    weight, bias = (_param(6), _param(6)) if affine else (None, None)
    inputs = (x, weight, bias) if affine else (x,)

    def f(a: torch.Tensor, *wb: torch.Tensor) -> torch.Tensor:
        return NF.masked_group_norm(a, mask, groups, *(wb or (None, None)), 0.1)

    assert gradcheck(f, inputs)
    y = f(x, *([weight, bias] if affine else []))
    assert y[~mask].abs().max() == 0  # 0 at padding


@pytest.mark.parametrize("with_mask", [False, True])
def test_batch_norm_with_sample_affine(with_mask: bool) -> None:
    n, t, c = 3, 4, 5
    x3 = torch.randn(n * t, c, 1, dtype=D, requires_grad=True)  # 3 sentences of 4 tokens
    lengths = torch.tensor([4, 2, 3])
    w = (torch.arange(t)[None] < lengths[:, None]).reshape(-1, 1, 1).to(D) if with_mask else None
    noise = (torch.rand(n, c, dtype=D) + 0.5, torch.randn(n, c, dtype=D))
    weight, bias = _param(c), _param(c)
    assert gradcheck(lambda a, b, d: BF.batch_norm_fused(a, w, b, d, 1e-3, None, noise)[0], (x3, weight, bias))
    # = BatchNorm, then y·s + m per sample, then 0 at padding
    y, _, _ = BF.batch_norm_fused(x3, w, weight, bias, 1e-3)
    s, m = noise
    expected = (y.view(n, t, c) * s[:, None] + m[:, None]).view(n * t, c, 1)
    expected = expected if w is None else expected * w
    torch.testing.assert_close(BF.batch_norm_fused(x3, w, weight, bias, 1e-3, None, noise)[0], expected)
    x4 = torch.randn(n, c, 6, dtype=D, requires_grad=True)  # NCHW: one row per sample
    assert gradcheck(lambda a, b, d: BF.batch_norm_fused(a, None, b, d, 1e-3, None, noise)[0], (x4, weight, bias))


def test_sample_affine() -> None:
    x3 = torch.randn(6, 5, 1, dtype=D, requires_grad=True)
    w = torch.tensor([1.0, 1, 0, 1, 0, 0], dtype=D).view(-1, 1, 1)
    s, m = torch.randn(2, 5, dtype=D), torch.randn(2, 5, dtype=D)
    assert gradcheck(lambda a: BF.sample_affine(a, w, s, m), (x3,))
    expected = (x3.view(2, 3, 5) * s[:, None] + m[:, None]).view(6, 5, 1) * w
    torch.testing.assert_close(BF.sample_affine(x3, w, s, m), expected)
