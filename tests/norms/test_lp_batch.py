"""ℓp BatchNorm (`normbench.norms.lp_batch`) on cases worked by hand; the registry-wide tests
(formula, sequences and padding, invariances, dtypes, compile) cover it as every other norm."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normbench.norms import build_norm
from normbench.norms.lp_batch import lp_batch_stats

# one channel, a batch of four: μ = 3; the paper's divisor is the ℓp power mean of |x| = 1, 2, 3, 6
# (Santurkar et al. 2018, §3.3: "their ℓp-norm (before shifting the mean)"); the centred reading's of
# |x − μ| = 2, 1, 0, 3
X = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
DEV = {"bn_l1": 12 / 4, "bn_l2": math.sqrt((1 + 4 + 9 + 36) / 4), "bn_linf": 6.0}
DEV_CENTRED = {"bn_l1": 6 / 4, "bn_l2": math.sqrt((4 + 1 + 0 + 9) / 4), "bn_linf": 3.0}


@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("name", sorted(DEV))
def test_training_output_and_running_estimates_by_hand(name: str, centred: bool) -> None:
    m = build_norm(name, 1, "NCHW", eps=1e-3, momentum=0.25, centred=centred).double()
    y = m(X.view(4, 1, 1, 1)).flatten()
    dev = (DEV_CENTRED if centred else DEV)[name]
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0], dtype=torch.float64) / (dev + 1e-3)
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-14)
    torch.testing.assert_close(m.running_mean, torch.tensor([0.25 * 3.0], dtype=torch.float64), rtol=0, atol=1e-14)
    running_dev = 0.75 * 1.0 + 0.25 * dev
    torch.testing.assert_close(m.running_dev, torch.tensor([running_dev], dtype=torch.float64), rtol=0, atol=1e-14)
    m.eval()  # evaluation: the running estimates in place of the batch's
    y_eval = m(torch.tensor([5.0], dtype=torch.float64).view(1, 1, 1, 1)).item()
    assert y_eval == pytest.approx((5.0 - 0.75) / (running_dev + 1e-3), abs=1e-14)


def test_padding_is_left_out_of_the_statistics_by_hand() -> None:
    """Two sentences, 3 and 1 real tokens, padded with garbage: the statistics are those of the 4
    real tokens (the same X), the outputs at padding are 0 and no gradient reaches it."""
    x = torch.tensor([[1.0, 2.0, 3.0], [6.0, 1e3, -1e3]], dtype=torch.float64)[..., None].requires_grad_()
    mask = torch.tensor([[True, True, True], [True, False, False]])
    for name, dev in DEV.items():  # the garbage (1e3, -1e3) would dominate every power mean of |x|
        mean, s, count = lp_batch_stats(x, "NTC", {"bn_l1": 1, "bn_l2": 2, "bn_linf": math.inf}[name], mask)
        assert count.item() == 4 and mean.item() == pytest.approx(3.0, abs=1e-14)
        assert s.item() == pytest.approx(dev, abs=1e-14)
        m = build_norm(name, 1, "NTC", eps=1e-3).double()
        y = m(x, mask)
        assert (y[~mask] == 0).all()
        (grad,) = torch.autograd.grad(y.sum(), x)
        assert (grad[~mask] == 0).all()


def test_centred_l2_is_batchnorm_up_to_where_eps_sits() -> None:
    """centred: (x − μ)/(σ_B + eps) against torch's (x − μ)/sqrt(σ²_B + eps′): equal as both eps vanish."""
    x = torch.randn(8, 3, 4, 5, dtype=torch.float64) * 2 + 1
    y = build_norm("bn_l2", 3, "NCHW", eps=1e-12, centred=True).double()(x)
    torch.testing.assert_close(y, F.batch_norm(x, None, None, training=True, eps=1e-24), rtol=0, atol=1e-10)


def test_l2_divides_by_the_root_mean_square() -> None:
    """The paper's ℓ2 (uncentred): (x − μ)/sqrt(σ²_B + μ²_B) = BatchNorm's output scaled by σ/sqrt(σ² + μ²)
    per channel, so it differs from BN wherever the channel's mean is not 0."""
    x = torch.randn(8, 3, 4, 5, dtype=torch.float64) * 2 + torch.tensor([0.0, 1.0, -3.0]).view(1, 3, 1, 1)
    y = build_norm("bn_l2", 3, "NCHW", eps=1e-12).double()(x)
    mu, var = x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)
    scale = (var / (var + mu**2)).sqrt().view(1, 3, 1, 1)
    torch.testing.assert_close(y, F.batch_norm(x, None, None, training=True, eps=1e-24) * scale, rtol=0, atol=1e-9)
    assert (y - F.batch_norm(x, None, None, training=True, eps=1e-24)).abs()[:, 2].max() > 0.1


@pytest.mark.parametrize("name", sorted(DEV))
def test_gradient_matches_finite_differences(name: str) -> None:
    """The backward through μ_B and s_p (a max for ℓ∞: no ties in this draw)."""
    torch.manual_seed(0)
    m = build_norm(name, 3, "NCHW").double()
    x = torch.randn(5, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t), (x,))


def test_a_batch_of_one_real_token_leaves_the_running_estimates() -> None:
    m = build_norm("bn_l1", 2, "NTC").double()
    x = torch.randn(2, 3, 2, dtype=torch.float64)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    mask[0, 0] = True
    m(x, mask)
    assert torch.equal(m.running_mean, torch.zeros(2, dtype=torch.float64))
    assert torch.equal(m.running_dev, torch.ones(2, dtype=torch.float64))
