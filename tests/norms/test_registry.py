"""The registry contract, parametrized over every registered norm."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

from normbench.base.errors import ConfigError
from normbench.norms import build_norm, list_norms

C = 8
KW = {"gn": {"groups": 4}}


def make(name: str, layout: str = "NCHW", **kw) -> torch.nn.Module:
    m = build_norm(name, C, layout, **{**KW.get(name, {}), **kw})
    if hasattr(m, "record_noise"):
        m.record_noise = True  # the noisy norms keep their last draw, for the references
    return m


def randomize_affine(m: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)


def _stats(x: torch.Tensor, dims: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return x.mean(dims, keepdim=True), x.var(dims, keepdim=True, unbiased=False)


def _affine(y: torch.Tensor, m: torch.nn.Module) -> torch.Tensor:
    w = getattr(m, "weight", None)
    b = getattr(m, "bias", None)
    if w is not None:
        y = y * w.view(1, -1, 1, 1)
    if b is not None:
        y = y + b.view(1, -1, 1, 1)
    return y


STOCHASTIC = {"bn_noisy", "noise_only"}
NO_TORCH_LAYER = {
    "pn",
    "prms",
    "noise_only",
    "bn_l1",
    "bn_l2",
    "bn_linf",
}  # torch has no such layer; see their own tests
LP = {"bn_l1": 1.0, "bn_l2": 2.0, "bn_linf": float("inf")}  # ℓp BatchNorm: its p


def _noise(y: torch.Tensor, m: torch.nn.Module) -> torch.Tensor:
    shift, scale = m.last_noise  # one draw per activation, checked in test_noisy.py
    return y * scale + shift


def reference_nchw(name: str, x: torch.Tensor, m: torch.nn.Module) -> torch.Tensor:
    """Each norm's first training-mode output, from explicit means and variances (float64)."""
    eps, n = m.eps, x.shape[0]
    if name == "none":
        return x
    if name == "noise_only":
        return _noise(x, m)
    if name == "bn_noisy":
        return _noise(reference_nchw("bn", x, m), m)
    if name == "prms":
        return _affine(x / torch.sqrt(x[:, : m.k].pow(2).mean(1, keepdim=True) + eps), m)
    if name == "pn":  # GroupScaling, then the batch's quadratic mean (step 1 is in the warm-up)
        xg = x.view(n, m.groups, -1, *x.shape[2:])
        xs = (xg / torch.sqrt(xg.pow(2).mean(2, keepdim=True) + eps)).view_as(x)
        return _affine(xs / torch.sqrt(xs.pow(2).mean((0, 2, 3), keepdim=True) + eps), m)
    if name in LP:  # centred per channel, divided by the uncentred ℓp power mean over N, H, W plus eps
        c, p = x - x.mean((0, 2, 3), keepdim=True), LP[name]
        dev = (
            x.abs().amax((0, 2, 3), keepdim=True)
            if p == float("inf")
            else x.abs().pow(p).mean((0, 2, 3), keepdim=True) ** (1 / p)
        )
        return _affine(c / (dev + eps), m)
    if name in ("bn", "brn"):  # brn is plain BatchNorm during its warm-up
        mu, var = _stats(x, (0, 2, 3))
    elif name == "in":
        mu, var = _stats(x, (2, 3))
    elif name == "ln":
        mu, var = _stats(x, (1,))
    elif name == "ln_sample":
        mu, var = _stats(x, (1, 2, 3))
    elif name == "gn":
        xg = x.view(n, m.groups, -1)
        mu, var = _stats(xg, (2,))
        return _affine(((xg - mu) / torch.sqrt(var + eps)).view_as(x), m)
    elif name == "rms":
        return _affine(x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps), m)
    else:
        raise KeyError(name)
    return _affine((x - mu) / torch.sqrt(var + eps), m)


def torch_reference_nchw(name: str, x: torch.Tensor, m: torch.nn.Module) -> torch.Tensor | None:
    """torch's own layer where one exists."""
    w, b = getattr(m, "weight", None), getattr(m, "bias", None)
    if name in ("bn", "brn"):
        return F.batch_norm(x, None, None, w, b, True, 0.0, m.eps)
    if name == "bn_noisy":
        return _noise(F.batch_norm(x, None, None, w, b, True, 0.0, m.eps), m)
    if name == "in":
        return F.instance_norm(x, weight=w, bias=b, eps=m.eps)
    if name == "gn":
        return F.group_norm(x, m.groups, w, b, m.eps)
    if name == "ln":
        return F.layer_norm(x.permute(0, 2, 3, 1), (C,), w, b, m.eps).permute(0, 3, 1, 2)
    if name == "ln_sample":
        y = F.layer_norm(x, x.shape[1:], None, None, m.eps)
        return _affine(y, m)
    if name == "rms":
        return F.rms_norm(x.permute(0, 2, 3, 1), (C,), w, m.eps).permute(0, 3, 1, 2)
    if name == "none":
        return x
    return None


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
    torch.testing.assert_close(y, reference_nchw(name, x, m), atol=1e-10, rtol=0)
    ref = torch_reference_nchw(name, x, m)
    if name in NO_TORCH_LAYER:
        assert ref is None
        return
    assert ref is not None, f"add a torch reference for norm {name!r}"
    torch.testing.assert_close(y, ref, atol=1e-10, rtol=0)


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
    if any("running" in k for k in m.state_dict()) or name in STOCHASTIC:
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
