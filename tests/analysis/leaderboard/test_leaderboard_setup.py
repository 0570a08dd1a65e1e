"""The leaderboard's "What ran" lines read from each run's typed record (`Run.record`): a key an
older record lacks is written with its schema's default, not a guess."""

from __future__ import annotations

from typing import Any

from normbench.analysis.leaderboard.leaderboard_setup import data_text, length_text, optimizer_text, schedule_text
from normbench.analysis.loading.runs import Run

BASE: dict[str, Any] = {"norm": {"name": "bn"}, "model": {"name": "resnet20"}, "dataset": {"name": "cifar10"}}


def run_of(**config: Any) -> Run:
    return Run("r", {**BASE, **config}, [{"step": 40, "epoch": 1}], {"step": 40})


def test_sgd_without_a_recorded_momentum_ran_with_the_optimizers_default() -> None:
    """A record without ``optimizer.momentum`` ran with OptimizerConfig's 0.9 (it said 0 before)."""
    text = optimizer_text(run_of(optimizer={"name": "sgd"}, lr=0.1, weight_decay=5e-4))
    assert text == "SGD lr 0.1, momentum 0.9, weight decay 0.0005"


def test_the_optimizer_as_recorded() -> None:
    assert optimizer_text(run_of(optimizer={"name": "sgd", "momentum": 0.0, "nesterov": False}, lr=0.05)).startswith(
        "SGD lr 0.05, momentum 0,"
    )
    adamw = optimizer_text(run_of(optimizer={"name": "adamw", "betas": [0.9, 0.98]}, weight_decay=0.0))
    assert adamw == "Adamw lr 0.1, betas (0.9, 0.98), weight decay 0"


def test_schedule_length_and_data_from_the_record() -> None:
    step = run_of(schedule={"name": "step", "milestones": [0.5, 0.75], "gamma": 0.1}, max_steps=40)
    assert schedule_text(step) == "step: lr × 0.1 at 50 %, 75 % of the steps (steps 20, 30)"
    assert schedule_text(run_of()) == "cosine to 0 × lr"  # the record names no schedule: the default
    assert length_text(step) == "40 steps"
    assert length_text(run_of(epochs=2)) == "2 epochs = 40 steps"
    assert data_text(run_of(batch_size=32, dataset={"name": "cifar10", "augment": False})) == (
        "batch 32, no augmentation"
    )
