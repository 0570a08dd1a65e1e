"""Optimizers and learning-rate schedules. `lr_factor` is a pure function of the step."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normbench.base.errors import ConfigError, require, require_in, require_positive

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "step", "cosine", "inverse_sqrt")


@dataclass
class OptimizerConfig:
    name: str = "sgd"
    """``sgd`` | ``adam`` | ``adamw``."""
    momentum: float = 0.9
    nesterov: bool = False
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    no_decay_norm_and_bias: bool = False
    """No weight decay on the norms' γ/β and on biases (the timm / torchvision / nanoGPT
    convention); off by default, so results made without it stand."""

    def __post_init__(self) -> None:
        check_name("optimizer.name", self.name, OPTIMIZERS)
        require_in("optimizer.momentum", self.momentum, "[0, 1)")
        if self.name == "sgd":  # torch's SGD refuses Nesterov without momentum (at its first step)
            nesterov = "false with optimizer.momentum=0 (Nesterov needs momentum)"
            require(not self.nesterov or self.momentum > 0, "optimizer.nesterov", self.nesterov, nesterov)
        betas = list(self.betas)
        require(len(betas) == 2, "optimizer.betas", betas, "two values [beta1, beta2], each in [0, 1)")
        for i, beta in enumerate(betas):
            require_in(f"optimizer.betas[{i}]", beta, "[0, 1)")
        require_positive("optimizer.eps", self.eps)


@dataclass
class ScheduleConfig:
    name: str = "cosine"
    """``constant`` | ``step`` | ``cosine`` | ``inverse_sqrt``."""
    warmup_steps: int = 0
    """Linear warm-up from 0 to ``lr`` over this many steps (all schedules)."""
    milestones: list[float] = field(default_factory=lambda: [0.5, 0.75])
    """``step``: fractions of the total steps where the lr is multiplied by ``gamma``."""
    gamma: float = 0.1
    min_lr_ratio: float = 0.0
    """``cosine``: the final lr as a fraction of ``lr``."""

    def __post_init__(self) -> None:
        """Every value such that `lr_factor` is finite and >= 0 at every step: a negative lr would
        ascend the loss (and be logged as if it were a run)."""
        check_name("schedule.name", self.name, SCHEDULES)
        require(self.warmup_steps >= 0, "schedule.warmup_steps", self.warmup_steps, ">= 0 (0: no warm-up)")
        for i, milestone in enumerate(self.milestones):
            require_in(f"schedule.milestones[{i}]", milestone, "[0, 1]")  # fractions of the run's steps
        require_positive("schedule.gamma", self.gamma)
        require_in("schedule.min_lr_ratio", self.min_lr_ratio, "[0, 1]")


def check_name(key: str, name: str, valid: tuple[str, ...]) -> None:
    if name not in valid:
        raise ConfigError(f"{key}={name!r} is not registered; valid choices: {', '.join(valid)}")


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


def build_optimizer(model: nn.Module, cfg: OptimizerConfig, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    params = parameter_groups(model, weight_decay, cfg.no_decay_norm_and_bias)
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=weight_decay)
    cls = torch.optim.Adam if cfg.name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=weight_decay)


def lr_factor(step: int, cfg: ScheduleConfig, total_steps: int) -> float:
    """Multiplier of the base lr at optimizer step ``step`` (0-based)."""
    warmup = cfg.warmup_steps
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if cfg.name == "constant":
        return 1.0
    if cfg.name == "step":
        passed = sum(step >= m * total_steps for m in cfg.milestones)
        return cfg.gamma**passed
    if cfg.name == "cosine":
        span = max(total_steps - warmup, 1)
        t = min(max(step - warmup, 0) / span, 1.0)
        lo = cfg.min_lr_ratio
        return lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * t))
    return math.sqrt(max(warmup, 1)) / math.sqrt(max(step + 1, warmup, 1))  # inverse_sqrt
