"""bn_stats' scale-free measures (issue 56, item 2): the relative distances of batch from running
statistics and the input gradient through σ²_B relative to the direct path's, against hand
computations; the same for two models identical per channel but of different widths, for a
rescaled input, and for a loss averaged over a batch repeated twice — where the paper's absolute
measures change (each test shows that they do)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from normbench.diagnostics.bn_stats import compute
from normbench.norms import build_norm
from tests.diagnostics.test_bn_stats import batch_with, hook_for, train_step

EPS = 1e-5


def two_step_distances(width_copies: int, scale: float) -> dict[str, float]:
    """The epoch's distances of a BN layer of 3·``width_copies`` channels (the 3 channels repeated),
    its input and its starting running statistics multiplied by ``scale``, over two steps."""
    model = nn.Sequential(build_norm("bn", 3 * width_copies, momentum=0.1)).double()
    m0, v0 = torch.tensor([0.5, -1.0, 0.0]), torch.tensor([1.0, 2.0, 0.5])
    model[0].running_mean.copy_(m0.repeat(width_copies) * scale)
    model[0].running_var.copy_(v0.repeat(width_copies) * scale**2)
    hook = hook_for(model)
    for step, (mu, var) in enumerate([([1.0, 0.0, 2.0], [4.0, 1.0, 0.25]), ([-1.0, 3.0, 0.5], [0.5, 9.0, 1.0])]):
        x = batch_with(mu, var, (8, 3, 4, 4), step)
        train_step(hook, model, step, x.repeat(1, width_copies, 1, 1) * scale)
    return hook.epoch_end()


def test_relative_distances_match_the_closed_form() -> None:
    out = two_step_distances(1, 1.0)
    n, momentum = 8 * 4 * 4, 0.1
    m0, v0 = torch.tensor([0.5, -1.0, 0.0]).double(), torch.tensor([1.0, 2.0, 0.5]).double()
    mu1, s1 = torch.tensor([1.0, 0.0, 2.0]).double(), torch.tensor([4.0, 1.0, 0.25]).double() * n / (n - 1)
    mu2, s2 = torch.tensor([-1.0, 3.0, 0.5]).double(), torch.tensor([0.5, 9.0, 1.0]).double() * n / (n - 1)
    m1, v1 = (1 - momentum) * m0 + momentum * mu1, (1 - momentum) * v0 + momentum * s1

    def rms(v: Tensor) -> float:
        return float(v.square().mean().sqrt())

    want_mean = (rms((mu1 - m0) / (v0 + EPS).sqrt()) + rms((mu2 - m1) / (v1 + EPS).sqrt())) / 2
    want_var = (rms((s1 - v0) / (v0 + EPS)) + rms((s2 - v1) / (v1 + EPS))) / 2
    assert out["first_layer/mean_dist"] == pytest.approx(want_mean, rel=1e-10)
    assert out["first_layer/var_dist"] == pytest.approx(want_var, rel=1e-10)
    assert out["0/var_dist"] == out["first_layer/var_dist"]


def test_relative_distances_do_not_depend_on_the_width() -> None:
    """The same 3 channels repeated 8 times (d 24 against 3): ours is the same (ratio 1); the
    paper's (1/d)·‖·‖₂ falls by √8."""
    narrow, wide = two_step_distances(1, 1.0), two_step_distances(8, 1.0)
    for stat in ("mean", "var"):
        assert wide[f"first_layer/{stat}_dist"] / narrow[f"first_layer/{stat}_dist"] == pytest.approx(1.0)
        assert wide[f"first_layer/{stat}_dist_paper"] / narrow[f"first_layer/{stat}_dist_paper"] == pytest.approx(
            8**-0.5
        )


def test_relative_distances_do_not_depend_on_the_input_scale() -> None:
    """Input and running statistics 10 times larger: ours is the same (up to eps against σ² ≥ 0.5);
    the paper's mean distance grows 10-fold and its variance distance 100-fold."""
    one, ten = two_step_distances(1, 1.0), two_step_distances(1, 10.0)
    for stat, power in (("mean", 1), ("var", 2)):
        assert ten[f"first_layer/{stat}_dist"] == pytest.approx(one[f"first_layer/{stat}_dist"], rel=1e-4)
        assert ten[f"first_layer/{stat}_dist_paper"] == pytest.approx(one[f"first_layer/{stat}_dist_paper"] * 10**power)


def test_psi2_is_measured_in_running_psi2() -> None:
    batch, running = torch.tensor([2.0, 0.5]), torch.tensor([1.0, 0.25])
    out = compute({"psi2": batch}, {"psi2": running}, eps=0.0)
    assert out == {
        "psi2_dist_paper": pytest.approx(float((batch - running).norm() / 2)),
        "psi2_dist": pytest.approx(1.0),
    }


def input_grads(copies: int, masked: bool) -> dict[str, float]:
    """One step of a BN layer on a batch repeated ``copies`` times, the loss averaged over the
    examples (or the real tokens) of the repeated batch: the same per-example computation."""
    torch.manual_seed(0)
    layout = "NTC" if masked else "NCHW"
    norm = build_norm("bn", 3, layout).double()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
    hook = hook_for(nn.Sequential(norm), grad_norms=True)
    if masked:
        x, c = torch.randn(3, 5, 3, dtype=torch.float64) * 2, torch.randn(3, 5, 3, dtype=torch.float64)
        mask = torch.arange(5)[None] < torch.tensor([5, 2, 4])[:, None]
        x, c, mask = x.repeat(copies, 1, 1), c.repeat(copies, 1, 1), mask.repeat(copies, 1)
        hook.before_step(0)
        ((norm(x, mask) * c).sum(-1)[mask].mean()).backward()  # per-token loss, averaged over real tokens
    else:
        x, c = torch.randn(4, 3, 3, 3, dtype=torch.float64) * 2, torch.randn(4, 3, 3, 3, dtype=torch.float64)
        x, c = x.repeat(copies, 1, 1, 1), c.repeat(copies, 1, 1, 1)
        hook.before_step(0)
        (norm(x) * c).sum((1, 2, 3)).mean().backward()  # per-image loss, averaged over images
    hook.after_step(0)
    return hook.epoch_end()


@pytest.mark.parametrize("masked", [False, True], ids=["NCHW", "NTC-masked"])
def test_relative_input_gradient_is_the_same_for_a_loss_averaged_over_twice_the_examples(masked: bool) -> None:
    one, two = input_grads(1, masked), input_grads(2, masked)
    for stat in ("var", "mean"):
        assert two[f"first_layer/{stat}_input_grad"] == pytest.approx(one[f"first_layer/{stat}_input_grad"])
        # the paper's absolute norm: each of 2× the values gets half the gradient, ‖·‖₂ falls by √2
        paper = f"first_layer/{stat}_input_grad_paper"
        assert two[paper] == pytest.approx(one[paper] / 2**0.5)


def test_relative_input_gradient_matches_autograd_over_the_direct_path() -> None:
    """‖∂L/∂x through σ²_B‖₂ / ‖(γ/sqrt(σ²_B + eps))·∂L/∂y‖₂ by autograd, every other use of x detached."""
    out = input_grads(1, False)
    torch.manual_seed(0)
    x, c = torch.randn(4, 3, 3, 3, dtype=torch.float64) * 2, torch.randn(4, 3, 3, 3, dtype=torch.float64)
    gamma = torch.tensor([1.0, 2.0, -0.5], dtype=torch.float64)[:, None, None]
    xr = x.clone().requires_grad_(True)
    var, mean = torch.var_mean(xr, dim=(0, 2, 3), correction=0)
    y = gamma * (xr.detach() - mean.detach()[:, None, None]) / torch.sqrt(var[:, None, None] + EPS)
    (y * c).sum((1, 2, 3)).mean().backward()
    direct = gamma / torch.sqrt(var.detach()[:, None, None] + EPS) * c / 4  # ∂L/∂y = c/4 (4 images)
    want = float(xr.grad.norm() / direct.norm())
    assert out["first_layer/var_input_grad"] == pytest.approx(want, rel=1e-10)
    assert 0 < want < 1
