"""The sigmoid MLP (Ioffe & Szegedy 2015, §4.1) with every norm: exact parameter counts, the paper's
block (Wu + b → BN → sigmoid, BN1d per unit), both inits, the task's image shape."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normbench.base.errors import ConfigError
from normbench.diagnostics.layers import model_layers, norm_layers
from normbench.models import build_model
from normbench.norms import build_norm, list_norms, norm_factory
from normbench.norms.batch import BatchNorm

NORM_KW = {"gn": {"groups": 4}}
LINEARS = [(3072, 100), (100, 100), (100, 100)]  # the paper's 3 hidden layers of 100, on 3x32x32 inputs


# normalizes over T per sample (and channel): one value on the MLP's (N, 1, C) view, refused
OVER_ONE_VALUE = {"in"}
TRAINABLE = [n for n in list_norms() if n not in OVER_ONE_VALUE]


def factory(name: str):
    return norm_factory({"name": name, **NORM_KW.get(name, {})})


def per_unit_params(name: str) -> int:
    return sum(p.numel() for p in build_norm(name, 100, "NTC", **NORM_KW.get(name, {})).parameters()) // 100


@pytest.mark.parametrize("norm", TRAINABLE)
def test_parameter_count(norm: str) -> None:
    model = build_model({"name": "mlp"}, factory(norm))
    weights = sum(a * b + b for a, b in LINEARS) + 100 * 10 + 10
    assert sum(p.numel() for p in model.parameters()) == weights + per_unit_params(norm) * 300


@pytest.mark.parametrize("norm", TRAINABLE)
def test_every_norm_trains_a_step_and_no_batchnorm_is_left(norm: str) -> None:
    torch.manual_seed(0)
    model = build_model({"name": "mlp"}, factory(norm))
    has_bn = any(isinstance(m, (nn.modules.batchnorm._BatchNorm, BatchNorm)) for m in model.modules())
    assert has_bn == isinstance(build_norm(norm, 16, "NTC", **NORM_KW.get(norm, {})), BatchNorm)
    out = model(torch.randn(4, 3, 32, 32))
    out.sum().backward()
    assert out.shape == (4, 10) and torch.isfinite(out).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize(("norm", "kw"), [("in", {}), ("gn", {"groups": 100})])
def test_a_norm_over_one_value_per_sample_is_refused_in_one_line(norm: str, kw: dict) -> None:
    """Instance norm (and group norm with one unit per group) over T = 1: x − mean is 0, so the output
    is β whatever the input (checked here by hand); the model refuses it, and every other norm of the
    registry builds (`test_every_norm_trains_a_step_and_no_batchnorm_is_left`)."""
    layer = build_norm(norm, 100, "NTC", **kw).train()
    x = torch.randn(4, 1, 100)
    assert torch.allclose(layer(x), layer.bias.expand(4, 1, 100), atol=1e-4)
    with pytest.raises(ConfigError, match="one token per sample, a single value") as e:
        build_model({"name": "mlp"}, norm_factory({"name": norm, **kw}))
    assert "\n" not in str(e.value)


def test_the_check_leaves_the_runs_draws_and_the_norms_statistics_alone() -> None:
    """Building the MLP draws what its layers' initialization draws, nothing more (the check's input
    comes from a generator of its own), and leaves BN's running statistics at their start."""
    torch.manual_seed(0)
    model = build_model({"name": "mlp"}, factory("bn"))
    after_model = torch.rand(1)
    torch.manual_seed(0)
    linears = [nn.Linear(a, b) for a, b in [*LINEARS, (100, 10)]]  # construction order, then the init
    for layer in linears:
        nn.init.xavier_uniform_(layer.weight)
    assert torch.equal(torch.rand(1), after_model)
    assert all(torch.equal(blk.norm.running_mean, torch.zeros(100)) for blk in model.features)
    assert all(int(blk.norm.num_batches_tracked) == 0 for blk in model.features)


def test_bn_block_is_the_papers_bn1d_before_the_sigmoid() -> None:
    """x = Wu + b, each unit normalized over the batch (torch's BatchNorm1d, train mode), then σ."""
    torch.manual_seed(0)
    model = build_model({"name": "mlp"}, factory("bn")).train()
    block, u = model.features[1], torch.randn(32, 100)
    reference = nn.BatchNorm1d(100, eps=block.norm.eps, momentum=0.1)
    want = torch.sigmoid(reference(block.linear(u)))
    torch.testing.assert_close(block(u), want, rtol=1e-5, atol=1e-6)


def test_module_names_are_the_same_in_every_arm() -> None:
    """The k-th weight layer and the k-th norm position keep their names whatever the norm (the
    saturation diagnostic's keys and the rules' ``first: features.0.linear``)."""
    names = {n: [name for name, _ in model_layers(build_model({"name": "mlp"}, factory(n)))] for n in ("none", "bn")}
    linear = ["features.0.linear", "features.1.linear", "features.2.linear", "classifier"]
    assert names["none"] == linear
    assert [n for n in names["bn"] if not n.endswith(".norm")] == linear
    assert [n for n, _ in norm_layers(build_model({"name": "mlp"}, factory("none")))] == [
        f"features.{k}.norm" for k in range(3)
    ]


@pytest.mark.parametrize("init", ["glorot", "kaiming"])
def test_init_follows_its_formula(init: str) -> None:
    torch.manual_seed(0)
    model = build_model({"name": "mlp", "init": init}, factory("none"))
    w = model.features[0].linear.weight.detach()  # 3072 -> 100
    if init == "glorot":  # U(-a, a), a = sqrt(6 / (fan_in + fan_out))
        bound = math.sqrt(6 / (3072 + 100))
        assert w.abs().max() <= bound
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    else:  # N(0, gain² / fan_in), sigmoid's gain 1
        assert w.std().item() == pytest.approx(1 / math.sqrt(3072), rel=0.02)
    assert all(torch.count_nonzero(m.bias) == 0 for m in model.modules() if isinstance(m, nn.Linear))


def test_the_input_width_comes_from_the_tasks_image_shape() -> None:
    model = build_model({"name": "mlp", "hidden": [7]}, factory("bn"), num_classes=3, image_shape=(1, 28, 28))
    assert model.features[0].linear.in_features == 784 and model.classifier.out_features == 3
    assert model(torch.randn(5, 1, 28, 28)).shape == (5, 3)


def test_the_image_task_gives_its_image_shape() -> None:
    from normbench.tasks.classification import ImageClassificationTask

    images, labels = torch.zeros(4, 3, 8, 6, dtype=torch.uint8), torch.zeros(4, dtype=torch.long)
    task = ImageClassificationTask(
        train_images=images, train_labels=labels, test_images=images, test_labels=labels, num_classes=2,
        batch_size=2, eval_batch_size=2, augment=False, device=torch.device("cpu"),
    )  # fmt: skip
    assert task.model_kwargs() == {"num_classes": 2, "image_shape": (3, 8, 6)}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hidden", [], "model.hidden=[] is not allowed"),
        ("hidden", [100, 0], "model.hidden=[100, 0] is not allowed"),
        ("activation", "gelu", "model.activation='gelu'; valid choices: relu, tanh, sigmoid"),
        ("init", "xavier", "model.init='xavier'; valid choices: glorot, kaiming"),
    ],
)
def test_bad_values_are_config_errors(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_model({"name": "mlp", key: value}, factory("bn"))
