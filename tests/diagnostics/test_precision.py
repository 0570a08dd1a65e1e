"""Second-order diagnostics and the landscape probes run in float32 whatever the training
precision: with the runner's loss under bf16 autocast, ``hessian`` converges and reports the
float32 spectrum, and ``landscape`` / ``predictiveness`` / ``beta_smoothness`` the float32 probe."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

from normbench.diagnostics import DiagContext, build_diagnostics, run_hooks
from tests.diagnostics.common import TinyNet, task_loss, tiny_task

FP32_DIAGNOSTICS = {
    "hessian": {"every_n_steps": 1},
    "landscape": {"every_n_steps": 1, "direction": "gradient"},
    "predictiveness": {"every_n_steps": 1, "direction": "gradient"},
    "beta_smoothness": {"every_n_steps": 1, "direction": "gradient"},
}


def bf16_loss(task: Any):
    """The runner's ``loss_fn`` under ``hardware.precision=bf16`` (`Run.loss`)."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)

    def loss(model: nn.Module, batch: Any) -> Tensor:
        with autocast:
            return task.forward_loss(model, batch).loss

    return loss


def measure(loss_of) -> dict[str, float]:
    torch.manual_seed(0)
    task = tiny_task()
    model = TinyNet("bn", dropout=0.0)
    batch = next(iter(task.train_batches(0, torch.Generator().manual_seed(0))))
    hooks = build_diagnostics(FP32_DIAGNOSTICS)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return run_hooks(hooks, DiagContext(model, batch, loss_of(task), optimizer, 0, 0, 0.1, task=task))


def test_the_runners_bf16_loss_is_in_bf16() -> None:
    """The premise: without the diagnostics' switch, this loss_fn computes its matmuls in bf16."""
    task = tiny_task()
    x, _ = next(iter(task.train_batches(0, torch.Generator().manual_seed(0))))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert nn.Linear(3 * 8 * 8, 2)(x.flatten(1)).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def measured() -> tuple[dict[str, float], dict[str, float]]:
    """The diagnostics with the float32 loss and with the bf16 one."""
    return measure(task_loss), measure(bf16_loss)


def test_hessian_under_bf16_autocast_converges_like_float32(measured) -> None:
    fp32, bf16 = measured
    assert fp32["hessian/converged"] == 1.0 and bf16["hessian/converged"] == 1.0
    assert bf16["hessian/asymmetry"] < 1e-5
    for name in ("lambda_max", "lambda_min"):
        assert bf16[f"hessian/{name}"] == pytest.approx(fp32[f"hessian/{name}"], rel=1e-5), name


def test_probes_under_bf16_autocast_equal_float32(measured) -> None:
    fp32, bf16 = measured
    for key, value in fp32.items():
        if not key.startswith("hessian/"):
            assert bf16[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
