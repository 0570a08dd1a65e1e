"""`val_loss`: the validation loss every few steps, against the eval-mode loss computed by hand."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from normbench.diagnostics import DiagContext, build_diagnostics, run_hooks
from normbench.run.loop.train import run
from tests.conf.test_compose import compose_cfg
from tests.diagnostics.common import TinyNet, task_loss, tiny_task
from tests.diagnostics.test_restoration import RUN


def test_the_probe_is_the_eval_mode_loss_and_accuracy_by_hand() -> None:
    torch.manual_seed(0)
    task = tiny_task()
    model = TinyNet("bn", dropout=0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = task_loss(task)
    batches = task.train_batches(0, torch.Generator().manual_seed(0))
    for _ in range(3):  # move the running statistics away from their initial values
        loss = loss_fn(model, next(batches))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    (hook,) = build_diagnostics({"val_loss": {"every_n_steps": 1}})
    running_mean = model.norm1.running_mean.clone()
    out = run_hooks([hook], DiagContext(model, next(batches), loss_fn, optimizer, 3, 0, 0.1, task=task))

    model.eval()  # by hand: running statistics, no dropout, the 16 test images in one batch
    with torch.no_grad():
        logits = model(task._prepare(task.test_x))
    model.train()
    expected_loss = F.cross_entropy(logits, task.test_y).item()
    expected_acc = (logits.argmax(dim=1) == task.test_y).double().mean().item()
    assert abs(out["val_loss/loss"] - expected_loss) < 1e-5 and abs(out["val_loss/acc"] - expected_acc) < 1e-12
    assert set(out) == {"val_loss/loss", "val_loss/acc"}
    # the training state is as the step will find it: train mode, the running statistics unchanged
    assert model.training and model.norm1.training and torch.equal(model.norm1.running_mean, running_mean)


def test_the_runner_logs_it_on_the_training_clock_without_changing_training(tmp_path) -> None:
    off = run(compose_cfg([*RUN, "diagnostics=off"]), tmp_path / "off")
    on = run(compose_cfg([*RUN, "diagnostics=off", "+diagnostics.val_loss.every_n_steps=2"]), tmp_path / "on")
    assert (on["train/loss"], on["val/loss"]) == (off["train/loss"], off["val/loss"])
    rows = [json.loads(line) for line in (tmp_path / "on" / "metrics.jsonl").read_text().splitlines()]
    probed = [r for r in rows if "val_loss/loss" in r]
    assert [r["step"] for r in probed] == [0, 2] and all("perf/train_s" in r for r in probed)
    # at step 0 the model is the initial one: its loss on the test images is the untrained model's
    assert probed[0]["perf/train_s"] == 0.0 and probed[1]["perf/train_s"] > 0.0
