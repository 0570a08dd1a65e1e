"""ResNet for CIFAR (He et al. 2016, section 4.2): 6n+2 layers, ResNet20 at n = 3.

stem 3×3 conv (16) → 3 stages of n basic blocks (16, 32, 64 channels, stride 1, 2, 2)
→ global average pool → linear 64 → classes. The norm is injected once (``norm_layer``) and
used after every conv, the projection shortcut included.

Shortcuts where the shape changes: option ``A`` (the paper's CIFAR choice: identity on every
second pixel, zero-padded channels, no parameters) or option ``B`` (1×1 conv + norm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from normbench.base.errors import ConfigError, require
from normbench.models.registry import ModelConfig, register_model
from normbench.norms.registry import NormLayer


def conv3x3(c_in: int, c_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)


class PadShortcut(nn.Module):
    """Option A: subsample by ``stride`` and zero-pad the new channels on both sides."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad_before = (c_out - c_in) // 2
        self.pad_after = c_out - c_in - self.pad_before

    def forward(self, x: Tensor) -> Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad_before, self.pad_after))


class ProjectionShortcut(nn.Module):
    """Option B: 1×1 conv with stride, then the norm."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm_layer: NormLayer) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)
        self.norm = norm_layer(c_out, "NCHW")

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.conv(x))


class BasicBlock(nn.Module):
    """conv → norm → ReLU → conv → norm, plus the shortcut, then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm_layer: NormLayer, shortcut: str) -> None:
        super().__init__()
        self.conv1 = conv3x3(c_in, c_out, stride)
        self.norm1 = norm_layer(c_out, "NCHW")
        self.conv2 = conv3x3(c_out, c_out)
        self.norm2 = norm_layer(c_out, "NCHW")
        if stride == 1 and c_in == c_out:
            self.shortcut: nn.Module = nn.Identity()
        elif shortcut == "A":
            self.shortcut = PadShortcut(c_in, c_out, stride)
        else:
            self.shortcut = ProjectionShortcut(c_in, c_out, stride, norm_layer)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))  # (B, C_out, H', W')
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(
        self,
        depth: int,
        norm_layer: NormLayer,
        num_classes: int = 10,
        shortcut: str = "A",
        widths: tuple[int, int, int] = (16, 32, 64),
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        if (depth - 2) % 6:
            raise ConfigError(f"model.depth={depth} is not 6n+2 (20, 32, 44, 56, 110, ...)")
        if shortcut not in ("A", "B"):
            raise ConfigError(f"model.shortcut={shortcut!r}; valid choices: A, B")
        n = (depth - 2) // 6
        self.conv1 = conv3x3(3, widths[0])
        self.norm1 = norm_layer(widths[0], "NCHW")
        stages, c_in = [], widths[0]
        for i, width in enumerate(widths):
            blocks = []
            for j in range(n):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(BasicBlock(c_in, width, stride, norm_layer, shortcut))
                c_in = width
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c_in, num_classes)
        self.reset_parameters(zero_init_residual)

    def reset_parameters(self, zero_init_residual: bool = False) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.kaiming_uniform_(m.weight, a=5**0.5)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                weight = getattr(getattr(m, "norm2", None), "weight", None) if isinstance(m, BasicBlock) else None
                if weight is not None:
                    nn.init.zeros_(weight)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.norm1(self.conv1(x)))  # (B, 16, 32, 32)
        x = self.stages(x)  # (B, 64, 8, 8)
        x = x.mean(dim=(2, 3))  # (B, 64)
        return self.fc(x)


@dataclass
class ResNetConfig(ModelConfig):
    depth: int = 20
    """6n + 2 (20, 32, 44, 56, 110, …): 3 stages × n basic blocks."""
    shortcut: str = "A"
    """``A``: zero-padded identity (the paper's CIFAR choice) | ``B``: 1x1 conv + norm."""
    zero_init_residual: bool = False

    def __post_init__(self) -> None:  # the constructor checks 6n+2, and the shortcut, for direct use too
        allowed = "6n+2 with n >= 1 (8, 20, 32, 44, 56, 110, ...)"
        require(self.depth >= 8 and (self.depth - 2) % 6 == 0, "model.depth", self.depth, allowed)


@register_model("resnet20", ResNetConfig, input_kind="image")
def resnet20(cfg: ResNetConfig, norm_layer: NormLayer, num_classes: int = 10, **_: Any) -> nn.Module:
    return CifarResNet(
        cfg.depth, norm_layer, num_classes=num_classes, shortcut=cfg.shortcut, zero_init_residual=cfg.zero_init_residual
    )
