"""VGG11/16 for CIFAR with every norm: exact parameter counts, no BatchNorm left, both inits."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normbench.base.errors import ConfigError
from normbench.models import build_model
from normbench.norms import build_norm, list_norms, norm_factory
from normbench.norms.batch import BatchNorm

NORM_KW = {"gn": {"groups": 8}}
# (c_in, c_out) of every 3x3 conv, by hand from Simonyan & Zisserman's configurations A and D.
CONVS = {
    "vgg11": [(3, 64), (64, 128), (128, 256), (256, 256), (256, 512), (512, 512), (512, 512), (512, 512)],
    "vgg16": [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256), (256, 256), (256, 256), (256, 512)]
    + [(512, 512)] * 5,
}
CLASSIFIER = 512 * 10 + 10


def factory(name: str):
    return norm_factory({"name": name, **NORM_KW.get(name, {})})


def per_channel_params(name: str) -> int:
    return sum(p.numel() for p in build_norm(name, 64, "NCHW", **NORM_KW.get(name, {})).parameters()) // 64


def expected_params(model_name: str, norm: str) -> int:
    convs = sum(c_in * c_out * 9 + c_out for c_in, c_out in CONVS[model_name])  # weights + biases
    channels = sum(c_out for _, c_out in CONVS[model_name])  # one norm after every conv
    return convs + per_channel_params(norm) * channels + CLASSIFIER


def test_counts_match_the_usual_cifar_vgg_with_bn() -> None:
    # The widely quoted CIFAR VGG sizes with BatchNorm: 9,231,114 (VGG11) and 14,728,266 (VGG16).
    assert expected_params("vgg11", "bn") == 9_231_114
    assert expected_params("vgg16", "bn") == 14_728_266


@pytest.mark.parametrize("model_name", ["vgg11", "vgg16"])
@pytest.mark.parametrize("norm", list_norms())
def test_parameter_count(model_name: str, norm: str) -> None:
    with torch.device("meta"):  # shapes only: no 9-15M floats to draw, 30 times
        model = build_model({"name": model_name}, factory(norm))
    assert sum(p.numel() for p in model.parameters()) == expected_params(model_name, norm)


@pytest.mark.parametrize("model_name", ["vgg11", "vgg16"])
@pytest.mark.parametrize("norm", list_norms())
def test_every_norm_trains_a_step_and_no_batchnorm_is_left(model_name: str, norm: str) -> None:
    """At a quarter of the width (the same modules and names, `test_width_scales_every_conv_and_the_classifier`):
    the step's point is every norm in every block, not the channel count."""
    torch.manual_seed(0)
    model = build_model({"name": model_name, "width": 0.25}, factory(norm))
    has_bn = any(isinstance(m, (nn.modules.batchnorm._BatchNorm, BatchNorm)) for m in model.modules())
    assert has_bn == isinstance(build_norm(norm, 16, **NORM_KW.get(norm, {})), BatchNorm)  # only bn and its family
    assert not any("bn" in name.split(".")[-1] for name, _ in model.named_modules())
    out = model(torch.randn(2, 3, 32, 32))
    out.sum().backward()
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("init", ["glorot", "kaiming"])
def test_init_follows_its_formula(init: str) -> None:
    torch.manual_seed(0)
    model = build_model({"name": "vgg11", "init": init}, factory("none"))
    conv = model.features[2].conv  # 64 -> 128, 3x3
    w = conv.weight.detach()
    fan_in, fan_out = 64 * 9, 128 * 9
    if init == "glorot":  # U(-a, a), a = sqrt(6 / (fan_in + fan_out)): std a / sqrt(3)
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert w.abs().max() <= bound
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    else:  # N(0, 2 / fan_out)
        assert w.std().item() == pytest.approx(math.sqrt(2 / fan_out), rel=0.02)
    assert torch.count_nonzero(conv.bias) == 0
    head = model.classifier.weight.detach()  # 512 -> 10
    if init == "glorot":
        assert head.std().item() == pytest.approx(math.sqrt(2 / (512 + 10)), rel=0.05)
    else:  # N(0, 1 / fan_in): the fan-out form would give std sqrt(2 / 10) and logits of std ~8 with BN
        assert head.std().item() == pytest.approx(1 / math.sqrt(512), rel=0.05)
    assert torch.count_nonzero(model.classifier.bias) == 0


@pytest.mark.slow
def test_kaiming_init_keeps_a_bn_vggs_logits_at_the_features_scale() -> None:
    """The classifier of std 1/sqrt(512): a logit's variance is the mean square of the 512 features
    (the fan-out form, std sqrt(2/10), made it 102 times that: logits of std ~8 with BN)."""
    torch.manual_seed(0)
    model = build_model({"name": "vgg11", "init": "kaiming"}, factory("bn"))
    x = torch.randn(256, 3, 32, 32)
    with torch.no_grad():
        features = model.features(x).flatten(1)
        logits = model(x)
    assert logits.std().item() == pytest.approx(features.pow(2).mean().sqrt().item(), rel=0.15)


def test_unknown_init_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="model.init='xavier'; valid choices: glorot, kaiming"):
        build_model({"name": "vgg16", "init": "xavier"}, factory("bn"))


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid"])
def test_activation_is_applied_to_every_norm_output(activation: str) -> None:
    torch.manual_seed(0)
    model = build_model({"name": "vgg11", "activation": activation}, factory("bn"))
    block = model.features[0]
    x = torch.randn(2, 3, 32, 32)
    want = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}[activation](block.norm(block.conv(x)))
    torch.testing.assert_close(block(x), want)


def test_dropout_is_training_only_and_keeps_the_module_names() -> None:
    """Dropout p after each block and before the classifier: eval equals the p = 0 network with the
    same weights; training zeroes about p of each block's outputs; the module tree (the names the
    diagnostics address, e.g. features.7.conv) is the p = 0 one."""
    torch.manual_seed(0)
    plain = build_model({"name": "vgg11"}, factory("none"))
    dropped = build_model({"name": "vgg11", "dropout": 0.3}, factory("none"))
    assert [n for n, _ in plain.named_modules()] == [n for n, _ in dropped.named_modules()]
    dropped.load_state_dict(plain.state_dict())
    x = torch.randn(4, 3, 32, 32)
    plain.eval(), dropped.eval()
    torch.testing.assert_close(dropped(x), plain(x))
    dropped.train()
    out = dropped.features[0](x)
    zero = (out == 0).float().mean().item() - (torch.relu(dropped.features[0].conv(x)) == 0).float().mean().item()
    assert zero == pytest.approx(0.3 * 0.5, abs=0.03)  # ReLU leaves about half non-zero; dropout takes 30 % of those


def test_dropout_at_the_classifier_leaves_the_blocks_alone() -> None:
    """``dropout_at="classifier"``: in training the blocks are the p = 0 network's and only the 512
    features before the classifier lose about p of their entries (rescaled by 1 / (1 - p))."""
    torch.manual_seed(0)
    plain = build_model({"name": "vgg11"}, factory("none"))
    head_only = build_model({"name": "vgg11", "dropout": 0.5, "dropout_at": "classifier"}, factory("none"))
    head_only.load_state_dict(plain.state_dict())
    plain.train(), head_only.train()
    x = torch.randn(64, 3, 32, 32)
    torch.testing.assert_close(head_only.features(x), plain.features(x))
    features = plain.features(x).flatten(1)
    seen = {}
    head_only.classifier.register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    head_only(x)
    kept = seen["x"] != 0
    alive = features != 0
    assert (kept & ~alive).sum() == 0
    share = (kept & alive).sum().item() / alive.sum().item()
    assert share == pytest.approx(0.5, abs=0.03)
    torch.testing.assert_close(seen["x"][kept], 2 * features[kept])
    with pytest.raises(ConfigError, match="model.dropout_at='head'; valid choices: blocks, classifier"):
        build_model({"name": "vgg11", "dropout_at": "head"}, factory("none"))


def test_kaiming_init_uses_the_activations_gain() -> None:
    torch.manual_seed(0)
    w = build_model({"name": "vgg11", "init": "kaiming", "activation": "tanh"}, factory("none")).features[2].conv.weight
    assert w.std().item() == pytest.approx(5 / 3 / math.sqrt(128 * 9), rel=0.02)  # gain(tanh) / sqrt(fan_out)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("activation", "gelu", "model.activation='gelu'; valid choices: relu, tanh, sigmoid"),
     ("dropout", 1.0, r"model.dropout=1.0 is not allowed; model.dropout must be in \[0, 1\)")],
)  # fmt: skip
def test_bad_activation_or_dropout_is_a_config_error(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_model({"name": "vgg11", key: value}, factory("bn"))


@pytest.mark.parametrize("width", [0.25, 0.5])
def test_width_scales_every_conv_and_the_classifier(width: float) -> None:
    """``model.width``: every conv's c_out (and the next c_in, and the classifier's 512) times width:
    the parameter count of the hand-listed convs scaled so; module names as at width 1."""
    model = build_model({"name": "vgg11", "width": width}, factory("bn"))
    convs = [(3 if c_in == 3 else int(c_in * width), int(c_out * width)) for c_in, c_out in CONVS["vgg11"]]
    want = sum(i * o * 9 + o for i, o in convs) + 2 * sum(o for _, o in convs) + int(512 * width) * 10 + 10
    assert sum(p.numel() for p in model.parameters()) == want
    full = build_model({"name": "vgg11"}, factory("bn"))
    assert [n for n, _ in model.named_modules()] == [n for n, _ in full.named_modules()]
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("width", [0.0, -1.0])
def test_a_width_that_is_not_positive_is_a_config_error(width: float) -> None:
    with pytest.raises(ConfigError, match="model.width"):
        build_model({"name": "vgg11", "width": width}, factory("bn"))
