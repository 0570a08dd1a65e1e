"""Every norm runs forward and backward on bfloat16 activations under CPU autocast (as the
runner does with mixed precision), on both layouts, with finite outputs and gradients close to
the float32 computation."""

from __future__ import annotations

import pytest
import torch

from normbench.norms import build_norm, list_norms

KW = {"gn": {"groups": 4}, "pn": {"groups": 4}}


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
@pytest.mark.parametrize("name", list_norms())
def test_bfloat16_autocast(name: str, layout: str) -> None:
    shape = (4, 16, 3, 3) if layout == "NCHW" else (4, 5, 16)
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 2, 4])[:, None] if layout == "NTC" else None
    x = torch.randn(shape).bfloat16().float()  # values exactly representable in bf16
    outs = []
    for dtype in (torch.bfloat16, torch.float32):
        torch.manual_seed(0)  # the same noise draws for the noisy norms
        m = build_norm(name, 16, layout, **KW.get(name, {}))
        xi = x.to(dtype).requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            y = m(xi, mask)
        y.float().square().sum().backward()
        assert torch.isfinite(y.float()).all() and torch.isfinite(xi.grad.float()).all()
        outs.append((y.float(), xi.grad.float()))
    (y16, g16), (y32, g32) = outs
    torch.testing.assert_close(y16, y32, atol=0.1, rtol=0.05)
    torch.testing.assert_close(g16, g32, atol=0.2, rtol=0.1)


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
@pytest.mark.parametrize("name", list_norms())
def test_same_dtype_in_training_and_evaluation_under_autocast(name: str, layout: str) -> None:
    """A bf16 activation comes out of a norm in one dtype, whether the norm trains or evaluates
    (``pn`` returned float32 in evaluation and bf16 in training)."""
    m = build_norm(name, 16, layout, **KW.get(name, {}))
    x = torch.randn((4, 16, 3, 3) if layout == "NCHW" else (4, 5, 16)).bfloat16()
    dtypes = []
    for training in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            dtypes.append(m.train(training)(x).dtype)
    assert dtypes[0] == dtypes[1], dtypes


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
@pytest.mark.parametrize("name", list_norms())
def test_a_module_cast_to_bfloat16_runs_in_training_and_evaluation(name: str, layout: str) -> None:
    """``model.bfloat16()`` (parameters and buffers in bf16, no autocast) trains and evaluates."""
    m = build_norm(name, 16, layout, **KW.get(name, {})).bfloat16()
    x = torch.randn((4, 16, 3, 3) if layout == "NCHW" else (4, 5, 16)).bfloat16()
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 2, 4])[:, None] if layout == "NTC" else None
    for training in (True, False):
        y = m.train(training)(x, mask)
        assert torch.isfinite(y.float()).all()


@pytest.mark.parametrize("name", list_norms())
def test_masked_statistics_stay_float32_under_autocast_far_from_zero(name: str) -> None:
    """Masked sequences of mean 100 and std 2 (where a mean taken in bf16 is off by a few
    tenths): eager training under bf16 autocast gives the float32 output and gradient, up to the
    bf16 rounding of the output itself. The masked batch statistics (BatchNorm's exact shift,
    Batch Renorm, PowerNorm) are computed in float32 whatever autocast says."""
    g = torch.Generator().manual_seed(0)
    x = (100 + 2 * torch.randn(4, 5, 16, generator=g)).bfloat16().float()  # exactly representable in bf16
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 2, 4])[:, None]
    dy = torch.randn(x.shape, generator=g)
    outs = []
    for autocast in (True, False):
        torch.manual_seed(0)  # the same noise draws for the noisy norms
        m = build_norm(name, 16, "NTC", **KW.get(name, {}))
        xi = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = m(xi, mask)
        (y.float() * dy).sum().backward()
        outs.append((y.float(), xi.grad.float()))
    (y16, g16), (y32, g32) = outs
    torch.testing.assert_close(y16, y32, atol=0.02, rtol=0.01)
    torch.testing.assert_close(g16, g32, atol=0.02, rtol=0.02)


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
@pytest.mark.parametrize("name", list_norms())
def test_a_bf16_activation_comes_out_in_bf16_under_autocast(name: str, layout: str) -> None:
    """Every norm hands the next layer the dtype it was given (``prms`` and ``ln_sample`` on
    sequences returned float32, doubling the activation memory after them under bf16)."""
    m = build_norm(name, 16, layout, **KW.get(name, {}))
    x = torch.randn((4, 16, 3, 3) if layout == "NCHW" else (4, 5, 16)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m(x).dtype == torch.bfloat16
