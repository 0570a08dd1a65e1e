"""The one mechanism behind every evaluation in a diagnostic, on a stand-in for a future norm.

`FutureNorm` keeps state three ways a norm might: a buffer it updates in place in its backward
(as PowerNorm's ``ema_gz``), a buffer it *reassigns* in its forward, a python counter held in
``get_extra_state``, and a buffer it registers on its first forward. Its output depends on all
of them, so an evaluation that does not see them put back sees another function.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from normbench.diagnostics import DiagContext, TrainingState
from normbench.diagnostics.state import ModelState


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the backward scales by (1 + acc) and adds the gradient's mean to acc."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, acc: Tensor) -> Tensor:
        ctx.acc = acc
        return x.clone()

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor, None]:
        dx = dy * (1 + ctx.acc)
        ctx.acc.add_(dy.mean())
        return dx, None


class FutureNorm(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_features))
        self.register_buffer("scale", torch.ones(num_features))
        self.register_buffer("acc", torch.zeros(()))
        self.calls = 0

    def get_extra_state(self) -> dict[str, int]:
        return {"calls": self.calls}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.calls = state["calls"]

    def forward(self, x: Tensor) -> Tensor:
        if not hasattr(self, "seen"):
            self.register_buffer("seen", torch.ones(()))
        y = _ScaleGrad.apply(x, self.acc) * self.weight * self.scale * (1 + 0.1 * self.calls)
        self.scale = self.scale * 1.5  # a new tensor under the old name
        self.calls += 1
        return y + torch.randn_like(y) * 0.1  # and RNG draws


def model_and_batch() -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), FutureNorm(3), nn.Linear(3, 1)), torch.randn(5, 4)


def loss_fn(model: nn.Module, x: Tensor) -> Tensor:
    return model(x).pow(2).mean()


def test_each_closure_call_sees_the_state_the_step_sees() -> None:
    model, x = model_and_batch()
    params = list(model.parameters())
    ctx = DiagContext(model, x, loss_fn, torch.optim.SGD(params, lr=0.1), 0, 0, 0.1)
    closure = ctx.closure()
    results = []
    for _ in range(3):
        loss = closure()
        results.append((loss.detach(), torch.autograd.grad(loss, params)))
    assert all(torch.equal(results[0][0], loss) for loss, _ in results)
    assert all(torch.equal(a, b) for _, grads in results for a, b in zip(results[0][1], grads))
    norm = model[1]
    assert norm.calls == 1 and not torch.equal(norm.acc, torch.zeros(()))  # the last call did change it
    ctx.reset()
    assert norm.calls == 0 and torch.equal(norm.acc, torch.zeros(())) and torch.equal(norm.scale, torch.ones(3))
    assert "seen" not in dict(norm.named_buffers())
    step_loss = loss_fn(model, x)
    assert torch.equal(step_loss.detach(), results[0][0])  # the step's own loss


def test_model_state_puts_back_the_very_buffer_objects() -> None:
    model, x = model_and_batch()
    norm = model[1]
    scale, acc = norm.scale, norm.acc
    state = ModelState.capture(model)
    loss_fn(model, x).backward()
    model.eval()
    assert norm.scale is not scale
    state.restore()
    assert norm.scale is scale and norm.acc is acc and norm.training
    assert torch.equal(scale, torch.ones(3)) and norm.calls == 0


def test_training_state_restores_extra_state_and_buffers() -> None:
    model, x = model_and_batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    state = TrainingState.capture(model, optimizer)
    before = {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, Tensor)}
    for _ in range(2):
        optimizer.zero_grad()
        loss_fn(model, x).backward()
        optimizer.step()
    state.restore()
    after = model.state_dict()
    assert model[1].calls == 0 and after["1._extra_state"] == {"calls": 0}
    assert {k for k in after if k != "1._extra_state"} == set(before)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert optimizer.state_dict()["state"] == {}
