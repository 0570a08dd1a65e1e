"""VGG for CIFAR-10 (Simonyan & Zisserman 2015, configurations A and D), the network of
Santurkar et al. 2018 ("How does batch normalization help optimization?").

3×3 convs (padding 1, with bias, so that the network without a norm — ``norm=none``, the paper's
"standard" VGG — keeps its biases), each followed by the norm and the activation (``activation``:
ReLU, or tanh / sigmoid for the saturation experiments); a 2×2 max-pool ends each stage, so 32×32
inputs end at 512×1×1; a linear classifier on those 512 features. ``dropout`` p > 0: dropout
before the classifier, and with ``dropout_at="blocks"`` (the default) also after every conv block's
activation, as CIFAR VGGs with dropout do; ``dropout_at="classifier"``: before the classifier only,
as Inception (Szegedy et al. 2015) and Simonyan & Zisserman's VGG place it (training only; off by
default).
Module names and indices are the same whatever the activation, dropout and width. ``width``
multiplies every conv's channel count (0.25: 16 … 128 channels, about 1/16 of the parameters and
of the compute; rounded, at least 1): a narrower VGG of the same depth and layout, for CPU presets
that train it for several epochs rather than stop the full width after a hundred steps.

Initialization (``init``): ``glorot`` (Xavier-uniform on every conv and the classifier, what
Santurkar et al. used) or ``kaiming`` (He-normal, fan-out, with the activation's gain, on the convs;
the classifier He-normal on its fan-in with the identity's gain, std 1/sqrt(512) ≈ 0.044, since no
activation follows it: the fan-out form on a 512 → 10 layer, std sqrt(2/10) ≈ 0.45, gave a BN VGG
initial logits of std ~8 and a training loss of 11 after 20 steps); biases zero in both. Norms keep
their own ``reset_parameters``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.base.errors import ConfigError, require, require_in
from normbench.models.registry import ModelConfig, register_model
from normbench.norms.registry import NormLayer

POOL = "M"
STAGES: dict[str, list[int | str]] = {
    "vgg11": [64, POOL, 128, POOL, 256, 256, POOL, 512, 512, POOL, 512, 512, POOL],
    "vgg16": [64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512, POOL, 512, 512, 512, POOL],
}
INITS = ("glorot", "kaiming")
DROPOUT_AT = ("blocks", "classifier")
ACTIVATIONS = {"relu": F.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


class ConvNormAct(nn.Module):
    """conv → norm → activation (→ dropout when p > 0, in training)."""

    def __init__(
        self, c_in: int, c_out: int, norm_layer: NormLayer, activation: str = "relu", dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = norm_layer(c_out, "NCHW")
        self.activation, self.dropout = activation, dropout

    def forward(self, x: Tensor) -> Tensor:
        y = ACTIVATIONS[self.activation](self.norm(self.conv(x)))
        return F.dropout(y, self.dropout, self.training) if self.dropout > 0 else y

    def extra_repr(self) -> str:
        return f"activation={self.activation}" + (f", dropout={self.dropout:g}" if self.dropout > 0 else "")


class VGG(nn.Module):
    def __init__(
        self,
        layout: list[int | str],
        norm_layer: NormLayer,
        num_classes: int = 10,
        init: str = "glorot",
        activation: str = "relu",
        dropout: float = 0.0,
        dropout_at: str = "blocks",
        width: float = 1.0,
    ) -> None:
        super().__init__()
        if not width > 0:
            raise ConfigError(f"model.width={width}; valid: a positive multiplier of the channels (1: the paper's)")
        if init not in INITS:
            raise ConfigError(f"model.init={init!r}; valid choices: {', '.join(INITS)}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"model.activation={activation!r}; valid choices: {', '.join(ACTIVATIONS)}")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"model.dropout={dropout}; valid: a probability in [0, 1)")
        if dropout_at not in DROPOUT_AT:
            raise ConfigError(f"model.dropout_at={dropout_at!r}; valid choices: {', '.join(DROPOUT_AT)}")
        self.activation, self.dropout = activation, dropout
        block_dropout = dropout if dropout_at == "blocks" else 0.0
        layers: list[nn.Module] = []
        c_in = 3
        for item in layout:
            if item == POOL:
                layers.append(nn.MaxPool2d(2))
            else:
                c_out = max(1, round(int(item) * width))
                layers.append(ConvNormAct(c_in, c_out, norm_layer, activation, block_dropout))
                c_in = c_out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c_in, num_classes)
        self.reset_parameters(init)

    def reset_parameters(self, init: str = "glorot") -> None:
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                if init == "glorot":
                    nn.init.xavier_uniform_(m.weight)
                elif isinstance(m, nn.Linear):
                    nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="linear")
                else:
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity=self.activation)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x).flatten(1)  # (B, 512·width) for 32×32 inputs
        if self.dropout > 0:
            x = F.dropout(x, self.dropout, self.training)
        return self.classifier(x)  # (B, classes)


@dataclass
class VGGConfig(ModelConfig):
    init: str = "glorot"
    """``glorot`` (Santurkar et al.) | ``kaiming``."""
    activation: str = "relu"
    """``relu`` | ``tanh`` | ``sigmoid`` (saturating: BN's "keeps activations out of saturation")."""
    dropout: float = 0.0
    """Dropout probability before the classifier and, with ``dropout_at=blocks``, after every conv
    block (0: none)."""
    dropout_at: str = "blocks"
    """``blocks`` (after every conv block and before the classifier) | ``classifier`` (before it only)."""
    width: float = 1.0
    """Multiplier of every conv's channels (1: the paper's 64 … 512; 0.25: 16 … 128)."""

    def __post_init__(self) -> None:
        require_in("model.dropout", self.dropout, "[0, 1)")  # NaN too, when the config is parsed
        require(self.width > 0, "model.width", self.width, "a positive multiplier of the channels (1: the paper's)")


def _vgg(name: str, cfg: VGGConfig, norm_layer: NormLayer, num_classes: int) -> VGG:
    return VGG(STAGES[name], norm_layer, num_classes, cfg.init, cfg.activation, cfg.dropout, cfg.dropout_at, cfg.width)


@register_model("vgg11", VGGConfig, input_kind="image")
def vgg11(cfg: VGGConfig, norm_layer: NormLayer, num_classes: int = 10, **_: Any) -> nn.Module:
    return _vgg("vgg11", cfg, norm_layer, num_classes)


@register_model("vgg16", VGGConfig, input_kind="image")
def vgg16(cfg: VGGConfig, norm_layer: NormLayer, num_classes: int = 10, **_: Any) -> nn.Module:
    return _vgg("vgg16", cfg, norm_layer, num_classes)
