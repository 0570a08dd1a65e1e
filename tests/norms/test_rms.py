"""RMSNorm and partial RMSNorm."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normbench.base.errors import ConfigError
from normbench.norms import build_norm


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_prms_with_p_1_equals_rms(layout: str) -> None:
    rms = build_norm("rms", 12, layout).double()
    prms = build_norm("prms", 12, layout, p=1.0).double()
    assert prms.k == 12
    with torch.no_grad():
        rms.weight.normal_()
        prms.weight.copy_(rms.weight)
    shape = (3, 12, 4, 2) if layout == "NCHW" else (3, 4, 12)
    x = torch.randn(shape, dtype=torch.float64)
    torch.testing.assert_close(prms(x), rms(x), atol=1e-12, rtol=0)


def test_prms_uses_the_first_k_channels_and_eps_inside_the_root() -> None:
    m = build_norm("prms", 48, "NTC", p=0.0625, eps=0.5).double()
    assert m.k == 3  # ⌈0.0625·48⌉
    assert build_norm("prms", 8, "NTC").k == 1  # at least one element
    x = torch.randn(2, 5, 48, dtype=torch.float64)
    torch.testing.assert_close(m(x), x / torch.sqrt(x[..., :3].pow(2).mean(-1, keepdim=True) + 0.5), atol=1e-12, rtol=0)
    with pytest.raises(ConfigError, match="norm.p=0"):
        build_norm("prms", 8, p=0.0)


def test_rms_eps_is_inside_the_square_root() -> None:
    m = build_norm("rms", 4, "NTC", eps=0.25).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(m(x), F.rms_norm(x, (4,), None, 0.25), atol=1e-12, rtol=0)
    torch.testing.assert_close(m(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 0.25), atol=1e-12, rtol=0)
