"""Which parts of a model the per-layer diagnostics look at."""

from __future__ import annotations

from torch import nn

from normbench.norms.base import Norm


def model_layers(model: nn.Module) -> list[tuple[str, list[nn.Parameter]]]:
    """(module name, its own trainable parameters) for each module that has any, in registration order.

    Registration order is the forward order in normbench's models; the root module is ``model``.
    A parameter shared by several modules (tied weights) belongs to the first.
    """
    layers, seen = [], set()
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in own)
        if own:
            layers.append((name or "model", own))
    return layers


def norm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(module name, module) for each normbench norm (`Norm` subclass, ``none`` included), in order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Norm)]
