"""The diagnostics registry and the hook protocol the runner calls.

A diagnostic is a pure function at its core (``compute(...) -> dict[str, float]``) and a thin
hook built by ``builder(cfg) -> Hook``. The runner calls ``hook.due(step)`` before each training
step and, when due, ``hook(ctx)`` with the step's `DiagContext`; the returned keys are logged as
``diag/<name>/<metric>``. A hook must leave parameters, buffers, optimizer state and RNG
streams as it found them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from normbench.registry import Registry


@dataclass
class DiagContext:
    model: nn.Module
    batch: Any
    loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    """``loss_fn(model, batch)``: the training loss of this step, as the step computes it."""
    optimizer: torch.optim.Optimizer
    step: int
    epoch: int
    lr: float
    extra: dict[str, Any] = field(default_factory=dict)


class Hook(Protocol):
    name: str

    def due(self, step: int) -> bool: ...

    def __call__(self, ctx: DiagContext) -> dict[str, float]: ...


DIAGNOSTICS: Registry[Callable[..., Hook]] = Registry("diagnostic")


@dataclass
class CadenceConfig:
    """When a diagnostic runs: every N steps (0 = off), or at an explicit list of steps."""

    every_n_steps: int = 0
    steps: list[int] = field(default_factory=list)


def is_due(cfg: Mapping[str, Any], step: int) -> bool:
    every = int(cfg.get("every_n_steps", 0) or 0)
    return (every > 0 and step % every == 0) or step in set(cfg.get("steps", []) or [])


def register_diagnostic(
    name: str, config: type = CadenceConfig
) -> Callable[[Callable[..., Hook]], Callable[..., Hook]]:
    return DIAGNOSTICS.register(name, config)


def list_diagnostics() -> list[str]:
    return DIAGNOSTICS.names()


def build_diagnostics(cfg: Mapping[str, Any]) -> list[Hook]:
    """Hooks for every diagnostic named in ``cfg`` (``cfg.diagnostics``) that is switched on."""
    hooks = []
    for name, sub in dict(cfg or {}).items():
        builder = DIAGNOSTICS.get(name)
        if sub and (int(sub.get("every_n_steps", 0) or 0) > 0 or sub.get("steps")):
            hooks.append(builder(sub))
    return hooks
