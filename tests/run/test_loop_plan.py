"""The loop's plan (`normbench.run.loop.state.LoopPlan`) and what a run builds once.

The plan is what the loop reads of the config, fixed at set-up: the run's length in steps and
epochs, the cadences, the warm-up, the seed and the display. A run builds its norm factory once
and probes its model on ``meta`` once (before the data where the model needs no data sizes, after
it where it does: a transformer's vocabulary), then builds the model it trains once."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from normbench.config import parse
from tests.conftest import compose_cfg


@pytest.mark.parametrize(
    ("overrides", "steps_per_epoch", "total", "epochs"),
    [
        (["epochs=3"], 10, 30, 3),  # no max_steps: epochs x steps per epoch
        (["epochs=3", "max_steps=25"], 10, 25, 3),  # max_steps ends the third epoch early
        (["epochs=1", "max_steps=40"], 10, 40, 4),  # max_steps wins over epochs
    ],
)
def test_the_plan_holds_the_run_length(overrides: list[str], steps_per_epoch: int, total: int, epochs: int) -> None:
    from normbench.run.loop.state import LoopPlan

    plan = LoopPlan.of(parse(compose_cfg(["experiment=quickstart", *overrides])), steps_per_epoch, main=True)
    assert (plan.steps_per_epoch, plan.total_steps, plan.epochs) == (steps_per_epoch, total, epochs)


def test_the_plan_holds_what_the_loop_reads() -> None:
    from normbench.run.loop.state import LoopPlan

    overrides = ["experiment=quickstart", "seed=7", "eval_every_epochs=2", "throughput_warmup_steps=5",
                 "logger.log_every_n_steps=3", "logger.progress=lines", "logger.progress_every_s=9",
                 "divergence.loss_factor=4"]  # fmt: skip
    config = parse(compose_cfg(overrides))
    plan = LoopPlan.of(config, 10, main=True)
    assert (plan.seed, plan.eval_every_epochs, plan.throughput_warmup_steps) == (7, 2, 5)
    assert (plan.log_every_n_steps, plan.progress, plan.progress_every_s, plan.loss_factor) == (3, "lines", 9.0, 4.0)
    assert plan.show_progress and not LoopPlan.of(config, 10, main=False).show_progress  # the main process shows it
    no_bar = parse(compose_cfg([*overrides, "logger.progress_bar=false"]))
    assert not LoopPlan.of(no_bar, 10, main=True).show_progress


def count_builds(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Count every call of `norm_factory` and every model `build_model` builds (the config check's
    probe, built with its initialisation skipped, or for real), wherever a module of normbench
    imported them."""
    from torch.overrides import _get_current_function_mode_stack

    from normbench.models.registry import build_model
    from normbench.norms.registry import norm_factory
    from normbench.run.loop.validate import _SkipInit

    counts: collections.Counter[str] = collections.Counter()

    def counted_factory(*args: Any, **kwargs: Any) -> Any:
        counts["norm_factory"] += 1
        return norm_factory(*args, **kwargs)

    def counted_model(*args: Any, **kwargs: Any) -> Any:
        model = build_model(*args, **kwargs)  # a model that needs the data's sizes raises before any layer
        probe = any(isinstance(m, _SkipInit) for m in _get_current_function_mode_stack())
        counts["build_model probe" if probe else f"build_model on {torch.get_default_device().type}"] += 1
        return model

    for name, module in list(sys.modules.items()):
        if not name.startswith("normbench"):
            continue
        if getattr(module, "norm_factory", None) is norm_factory:
            monkeypatch.setattr(module, "norm_factory", counted_factory)
        if getattr(module, "build_model", None) is build_model:
            monkeypatch.setattr(module, "build_model", counted_model)
    return counts


TINY = [
    "logger.wandb=false",
    "logger.progress_bar=false",
    "max_steps=2",
    "checkpoint.every_n_steps=0",
    "diagnostics=off",
]


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=quickstart", "model.depth=8", "dataset.num_train=128", "dataset.num_test=64", "batch_size=32"],
        [
            "experiment=quickstart_mt",
            "dataset.num_train=100",
            "dataset.num_valid=20",
            "dataset.num_test=20",
            "dataset.max_tokens=256",
            "dataset.eval_bleu=false",
        ],  # fmt: skip
    ],
    ids=["resnet: probed before the data", "transformer: probed with the vocabulary"],
)
def test_a_run_builds_its_norm_factory_and_model_once(
    overrides: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import normbench.run.loop.train as train

    counts = count_builds(monkeypatch)
    result = train.run(compose_cfg([*overrides, *TINY]), tmp_path)
    assert result["status"] == "finished"
    assert counts == {"norm_factory": 1, "build_model probe": 1, "build_model on cpu": 1}
    machine = json.loads((tmp_path / "summary.json").read_text())["machine"]  # the load beside the timings:
    assert set(machine) == {"cores", "load_start", "load_end", "quiet"} and isinstance(machine["quiet"], bool)  # (#43)
