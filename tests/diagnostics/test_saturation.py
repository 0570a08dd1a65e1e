"""saturation: the fraction of each norm's outputs beyond the threshold, and each module's gradient
norm, against a hand computation on a tiny net."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normbench.base.errors import ConfigError
from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.saturation import saturated_fraction
from normbench.norms import build_norm
from tests.diagnostics.common import context


class TanhNet(nn.Module):
    def __init__(self, norm: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm1 = build_norm(norm, 4)
        self.fc = nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.tanh(self.norm1(self.conv(x))).mean(dim=(2, 3)))


@pytest.mark.parametrize("norm", ["none", "bn"])
def test_fractions_and_gradient_norms_match_a_hand_computation(norm: str) -> None:
    torch.manual_seed(0)
    model = TanhNet(norm).double()
    x, y = torch.randn(6, 3, 5, 5, dtype=torch.float64) * 3, torch.randint(0, 10, (6,))
    loss_fn = lambda m, b: F.cross_entropy(m(b[0]), b[1])  # noqa: E731
    (hook,) = build_diagnostics({"saturation": {"every_n_steps": 1, "threshold": 1.5}})
    out = run_hooks([hook], context(model, (x, y), loss_fn))
    z = model.conv(x)
    if norm == "bn":
        z = F.batch_norm(z, None, None, model.norm1.weight, model.norm1.bias, True)
    want = (z.abs() > 1.5).double().mean().item()
    assert out["saturation/norm1/saturated"] == pytest.approx(want, abs=1e-12)
    assert 0.05 < want < 0.95  # a case where the fraction says something
    model.zero_grad()
    loss_fn(model, (x, y)).backward()
    conv = torch.cat([model.conv.weight.grad.reshape(-1), model.conv.bias.grad]).norm().item()
    assert out["saturation/conv/grad_norm"] == pytest.approx(conv, rel=1e-10)
    assert out["saturation/fc/grad_norm"] == pytest.approx(
        torch.cat([model.fc.weight.grad.reshape(-1), model.fc.bias.grad]).norm().item(), rel=1e-10
    )
    assert ("saturation/norm1/affine_grad_norm" in out) == (norm == "bn")  # BN's γ, β; none has no parameters
    # layer k is the model's k-th conv/linear in both arms: the norm's parameters are not a layer
    assert [k for k in out if k.endswith("/grad_norm")] == ["saturation/conv/grad_norm", "saturation/fc/grad_norm"]


def test_saturated_fraction_counts_nan_as_saturated_and_bad_threshold_fails() -> None:
    z = torch.tensor([0.0, 3.0, -3.0, float("nan")])
    assert float(saturated_fraction(z, 2.0)) == 0.75
    with pytest.raises(ConfigError, match="diagnostics.saturation.threshold=0.0 must be a positive number"):
        build_diagnostics({"saturation": {"every_n_steps": 1, "threshold": 0.0}})
