"""The divergence monitor: the first bad step, found without reading the loss every step."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.divergence import DivergenceMonitor


def _feed(monitor: DivergenceMonitor, losses: list[float]) -> None:
    for step, loss in enumerate(losses, start=1):
        monitor.observe(torch.tensor(loss), step)


def test_finite_losses_below_the_factor_never_diverge() -> None:
    monitor = DivergenceMonitor(loss_factor=10.0)
    _feed(monitor, [2.3, 5.0, 22.9, 1.0])
    assert monitor.diverged_step() is None
    assert monitor.reference_loss() == torch.tensor(2.3).item()


def test_first_non_finite_step_is_reported() -> None:
    monitor = DivergenceMonitor(loss_factor=0.0)
    _feed(monitor, [2.3, 1e30, math.inf, math.nan, 1.0])
    assert monitor.diverged_step() == 3  # 1e30 is finite and factor 0 checks nothing else


def test_loss_above_the_factor_times_the_first_loss() -> None:
    monitor = DivergenceMonitor(loss_factor=10.0)
    _feed(monitor, [2.0, 19.0, 20.5, math.nan])
    assert monitor.diverged_step() == 3


def test_reference_restored_from_a_checkpoint_keeps_the_threshold() -> None:
    monitor = DivergenceMonitor(loss_factor=10.0, reference_loss=2.0)
    monitor.observe(torch.tensor(19.0), 7)
    assert monitor.diverged_step() is None
    monitor.observe(torch.tensor(20.5), 8)
    assert monitor.diverged_step() == 8


@pytest.mark.gpu
def test_observing_a_cuda_loss_never_syncs() -> None:
    """``observe`` runs every step: on CUDA it must queue work only (sync debug mode raises on a sync)."""
    monitor = DivergenceMonitor(loss_factor=10.0)
    losses = torch.tensor([2.0, 3.0, 25.0, math.nan], device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(4):
            monitor.observe(losses[step], step + 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert monitor.diverged_step() == 3
