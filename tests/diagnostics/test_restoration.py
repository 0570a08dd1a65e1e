"""Diagnostics never change training: the next step's loss and all state are bit-identical.

Each case trains a small BN + dropout network twice from the same seed, once with the
diagnostic wired in as the runner does (setup, before/after every step, the due call through
`run_hooks` before the step), once without, and compares every parameter, buffer, optimizer
state entry, RNG stream and loss bit for bit.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import yaml

from normbench.diagnostics import DiagContext, build_diagnostics, list_diagnostics, run_hooks
from normbench.run.loop.train import run
from tests.conf.test_compose import compose_cfg
from tests.diagnostics.common import TinyNet, task_loss, tiny_task

CHEAP = {
    "hessian": {"max_products": 3},
    "grad_variance": {"num_batches": 2},
    "ics": {"num_layers": 2},
    "landscape": {"num_points": 2},
    "predictiveness": {"num_points": 2},
    "beta_smoothness": {"num_points": 2},
    "activations": {"bins": 4},
}


def optimizer_for(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)


def train(diag_cfg: dict, opt_name: str, steps: int = 4, diag_step: int = 2) -> dict:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    task = tiny_task()
    model = TinyNet("bn", dropout=0.3)
    optimizer = optimizer_for(opt_name, model)
    hooks = build_diagnostics(diag_cfg)
    for hook in hooks:
        hook.setup(model)
    loss_fn = task_loss(task)
    losses, logged = [], {}
    for step, batch in enumerate(task.train_batches(0, torch.Generator().manual_seed(0))):
        if step == steps:
            break
        due = [h for h in hooks if h.due(step)] if step == diag_step else []
        if due:
            logged = run_hooks(due, DiagContext(model, batch, loss_fn, optimizer, step, 0, 0.1, task=task))
        for hook in hooks:
            hook.before_step(step)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        for hook in hooks:
            hook.after_step(step)
        losses.append(loss.detach())
    return {
        "losses": losses,
        "params": [p.detach().clone() for p in model.parameters()],
        "grads": [p.grad.clone() for p in model.parameters()],
        "buffers": [b.clone() for b in model.buffers()],
        "opt": optimizer.state_dict()["state"],
        "rng": (random.random(), np.random.rand(), torch.rand(3)),
        "logged": logged,
    }


def assert_identical(a: dict, b: dict) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a["losses"], b["losses"])), "losses differ"
    for key in ("params", "grads", "buffers"):
        assert all(torch.equal(x, y) for x, y in zip(a[key], b[key])), f"{key} differ"
    for i, state in a["opt"].items():
        for k, v in state.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"][i][k])), f"optimizer state {k} differs"
    assert a["rng"][0] == b["rng"][0] and a["rng"][1] == b["rng"][1] and torch.equal(a["rng"][2], b["rng"][2])


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("name", list_diagnostics())
def test_a_diagnostic_leaves_training_bit_identical(name: str, opt_name: str) -> None:
    baseline = train({}, opt_name)
    with_diag = train({name: {"every_n_steps": 1, **CHEAP.get(name, {})}}, opt_name)
    assert_identical(baseline, with_diag)
    if name != "bn_stats":  # bn_stats logs per epoch, not at the due step
        assert with_diag["logged"], "the diagnostic logged nothing"


def test_all_diagnostics_at_once_leave_training_bit_identical() -> None:
    cfg = {name: {"every_n_steps": 1, **CHEAP.get(name, {})} for name in list_diagnostics()}
    assert_identical(train({}, "sgd"), train(cfg, "sgd"))


RUN = [
    "experiment=quickstart",
    "model.depth=8",
    "epochs=1",
    "dataset.num_train=64",
    "dataset.num_test=32",
    "batch_size=16",
    "logger.progress_bar=false",
    "logger.wandb=false",
    "logger.log_every_n_steps=1",
]
TINY = [f"diagnostics.{n}.{k}={v}" for n, kv in CHEAP.items() for k, v in kv.items()]


def test_the_runner_with_every_diagnostic_gives_the_same_run(tmp_path) -> None:
    off = run(compose_cfg([*RUN, "diagnostics=off"]), tmp_path / "off")
    full = run(compose_cfg([*RUN, "diagnostics=full", *TINY]), tmp_path / "full")  # all due at step 0
    for key in ("train/loss", "train/acc", "val/loss", "val/acc"):
        assert off[key] == full[key], key
    rows = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    keys = set().union(*rows)
    for name in list_diagnostics():
        assert any(k.startswith(f"{name}/") for k in keys), name
    assert full["perf/diag_share"] > 0 and full["perf/diag_seconds"] > 0
    # the probe's L(θ) at step 0 is the loss the step itself computed (same batch, same dropout draws)
    step0 = next(r for r in rows if "landscape/loss" in r)
    first_loss = next(r for r in rows if "train/batch_loss" in r)
    assert step0["step"] == 0 and first_loss["step"] == 1
    assert step0["landscape/loss"] == first_loss["train/batch_loss"]
    assert "bn_stats/first_layer/var_dist" in rows[-1]
    # direction=auto is written into the run's config as what ran: SGD with momentum 0.9 → update
    logged = yaml.safe_load((tmp_path / "full" / "config.yaml").read_text())
    assert {logged["diagnostics"][n]["direction"] for n in ("landscape", "predictiveness", "beta_smoothness")} == {
        "update"
    }


@pytest.mark.slow
def test_diagnostics_run_beside_a_compiled_model(tmp_path) -> None:
    """hardware.compile=true: the hooks use the uncompiled module, which shares the parameters."""
    plain = run(compose_cfg([*RUN, "diagnostics=off", "hardware.compile=true"]), tmp_path / "off")
    full = run(compose_cfg([*RUN, "diagnostics=full", *TINY, "hardware.compile=true"]), tmp_path / "full")
    keys = set().union(*(json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()))
    assert all(any(k.startswith(f"{name}/") for k in keys) for name in list_diagnostics())
    assert full["status"] == plain["status"] == "finished"
    assert full["train/loss"] == pytest.approx(plain["train/loss"], rel=1e-5)
