"""Every evaluation inside a diagnostic sees the function the training step sees (issue 12, point 2).

PowerNorm updates ``ema_gz`` in its backward and reads/updates the running ψ² in its forward
past warm-up; Batch Renormalization past warm-up reads/updates the running statistics through
r and d; the noisy norms draw from the RNG. So two evaluations of the loss at the same θ agree
only when the model's buffers (and the RNG) are put back before each. Parametrized over every
registered norm, with the stateful ones past their warm-up, on a CNN (NCHW) and on a masked
sequence model (NTC): two evaluations at the same θ are bit-identical in loss and gradient, the
first layer's ICS is exactly 0, a probe at η → 0 gives the step's own loss and gradient, and
K copies of one batch have a gradient variance of exactly 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.diagnostics import DiagContext, build_diagnostics, run_hooks
from normbench.diagnostics.probe import gradient_step_probe
from normbench.diagnostics.vectors import grads_or_zeros
from normbench.norms import list_norms, norm_factory

PAST_WARMUP: dict[str, dict[str, Any]] = {
    "pn": {"warmup_iters": 0},
    "brn": {"warmup_steps": 0, "r_max_steps": 2, "d_max_steps": 2, "momentum": 0.3},
}
"""Norm settings that make the stateful norms use their running state from the first step."""


def norm_layer(name: str):
    return norm_factory({"name": name, **PAST_WARMUP.get(name, {})})


class ConvNet(nn.Module):
    """conv → norm → ReLU → conv → norm → ReLU → mean pool → dropout → linear (NCHW)."""

    def __init__(self, norm: str) -> None:
        super().__init__()
        make = norm_layer(norm)
        self.conv1, self.norm1 = nn.Conv2d(3, 8, 3, padding=1), make(8, "NCHW")
        self.conv2, self.norm2 = nn.Conv2d(8, 8, 3, padding=1), make(8, "NCHW")
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.norm1(self.conv1(x)))  # (B, 8, H, W)
        x = F.relu(self.norm2(self.conv2(x)))
        return self.fc(self.drop(x.mean(dim=(2, 3))))


class SeqNet(nn.Module):
    """embedding → linear → norm(mask) → ReLU → linear → norm(mask) → dropout → linear (N, T, C)."""

    def __init__(self, norm: str, vocab: int = 11) -> None:
        super().__init__()
        make = norm_layer(norm)
        self.embed = nn.Embedding(vocab, 8)
        self.lin1, self.norm1 = nn.Linear(8, 8), make(8, "NTC")
        self.lin2, self.norm2 = nn.Linear(8, 8), make(8, "NTC")
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(8, vocab)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        x = self.embed(tokens)  # (N, T, C)
        x = F.relu(self.norm1(self.lin1(x), mask=mask))
        x = self.norm2(self.lin2(x), mask=mask)
        return self.out(self.drop(x))  # (N, T, vocab)


def cnn_case(norm: str) -> tuple[nn.Module, Any]:
    g = torch.Generator().manual_seed(0)
    return ConvNet(norm), (torch.randn(6, 3, 6, 6, generator=g), torch.randint(0, 5, (6,), generator=g))


def seq_case(norm: str) -> tuple[nn.Module, Any]:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 11, (4, 7), generator=g)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 4:] = mask[3, 2:] = False  # padding at the ends of two sentences
    return SeqNet(norm), (tokens, mask, torch.randint(0, 11, (4, 7), generator=g))


def loss_fn(model: nn.Module, batch: Any) -> Tensor:
    if isinstance(model, SeqNet):
        tokens, mask, targets = batch
        return F.cross_entropy(model(tokens, mask)[mask], targets[mask])
    x, y = batch
    return F.cross_entropy(model(x), y)


CASES = {"cnn": cnn_case, "seq": seq_case}


def trained(case: str, norm: str, steps: int = 3) -> tuple[nn.Module, Any, torch.optim.Optimizer]:
    """The model after a few SGD-with-momentum steps: buffers and optimizer state are non-trivial."""
    torch.manual_seed(0)
    model, batch = CASES[case](norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(model, batch).backward()
        optimizer.step()
    return model, batch, optimizer


def loss_and_grad(closure, params: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
    loss = closure()
    return loss.detach(), grads_or_zeros(torch.autograd.grad(loss, params, allow_unused=True), params)


def step_loss_and_grad(model: nn.Module, batch: Any, params: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """What the training step computes (after `run_hooks` has put the state back)."""
    return loss_and_grad(lambda: loss_fn(model, batch), params)


NORMS = list_norms()
pytestmark = pytest.mark.parametrize("case", sorted(CASES))


@pytest.mark.parametrize("norm", NORMS)
def test_two_evaluations_at_the_same_theta_are_bit_identical(case: str, norm: str) -> None:
    model, batch, optimizer = trained(case, norm)
    params = [p for p in model.parameters() if p.requires_grad]
    ctx = DiagContext(model, batch, loss_fn, optimizer, 3, 0, 0.05)
    closure = ctx.closure()
    loss1, grads1 = loss_and_grad(closure, params)
    loss2, grads2 = loss_and_grad(closure, params)
    assert torch.equal(loss1, loss2), (float(loss1), float(loss2))
    assert all(torch.equal(a, b) for a, b in zip(grads1, grads2)), "gradients differ"
    ctx.reset()  # as run_hooks leaves it for the step
    loss3, grads3 = step_loss_and_grad(model, batch, params)
    assert torch.equal(loss1, loss3) and all(torch.equal(a, b) for a, b in zip(grads1, grads3))


@pytest.mark.parametrize("norm", NORMS)
def test_first_layer_ics_is_exactly_zero(case: str, norm: str) -> None:
    model, batch, optimizer = trained(case, norm)
    first, later = ("conv1", "conv2") if case == "cnn" else ("embed", "lin2")
    (hook,) = build_diagnostics({"ics": {"every_n_steps": 1, "layers": [first, later]}})
    hook.setup(model)
    out = run_hooks([hook], DiagContext(model, batch, loss_fn, optimizer, 3, 0, 0.05))
    assert out[f"ics/{first}/grad_diff"] == 0.0
    assert out[f"ics/{first}/rel_grad_diff"] == 0.0
    assert out[f"ics/{later}/grad_diff"] > 0  # the later layer does see the earlier step


@pytest.mark.parametrize("norm", NORMS)
def test_probe_at_zero_step_is_the_step_itself(case: str, norm: str) -> None:
    model, batch, optimizer = trained(case, norm)
    params = [p for p in model.parameters() if p.requires_grad]
    ctx = DiagContext(model, batch, loss_fn, optimizer, 3, 0, 0.05)
    probe = gradient_step_probe(ctx.closure(), params, [0.0, 0.0])
    ctx.reset()
    loss, grads = step_loss_and_grad(model, batch, params)
    assert probe.loss == float(loss)
    assert probe.losses == [float(loss)] * 2
    assert probe.grad_dists == [0.0, 0.0]
    assert probe.grad_norm == float(torch.stack([g.double().pow(2).sum() for g in grads]).sum().sqrt())


@pytest.mark.parametrize("direction", ["gradient", "update"])
@pytest.mark.parametrize("norm", NORMS)
def test_probe_hooks_as_eta_goes_to_zero_agree_with_the_step(case: str, norm: str, direction: str) -> None:
    model, batch, optimizer = trained(case, norm)
    params = [p for p in model.parameters() if p.requires_grad]
    lr = 1e-9
    for group in optimizer.param_groups:
        group["lr"] = lr
    probe_cfg = {"every_n_steps": 1, "num_points": 3, "direction": direction}
    hooks = build_diagnostics({"landscape": probe_cfg, "predictiveness": probe_cfg})
    out = run_hooks(hooks, DiagContext(model, batch, loss_fn, optimizer, 3, 0, lr))
    loss, grads = step_loss_and_grad(model, batch, params)
    grad_norm = float(torch.stack([g.double().pow(2).sum() for g in grads]).sum().sqrt())
    assert out["landscape/loss"] == float(loss)
    for key in ("loss_min", "loss_max"):
        assert out[f"landscape/{key}"] == pytest.approx(float(loss), rel=1e-5)
    assert out["predictiveness/grad_diff_max"] <= 1e-4 * grad_norm


class RepeatTask:
    """A task whose every training batch is the same one."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def train_batches(self, epoch: int, generator: torch.Generator) -> Iterator[Any]:
        while True:
            yield self.batch


@pytest.mark.parametrize("norm", NORMS)
def test_gradient_variance_over_copies_of_one_batch_is_zero(case: str, norm: str) -> None:
    model, batch, optimizer = trained(case, norm)
    (hook,) = build_diagnostics({"grad_variance": {"every_n_steps": 1, "num_batches": 3}})
    hook.setup(model)
    ctx = DiagContext(model, batch, loss_fn, optimizer, 3, 0, 0.05, task=RepeatTask(batch))
    out = run_hooks([hook], ctx)
    assert out["grad_variance/total"] == 0.0
    assert out["grad_variance/grad_sq_norm"] > 0
