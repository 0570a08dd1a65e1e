"""VGG for CIFAR-10 (Simonyan & Zisserman 2015, configurations A and D), the network of
Santurkar et al. 2018 ("How does batch normalization help optimization?").

3×3 convs (padding 1, with bias, so that the network without a norm — ``norm=none``, the paper's
"standard" VGG — keeps its biases), each followed by the norm and a ReLU; a 2×2 max-pool ends each
stage, so 32×32 inputs end at 512×1×1; a linear classifier on those 512 features.

Initialization (``init``): ``glorot`` (Xavier-uniform, what Santurkar et al. used) or ``kaiming``
(He-normal, fan-out, for ReLU); biases zero in both. Norms keep their own ``reset_parameters``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from normbench.errors import ConfigError
from normbench.models.registry import ModelConfig, register_model
from normbench.norms.registry import NormLayer

POOL = "M"
STAGES: dict[str, list[int | str]] = {
    "vgg11": [64, POOL, 128, POOL, 256, 256, POOL, 512, 512, POOL, 512, 512, POOL],
    "vgg16": [64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512, POOL, 512, 512, 512, POOL],
}
INITS = ("glorot", "kaiming")


class ConvNormReLU(nn.Module):
    def __init__(self, c_in: int, c_out: int, norm_layer: NormLayer) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = norm_layer(c_out, "NCHW")

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.norm(self.conv(x)))


class VGG(nn.Module):
    def __init__(
        self, layout: list[int | str], norm_layer: NormLayer, num_classes: int = 10, init: str = "glorot"
    ) -> None:
        super().__init__()
        if init not in INITS:
            raise ConfigError(f"model.init={init!r}; valid choices: {', '.join(INITS)}")
        layers: list[nn.Module] = []
        c_in = 3
        for item in layout:
            if item == POOL:
                layers.append(nn.MaxPool2d(2))
            else:
                layers.append(ConvNormReLU(c_in, int(item), norm_layer))
                c_in = int(item)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c_in, num_classes)
        self.reset_parameters(init)

    def reset_parameters(self, init: str = "glorot") -> None:
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                if init == "glorot":
                    nn.init.xavier_uniform_(m.weight)
                else:
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)  # (B, 512, 1, 1) for 32×32 inputs
        return self.classifier(x.flatten(1))  # (B, classes)


@dataclass
class VGGConfig(ModelConfig):
    init: str = "glorot"
    """``glorot`` (Santurkar et al.) | ``kaiming``."""


@register_model("vgg11", VGGConfig, input_kind="image")
def vgg11(cfg: VGGConfig, norm_layer: NormLayer, num_classes: int = 10, **_: Any) -> nn.Module:
    return VGG(STAGES["vgg11"], norm_layer, num_classes, cfg.init)


@register_model("vgg16", VGGConfig, input_kind="image")
def vgg16(cfg: VGGConfig, norm_layer: NormLayer, num_classes: int = 10, **_: Any) -> nn.Module:
    return VGG(STAGES["vgg16"], norm_layer, num_classes, cfg.init)
