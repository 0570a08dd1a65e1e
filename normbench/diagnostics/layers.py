"""Which parts of a model the per-layer diagnostics look at."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from torch import Tensor, nn

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


T = TypeVar("T")


@contextmanager
def first_calls(
    model: nn.Module, capture: Callable[[nn.Module, Tensor, Tensor | None, Any], T]
) -> Iterator[dict[str, T]]:
    """While inside: for each normbench norm, ``capture(module, input, mask, output)`` of its first
    call (mask: the call's ``mask`` argument, or None), by layer name; the forward hooks are removed
    on leaving."""
    seen: dict[str, T] = {}

    def record(name: str, module: nn.Module):
        def hook(mod: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            if name not in seen:
                mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
                seen[name] = capture(mod, args[0], mask, output)

        return module.register_forward_hook(hook, with_kwargs=True)

    handles = [record(name, m) for name, m in norm_layers(model)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
