"""Snapshots of the training state, so that diagnostics leave training exactly as they found it.

`RngState`: the python, numpy, torch CPU and CUDA generators. `TrainingState`: parameters,
their ``.grad``, buffers (BN running statistics, PowerNorm's running ψ², counters), each
module's train/eval mode, the optimizer's per-parameter state and param-group settings, and
the RNG streams. ``restore()`` copies the saved values back in place (bit for bit) and may be
called any number of times.
"""

from __future__ import annotations

import copy
import random
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


class TrainingState:
    """Everything a diagnostic could disturb; `restore` puts it back bit for bit."""

    def __init__(
        self,
        params: list[Tensor],
        buffers: list[Tensor],
        modules: list[nn.Module],
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        self.optimizer = optimizer
        self.params = [(p, p.detach().clone(), p.grad, _clone(p.grad)) for p in params]
        self.buffers = [(b, b.detach().clone()) for b in buffers]
        self.modes = [(m, m.training) for m in modules]
        self.opt_state: dict[Tensor, dict[str, Any]] = {}
        self.opt_groups: list[dict[str, Any]] = []
        if optimizer is not None:
            self.opt_state = {p: {k: _clone(v) for k, v in s.items()} for p, s in optimizer.state.items()}
            self.opt_groups = [{k: _clone(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        self.rng = RngState.capture()

    @classmethod
    def capture(cls, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> TrainingState:
        """The model's parameters, buffers and modes, the optimizer's state and the RNG streams."""
        return cls(list(model.parameters()), list(model.buffers()), list(model.modules()), optimizer)

    def restore(self) -> None:
        with torch.no_grad():
            for p, value, grad, grad_value in self.params:
                p.copy_(value)
                if grad is not None:
                    grad.copy_(grad_value)
                p.grad = grad  # the very tensor it held, with its values
            for b, value in self.buffers:
                b.copy_(value)
        for m, training in self.modes:
            m.training = training
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
