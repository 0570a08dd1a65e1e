"""Optimizers and learning-rate schedules. `lr_factor` is a pure function of the step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normbench.errors import ConfigError

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "step", "cosine", "inverse_sqrt")


@dataclass
class OptimizerConfig:
    name: str = "sgd"
    momentum: float = 0.9
    nesterov: bool = False
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    no_decay_norm_and_bias: bool = False
    """No weight decay on the norms' γ/β and on biases (the timm / torchvision / nanoGPT
    convention); off by default, so results made without it stand."""


@dataclass
class ScheduleConfig:
    name: str = "cosine"
    warmup_steps: int = 0
    """Linear warm-up from 0 to ``lr`` over this many steps (all schedules)."""
    milestones: list[float] = field(default_factory=lambda: [0.5, 0.75])
    """``step``: fractions of the total steps where the lr is multiplied by ``gamma``."""
    gamma: float = 0.1
    min_lr_ratio: float = 0.0
    """``cosine``: the final lr as a fraction of ``lr``."""


def parameter_groups(model: nn.Module, weight_decay: float, no_decay_norm_and_bias: bool) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: one with ``weight_decay``, and with
    ``no_decay_norm_and_bias`` a second, without decay, holding every parameter of a norm (a
    `normbench.norms.base.Norm`, or any module of torch's norm classes) and every bias."""
    from normbench.norms.base import Norm

    norm_types = (Norm, nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            exempt = no_decay_norm_and_bias and (isinstance(module, norm_types) or name == "bias")
            (no_decay if exempt else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    name = cfg["name"]
    params = parameter_groups(model, weight_decay, bool(cfg.get("no_decay_norm_and_bias", False)))
    if name == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=cfg["momentum"], nesterov=cfg["nesterov"], weight_decay=weight_decay
        )
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=lr, betas=tuple(cfg["betas"]), eps=cfg["eps"], weight_decay=weight_decay)
    raise ConfigError(f"unknown optimizer.name {name!r}; valid choices: {', '.join(OPTIMIZERS)}")


def lr_factor(step: int, cfg: Mapping[str, Any], total_steps: int) -> float:
    """Multiplier of the base lr at optimizer step ``step`` (0-based)."""
    name, warmup = cfg["name"], int(cfg["warmup_steps"])
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if name == "constant":
        return 1.0
    if name == "step":
        passed = sum(step >= m * total_steps for m in cfg["milestones"])
        return float(cfg["gamma"]) ** passed
    if name == "cosine":
        span = max(total_steps - warmup, 1)
        t = min(max(step - warmup, 0) / span, 1.0)
        lo = float(cfg["min_lr_ratio"])
        return lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * t))
    if name == "inverse_sqrt":
        return math.sqrt(max(warmup, 1)) / math.sqrt(max(step + 1, warmup, 1))
    raise ConfigError(f"unknown schedule.name {name!r}; valid choices: {', '.join(SCHEDULES)}")
