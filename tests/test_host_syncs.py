"""Host synchronisations in a training step: on CUDA each one stalls the CPU until the GPU has
caught up. Counted on the CPU at the ops that force one there (`SyncSites`): a tensor read into
Python (``item()``, ``int()``, ``float()``, ``bool()``: ``_local_scalar_dense``), ops whose output
size depends on the data (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``) and
tensors made from host data inside the step (``torch.tensor`` / ``as_tensor`` / ``from_numpy``:
``lift_fresh``, a blocking upload when the step runs on a GPU). A training step with the default
diagnostics makes none, except at the logging cadence (and a diagnostic's own cadence).

What the CPU cannot show: a copy from pageable host memory to the GPU (`.to(device)`: a no-op
here) — the runner's uploads go through `hardware.upload` (pinned, asynchronous), and
``scripts/gpu_check.sh`` runs a step under ``torch.cuda.set_sync_debug_mode("warn")``. Host
tensors by design are not syncs: making a batch from host data, its pair index and target
lengths, Adam's step counter (``capturable=False``)."""

from __future__ import annotations

import collections
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from normbench.run.loop import train
from tests.conftest import compose_cfg

DATA_DEPENDENT = {
    "aten.nonzero.default",
    "aten.masked_select.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
}


def caller() -> str:
    """The innermost normbench frame on the stack (file:line), where the sync site is."""
    for frame in reversed(traceback.extract_stack()):
        if "/normbench/" in frame.filename:
            return f"{frame.filename.split('/normbench/')[-1]}:{frame.lineno}"
    return "?"


class SyncSites(TorchDispatchMode):
    """Records (step, op) for every op that synchronizes the host with a CUDA device."""

    def __init__(self, step_of: Any, batch_making: bool = False) -> None:
        super().__init__()
        self.step_of, self.batch_making, self.sites = step_of, batch_making, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        name = str(func)
        bool_index = name == "aten.index.Tensor" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in tree_leaves(args[1])
        )
        # tensors made from host data: an upload inside the step; making a batch starts from host data
        upload = name == "aten.lift_fresh.default" and not self.batch_making
        syncs = name == "aten._local_scalar_dense.default" or name in DATA_DEPENDENT or bool_index or upload
        if syncs and not in_optimizer():  # Adam's step counter lives on the host (capturable=False), also on CUDA
            self.sites.append((self.step_of(), f"{name.split('.')[1]} at {caller()}"))
        return func(*args, **(kwargs or {}))


def in_optimizer() -> bool:
    return any("/torch/optim/" in frame.filename for frame in traceback.extract_stack())


def steps_with_syncs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, overrides: list[str]) -> dict[int, list[str]]:
    """Run the runner; the sync sites met while each step's batch was made and trained on."""
    recorders: list[SyncSites] = []
    train_epoch = train.train_epoch

    def counted_epoch(run: train.Run, epoch: int) -> dict[str, Any]:
        # a step is counted from its batch's making (in the loop's next()) to the next one's
        batches = run.task.train_batches

        def watched(epoch: int, generator: torch.Generator):
            it = batches(epoch, generator)
            while True:
                with SyncSites(lambda: run.step, batch_making=True) as rec:
                    recorders.append(rec)
                    try:
                        batch = next(it)
                    except StopIteration:
                        return
                yield batch

        run.task.train_batches = watched
        real_step = train.train_step

        def step(run_: train.Run, ep: Any, batch: Any):
            with SyncSites(lambda: run_.step) as rec:
                recorders.append(rec)
                out = real_step(run_, ep, batch)
                rec.step_of = lambda: run_.step - 1  # the step's own (its counter has moved on)
                return out

        monkeypatch.setattr(train, "train_step", step)
        try:
            return train_epoch(run, epoch)
        finally:
            run.task.train_batches = batches

    monkeypatch.setattr(train, "train_epoch", counted_epoch)
    result = train.run(compose_cfg(overrides), tmp_path)
    assert result["status"] == "finished"
    found: dict[int, list[str]] = collections.defaultdict(list)
    for rec in recorders:
        for step, name in rec.sites:
            found[step].append(name)
    return dict(found)


COMMON = [
    "logger.wandb=false",
    "logger.progress_bar=false",
    "logger.log_every_n_steps=1000",
    "max_steps=6",
    "throughput_warmup_steps=1",
    "checkpoint.every_n_steps=0",
]


@pytest.mark.parametrize(
    ("case", "overrides"),
    [
        (
            "resnet8 + bn, augmentation",
            [
                "experiment=quickstart",
                "model.depth=8",
                "dataset.num_train=256",
                "dataset.num_test=64",
                "batch_size=32",
                "eval_batch_size=64",
            ],
        ),
        ("transformer_tiny + ln", ["experiment=quickstart_mt", "dataset.num_train=200", "dataset.max_tokens=256"]),
        (
            "transformer_tiny, bn encoder",
            ["experiment=quickstart_mt", "dataset.num_train=200", "dataset.max_tokens=256", "model.encoder_norm=bn"],
        ),
    ],
)
def test_training_steps_make_no_host_sync_between_logging_points(
    case: str, overrides: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = steps_with_syncs(monkeypatch, tmp_path, overrides + COMMON)
    last = 5  # the run's last step logs (and ends the epoch)
    between = {step: collections.Counter(sites) for step, sites in found.items() if step < last}
    assert not between, f"{case}: host syncs inside training steps: {between}"
