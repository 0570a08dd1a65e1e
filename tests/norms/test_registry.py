"""The registry contract, parametrized over every registered norm (each one's row in
tests/norms/specs.py: its formula on images and torch's layer where there is one)."""

from __future__ import annotations

import io

import pytest
import torch

from normbench.base.errors import ConfigError
from normbench.norms import build_norm, list_norms
from tests.norms.specs import C, kw, spec


def make(name: str, layout: str = "NCHW", **extra) -> torch.nn.Module:
    m = build_norm(name, C, layout, **{**kw(name), **extra})
    if hasattr(m, "record_noise"):
        m.record_noise = True  # the noisy norms keep their last draw, for the references
    return m


def randomize_affine(m: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)


@pytest.mark.parametrize("name", list_norms())
def test_forward_backward_finite(name: str) -> None:
    m = make(name)
    x = torch.randn(4, C, 5, 6, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape
    (y * torch.randn_like(y)).sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", list_norms())
def test_matches_formula_and_torch_float64(name: str) -> None:
    m = make(name).double()
    randomize_affine(m)
    x = torch.randn(6, C, 5, 7, dtype=torch.float64) * 3 + 1.5
    y = m(x)
    row = spec(name)
    torch.testing.assert_close(y, row.nchw(x, m), atol=1e-10, rtol=0)
    if row.torch is not None:  # torch's own layer, where it has one
        torch.testing.assert_close(y, row.torch(x, m), atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", list_norms())
def test_state_dict_round_trip(name: str) -> None:
    m = make(name)
    randomize_affine(m)
    m(torch.randn(4, C, 3, 3) + 2)  # moves running statistics where there are any
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = make(name)
    m2.load_state_dict(torch.load(buf, weights_only=True))
    x = torch.randn(4, C, 3, 3)
    m.eval()
    m2.eval()
    torch.testing.assert_close(m(x), m2(x), atol=0, rtol=0)


@pytest.mark.parametrize("name", list_norms())
def test_train_vs_eval(name: str) -> None:
    """Norms with running statistics use them in eval, noisy norms drop their noise in eval,
    per-sample norms behave the same."""
    m = make(name)
    x = torch.randn(8, C, 4, 4) * 2 + 3
    m.train()(torch.randn(8, C, 4, 4))  # one earlier step, so running estimates ≠ this batch's
    y_train = m(x)
    y_eval = m.eval()(x)
    if any("running" in k for k in m.state_dict()) or spec(name).stochastic:
        assert not torch.allclose(y_train, y_eval, atol=1e-3)
        if name == "noise_only":
            torch.testing.assert_close(y_eval, x, atol=0, rtol=0)
    else:
        torch.testing.assert_close(y_train, y_eval, atol=0, rtol=0)


def test_bn_running_variance_is_unbiased() -> None:
    m = build_norm("bn", C, "NCHW", momentum=1.0).double()
    x = torch.randn(4, C, 3, 3, dtype=torch.float64)
    m(x)
    torch.testing.assert_close(m.running_var, x.var((0, 2, 3), unbiased=True), atol=1e-12, rtol=0)
    torch.testing.assert_close(m.running_mean, x.mean((0, 2, 3)), atol=1e-12, rtol=0)


def test_unknown_norm_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown norm 'batchnorm'.*valid choices: .*bn.*gn"):
        build_norm("batchnorm", C)


def test_groupnorm_rejects_non_divisor() -> None:
    with pytest.raises(ConfigError, match="norm.groups=3 does not divide num_features=8"):
        build_norm("gn", 8, "NCHW", groups=3)


@pytest.mark.parametrize("name", list_norms())
def test_every_norm_declares_what_it_normalizes_over(name: str) -> None:
    """Each registered norm's class says, per layout, what its statistics are taken over (the
    leaderboard's "normalizes over" column); its own declaration, not one inherited by accident."""
    from normbench.norms.registry import LAYOUTS, NORMS

    cls = NORMS.get(name)
    assert "NORMALIZES_OVER" in vars(cls), f"{cls.__name__} declares no NORMALIZES_OVER of its own"
    for layout in LAYOUTS:
        over = make(name, layout).normalizes_over(layout)
        assert isinstance(over, str) and over.strip() and over == cls.normalizes_over(layout)
    with pytest.raises(NotImplementedError, match="does not declare what it normalizes over in NHWC"):
        cls.normalizes_over("NHWC")
