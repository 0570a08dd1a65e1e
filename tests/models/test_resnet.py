"""ResNet20 with every norm: no BatchNorm left behind, exact parameter counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.models import build_model, list_models
from normbench.norms import build_norm, list_norms, norm_factory
from normbench.norms.batch import BatchNorm

NORM_KW = {"gn": {"groups": 8}}
# Convs and the classifier of ResNet20 (He et al. 2016, sec. 4.2), counted by hand:
# stem 3*16*9; stage 1: 6 * 16*16*9; stage 2: 16*32*9 + 5 * 32*32*9; stage 3: 32*64*9 + 5 * 64*64*9;
# fc 64*10 + 10.
RESNET20_CONV_FC = (
    3 * 16 * 9 + 6 * 16 * 16 * 9 + (16 * 32 * 9 + 5 * 32 * 32 * 9) + (32 * 64 * 9 + 5 * 64 * 64 * 9) + 64 * 10 + 10
)
NORM_CHANNELS_A = 16 + 6 * 16 + 6 * 32 + 6 * 64  # one norm after every 3x3 conv
PROJECTIONS_B = 16 * 32 + 32 * 64  # two 1x1 projection convs, each followed by a norm (32, 64 channels)


def factory(name: str):
    return norm_factory({"name": name, **NORM_KW.get(name, {})})


def per_channel_params(name: str) -> int:
    return sum(p.numel() for p in build_norm(name, 64, "NCHW", **NORM_KW.get(name, {})).parameters()) // 64


def test_resnet20_is_the_papers_size() -> None:
    assert RESNET20_CONV_FC + 2 * NORM_CHANNELS_A == 269_722  # "0.27M" in the paper's Table 6


@pytest.mark.parametrize("shortcut", ["A", "B"])
@pytest.mark.parametrize("norm", list_norms())
def test_resnet20_parameter_count(norm: str, shortcut: str) -> None:
    model = build_model({"name": "resnet20", "shortcut": shortcut}, factory(norm))
    channels = NORM_CHANNELS_A + (32 + 64 if shortcut == "B" else 0)
    expected = RESNET20_CONV_FC + (PROJECTIONS_B if shortcut == "B" else 0) + per_channel_params(norm) * channels
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize("model_name", [m for m in list_models() if m.startswith("resnet")])
@pytest.mark.parametrize("norm", list_norms())
def test_no_batchnorm_left(model_name: str, norm: str) -> None:
    model = build_model({"name": model_name, "shortcut": "B"}, factory(norm))
    has_bn = any(isinstance(m, (nn.modules.batchnorm._BatchNorm, BatchNorm)) for m in model.modules())
    assert has_bn == (norm in ("bn", "brn", "bn_noisy"))  # the BatchNorm family
    assert not any("bn" in name.split(".")[-1] for name, _ in model.named_modules())
    x = torch.randn(4, 3, 32, 32)
    out = model(x)
    out.sum().backward()
    assert out.shape == (4, 10) and torch.isfinite(out).all()
