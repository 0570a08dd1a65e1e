"""Snapshots of the training state, so that diagnostics leave training exactly as they found it
and every evaluation inside a diagnostic sees the function the training step sees.

`RngState`: the python, numpy, torch CPU and CUDA generators. `ModelState`: what a forward
reads besides the parameters and the input — every buffer of every module (BN running
statistics, PowerNorm's running ψ² and ``ema_gz``, step counters; persistent or not), each
module's extra state (``get_extra_state``, for modules that define it) and each module's
train/eval mode. `TrainingState`: a `ModelState` plus the parameters, their ``.grad``, the
optimizer's per-parameter state and param-group settings, and the RNG streams. ``restore()``
puts the saved values back bit for bit and may be called any number of times.

A norm that keeps state anywhere else (a plain tensor attribute, a private generator) is not
seen here: stateful norms keep their state in buffers or in ``get_extra_state``.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn


@dataclass
class RngState:
    python: Any
    numpy: Any
    torch_cpu: Tensor
    cuda: list[Tensor] | None

    @classmethod
    def capture(cls) -> RngState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        return cls(random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda)

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def _clone(v: Any) -> Any:
    return v.detach().clone() if isinstance(v, Tensor) else copy.deepcopy(v)


def _put(container: dict[Any, Any], key: Any, saved: Any) -> None:
    """``container[key] = saved``, in place when the current value is a tensor of the same kind."""
    current = container.get(key)
    if (
        isinstance(saved, Tensor)
        and isinstance(current, Tensor)
        and current.shape == saved.shape
        and current.dtype == saved.dtype
        and current.device == saved.device
    ):
        with torch.no_grad():
            current.copy_(saved)
    else:
        container[key] = _clone(saved)


def _has_extra_state(module: nn.Module) -> bool:
    return type(module).get_extra_state is not nn.Module.get_extra_state


class ModelState:
    """Every module's buffers, extra state and train/eval mode; `restore` puts them back exactly.

    Buffers are saved per module and name, with the tensor object each name held: `restore`
    copies the saved values into that very tensor and puts it back under its name (a norm that
    reassigns a buffer, or registers a new one, finds the original again), and drops buffers
    registered since the capture. Extra state is deep-copied both ways.
    """

    def __init__(self, model: nn.Module) -> None:
        self.buffers: list[tuple[nn.Module, dict[str, tuple[Tensor | None, Tensor | None]], set[str]]] = []
        self.extra: list[tuple[nn.Module, Any]] = []
        self.modes: list[tuple[nn.Module, bool]] = []
        for module in model.modules():
            saved = {n: (b, None if b is None else b.detach().clone()) for n, b in module._buffers.items()}
            self.buffers.append((module, saved, set(module._non_persistent_buffers_set)))
            if _has_extra_state(module):
                self.extra.append((module, copy.deepcopy(module.get_extra_state())))
            self.modes.append((module, module.training))

    @classmethod
    def capture(cls, model: nn.Module) -> ModelState:
        return cls(model)

    def restore(self) -> None:
        with torch.no_grad():
            for module, saved, non_persistent in self.buffers:
                for name in [n for n in module._buffers if n not in saved]:
                    del module._buffers[name]
                for name, (tensor, value) in saved.items():
                    if tensor is not None and value is not None:
                        if tensor.shape == value.shape and tensor.dtype == value.dtype:
                            tensor.copy_(value)
                        else:  # resized or recast in place
                            tensor.set_(value.clone())
                    module._buffers[name] = tensor
                module._non_persistent_buffers_set.clear()
                module._non_persistent_buffers_set.update(non_persistent)
        for module, extra in self.extra:
            module.set_extra_state(copy.deepcopy(extra))
        for module, training in self.modes:
            module.training = training


class TrainingState:
    """Everything a diagnostic could disturb; `restore` puts it back bit for bit."""

    def __init__(
        self,
        params: Sequence[Tensor],
        model: nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        self.optimizer = optimizer
        self.params = [(p, p.detach().clone(), p.grad, _clone(p.grad)) for p in params]
        self.model = None if model is None else ModelState(model)
        self.opt_state: dict[Tensor, dict[str, Any]] = {}
        self.opt_groups: list[dict[str, Any]] = []
        if optimizer is not None:
            self.opt_state = {p: {k: _clone(v) for k, v in s.items()} for p, s in optimizer.state.items()}
            self.opt_groups = [{k: _clone(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        self.rng = RngState.capture()

    @classmethod
    def capture(cls, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> TrainingState:
        """The model's parameters, buffers, extra state and modes, the optimizer's state and the RNG streams."""
        return cls(list(model.parameters()), model, optimizer)

    def restore(self) -> None:
        with torch.no_grad():
            for p, value, grad, grad_value in self.params:
                p.copy_(value)
                if grad is not None:
                    grad.copy_(grad_value)
                p.grad = grad  # the very tensor it held, with its values
        if self.model is not None:
            self.model.restore()
        if self.optimizer is not None:
            state = self.optimizer.state
            for p in [p for p in state if p not in self.opt_state]:
                del state[p]
            for p, saved in self.opt_state.items():
                current = state[p]
                for k in [k for k in current if k not in saved]:
                    del current[k]
                for k, v in saved.items():
                    _put(current, k, v)
            for group, saved in zip(self.optimizer.param_groups, self.opt_groups):
                for k in [k for k in group if k != "params" and k not in saved]:
                    del group[k]
                for k, v in saved.items():
                    _put(group, k, v)
        self.rng.restore()


def optimizer_step_preview(
    optimizer: torch.optim.Optimizer, params: Sequence[Tensor], grads: Sequence[Tensor]
) -> list[Tensor]:
    """The values ``params`` would take if ``optimizer.step()`` ran with these gradients.

    Runs the real step (momentum, Adam's moments, weight decay and the current learning rate
    included), reads the new values, then restores parameters, their ``.grad`` and the
    optimizer's state exactly.
    """
    owned = [p for group in optimizer.param_groups for p in group["params"]]
    state = TrainingState(list({id(p): p for p in [*owned, *params]}.values()), None, optimizer)
    try:
        for p in owned:
            p.grad = None
        for p, g in zip(params, grads):
            p.grad = g.detach().clone()
        optimizer.step()
        return [p.detach().clone() for p in params]
    finally:
        state.restore()
