"""A fully connected network on flattened images: Ioffe & Szegedy 2015's own baseline (§4.1: an
MNIST network of 3 hidden layers of 100 sigmoid units, each ``x = Wu + b`` followed by BN before
the nonlinearity, and a linear classifier), the network of its Fig. 1 (the distribution of a
sigmoid's input over training, with and without BN).

Each hidden layer is linear → norm → activation (``activation``: sigmoid, the paper's; tanh or
ReLU). The norm sees the layer's output as ``(N, 1, C)`` in the ``NTC`` layout: one "token" per
image, so BN normalizes each unit over the batch (BN1d), LayerNorm over a sample's units, RMSNorm
by their RMS; and the model never asks which norm it holds. Module names: ``features.<k>.linear``,
``features.<k>.norm``, ``classifier`` (the same in every arm, so the k-th weight layer of a BN net is
the k-th of a standard one).

Initialization (``init``): ``glorot`` (Xavier-uniform, as normbench's VGG; the paper says "small
random Gaussian values") or ``kaiming`` (He-normal on the fan-in with the activation's gain; the
classifier with the identity's gain); biases zero. Norms keep their own ``reset_parameters``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from normbench.base.errors import ConfigError, require
from normbench.models.registry import ModelConfig, register_model
from normbench.models.vgg import ACTIVATIONS, INITS
from normbench.norms.base import Norm
from normbench.norms.registry import NormLayer


def check_depends_on_its_input(norm: nn.Module, width: int) -> None:
    """A `ConfigError` for a norm that, on one token per sample, normalizes over a single value
    (instance norm, or group norm with one unit per group, over T = 1): its training output is then
    its bias whatever the input, and the net cannot learn. Read on a copy (the norm's running
    statistics untouched), from a generator of its own (the run's draws untouched)."""
    if not isinstance(norm, Norm) or any(t.is_meta for t in (*norm.parameters(), *norm.buffers())):
        return  # a probe or a shapes-only build: nothing to run
    probe = copy.deepcopy(norm).train()
    x = torch.randn(4, 1, width, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = probe(x)
    if (y - y[:1]).abs().max() <= 1e-3:  # the unit-scale input moves every other norm's output by O(1)
        raise ConfigError(
            f"{type(norm).__name__} normalizes over {type(norm).normalizes_over('NTC')}: model=mlp gives it one "
            "token per sample, a single value, so its output is its bias whatever the input; choose a norm over the "
            "batch or the units (e.g. norm=bn, ln or rms)"
        )


class LinearNormAct(nn.Module):
    """linear → norm (over the ``(N, 1, C)`` view) → activation."""

    def __init__(self, d_in: int, d_out: int, norm_layer: NormLayer, activation: str) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.norm = norm_layer(d_out, "NTC")
        check_depends_on_its_input(self.norm, d_out)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return ACTIVATIONS[self.activation](self.norm(self.linear(x).unsqueeze(1)).squeeze(1))

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


class MLP(nn.Module):
    def __init__(
        self,
        d_in: int,
        hidden: list[int],
        norm_layer: NormLayer,
        num_classes: int = 10,
        init: str = "glorot",
        activation: str = "sigmoid",
    ) -> None:
        super().__init__()
        if init not in INITS:
            raise ConfigError(f"model.init={init!r}; valid choices: {', '.join(INITS)}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"model.activation={activation!r}; valid choices: {', '.join(ACTIVATIONS)}")
        self.activation = activation
        widths = [d_in, *hidden]
        self.features = nn.Sequential(
            *(LinearNormAct(a, b, norm_layer, activation) for a, b in zip(widths, widths[1:], strict=False))
        )
        self.classifier = nn.Linear(widths[-1], num_classes)
        self.reset_parameters(init)

    def reset_parameters(self, init: str = "glorot") -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                if init == "glorot":
                    nn.init.xavier_uniform_(m.weight)
                else:
                    gain = "linear" if m is self.classifier else self.activation
                    nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity=gain)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x.flatten(1)))  # (B, C·H·W) → (B, classes)


@dataclass
class MLPConfig(ModelConfig):
    hidden: list[int] = field(default_factory=lambda: [100, 100, 100])
    """Units of each hidden layer, input → output (Ioffe & Szegedy's MNIST net: 3 × 100)."""
    activation: str = "sigmoid"
    """``sigmoid`` (the paper's) | ``tanh`` | ``relu``."""
    init: str = "glorot"
    """``glorot`` | ``kaiming``."""

    def __post_init__(self) -> None:
        require(len(self.hidden) > 0 and all(int(h) > 0 for h in self.hidden), "model.hidden", list(self.hidden),
                "a non-empty list of positive layer widths, e.g. [100, 100, 100]")  # fmt: skip


@register_model("mlp", MLPConfig, input_kind="image")
def mlp(
    cfg: MLPConfig, norm_layer: NormLayer, num_classes: int = 10, image_shape: tuple[int, ...] = (3, 32, 32), **_: Any
) -> nn.Module:
    """``image_shape``: (C, H, W) of the task's images (the task's ``model_kwargs``; CIFAR's by default)."""
    return MLP(math.prod(image_shape), [int(u) for u in cfg.hidden], norm_layer, num_classes, cfg.init, cfg.activation)
