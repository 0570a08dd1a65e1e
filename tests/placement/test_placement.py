"""`Placement`: the one object the runner asks about the device and the processes.

Single-process: every collective hands its input back without touching ``torch.distributed``.
Several processes: the collectives run for real on a one-rank gloo group, and with a second rank
simulated (its values added or maxed in by a stand-in ``all_reduce``), checked against the sums and
maxima worked out by hand; the runner's divergence check agrees over the ranks through it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from normbench.placement import hardware
from normbench.placement.distributed import DistState, ShardedTask
from normbench.placement.hardware import HardwareConfig
from normbench.placement.placement import Placement
from normbench.run.loop.state import diverged_step

CPU = torch.device("cpu")
TWO_RANKS = DistState(rank=1, world_size=2, local_rank=1, backend="gloo")
"""This process as rank 1 of 2 (no process group: only `shard` and `describe` read it)."""


def no_collective(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a single-process run called a collective")


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> Placement:
    """A single-process CPU run started outside any launcher, with every collective forbidden."""
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(key, raising=False)
    for name in ("all_reduce", "broadcast_object_list", "barrier"):
        monkeypatch.setattr(dist, name, no_collective)
    return Placement.start(HardwareConfig(name="cpu", device="cpu"))


def test_a_single_process_start_is_rank_0_of_1_on_the_device_asked_for(alone: Placement) -> None:
    assert (alone.dist, alone.device) == (DistState(), CPU)
    assert (alone.is_main, alone.rank, alone.world_size) == (True, 0, 1)


def test_single_process_collectives_hand_their_input_back(alone: Placement, tmp_path: Path) -> None:
    values = {"loss": torch.tensor(2.5), "count": torch.tensor(4.0)}
    summed = alone.reduce_sum(values)
    assert summed.keys() == values.keys() and all(summed[k] is values[k] for k in values)
    loss = torch.tensor(0.75)
    assert alone.reduce_mean(loss) is loss
    assert alone.reduce_max(-1.0) == -1.0 and alone.reduce_max(12.0) == 12.0
    assert alone.reduce_throughput(640, 2.5) == (640, 2.5)
    assert alone.shared_run_dir(tmp_path) == tmp_path
    with alone.main_first():
        pass
    alone.check_batch(33)  # one process takes any batch
    alone.shutdown()


def test_setup_model_puts_the_model_on_the_device_nhwc_and_unwrapped_in_one_process(alone: Placement) -> None:
    placement = Placement(HardwareConfig(name="cpu", device="cpu", channels_last=True), alone.dist, CPU)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    step_model = placement.setup_model(model)
    assert step_model is model  # no DDP, no compile: the step calls the model itself
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert not model[0].weight.is_contiguous()  # NHWC, not the NCHW it was built with


class Batches:
    """A task whose epoch is one global batch of 8 numbered samples."""

    memory_format = torch.contiguous_format

    def train_batches(self, epoch: int, generator: torch.Generator):
        yield torch.arange(8.0).reshape(8, 1), torch.arange(8)


def test_setup_task_lays_out_images_and_gives_each_rank_its_slice() -> None:
    hw = HardwareConfig(name="cpu", device="cpu", channels_last=True)
    task = Batches()
    alone = Placement(hw, DistState(), CPU).setup_task(task)
    assert alone is task and task.memory_format == torch.channels_last  # one process: the task itself
    sharded = Placement(hw, TWO_RANKS, CPU).setup_task(Batches())
    assert isinstance(sharded, ShardedTask)
    ((x, y),) = list(sharded.train_batches(0, torch.Generator()))
    assert y.tolist() == [4, 5, 6, 7] and x.flatten().tolist() == [4.0, 5.0, 6.0, 7.0]  # rank 1: the second half


def test_describe_is_the_hardware_then_the_processes() -> None:
    placement = Placement(HardwareConfig(name="cpu", device="cpu", precision="bf16"), TWO_RANKS, CPU)
    described = placement.describe(batch_size=64, sync=False)
    assert described["device"] == "cpu" and described["precision"] == "bf16"
    assert described["num_threads"] == torch.get_num_threads()
    assert (described["world_size"], described["dist_backend"]) == (2, "gloo")
    assert described["batch_stats_samples"] == 32  # per rank: 64 / 2, BN unsynchronized
    assert placement.describe(batch_size=64, sync=True)["batch_stats_samples"] == 64


def test_autocast_is_bf16_exactly_when_asked() -> None:
    bf16 = Placement(HardwareConfig(name="cpu", device="cpu", precision="bf16"), DistState(), CPU)
    fp32 = Placement(HardwareConfig(name="cpu", device="cpu"), DistState(), CPU)
    a, b = torch.ones(2, 2), torch.ones(2, 2)
    with bf16.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with fp32.autocast():
        assert (a @ b).dtype == torch.float32


@pytest.mark.parametrize(("load_end", "quiet"), [(0.5, True), (1000.0, False)], ids=["idle", "swamped"])
def test_machine_record_reads_the_end_load(monkeypatch: pytest.MonkeyPatch, load_end: float, quiet: bool) -> None:
    monkeypatch.setattr(hardware, "load_now", lambda: (load_end,) * 3)
    placement = Placement(HardwareConfig(name="cpu", device="cpu"), DistState(), CPU)
    assert placement.machine_load() == (load_end,) * 3
    record = placement.machine_record((0.0, 0.0, 0.0))
    assert record["load_start"] == [0.0, 0.0, 0.0] and record["load_end"] == [load_end] * 3
    assert record["cores"] == hardware.usable_cores() and record["quiet"] is quiet  # 1000 waits on any machine


@pytest.fixture
def one_rank_group(tmp_path: Path):
    """A real gloo process group of one rank (in this process), left after the test."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield Placement(HardwareConfig(name="cpu", device="cpu"), DistState(0, 1, 0, "gloo"), CPU)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_collectives_run_on_a_real_group(one_rank_group: Placement) -> None:
    p = one_rank_group
    summed = p.reduce_sum({"a": torch.tensor(2.0), "b": torch.tensor(3, dtype=torch.int64)})
    assert {k: (v.item(), v.dtype) for k, v in summed.items()} == {"a": (2.0, torch.float64), "b": (3.0, torch.float64)}
    mean = p.reduce_mean(torch.tensor(0.5))
    assert (mean.item(), mean.dtype) == (0.5, torch.float64)
    assert p.reduce_max(7.0) == 7.0 and p.reduce_throughput(100, 1.5) == (100, 1.5)
    p.shutdown()
    assert not dist.is_initialized()  # shutdown left the group


def second_rank(monkeypatch: pytest.MonkeyPatch, other: dict[Any, list[float]]) -> None:
    """``all_reduce`` as if a second rank held ``other[op]`` (its values, in the tensor's order)."""

    def all_reduce(t: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> None:
        theirs = torch.tensor(other[op], dtype=t.dtype).reshape(t.shape)
        t.copy_(torch.maximum(t, theirs) if op == dist.ReduceOp.MAX else t + theirs)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)


def test_collectives_combine_two_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    p = Placement(HardwareConfig(name="cpu", device="cpu"), DistState(0, 2, 0, "gloo"), CPU)
    second_rank(monkeypatch, {dist.ReduceOp.SUM: [10.0, 1.0], dist.ReduceOp.MAX: [4.0]})
    summed = p.reduce_sum({"b_count": torch.tensor(3.0), "a_loss": torch.tensor(2.0)})  # keys sorted: a, b
    assert {k: v.item() for k, v in summed.items()} == {"a_loss": 12.0, "b_count": 4.0}
    assert p.reduce_max(3.0) == 4.0 and p.reduce_max(6.0) == 6.0
    second_rank(monkeypatch, {dist.ReduceOp.SUM: [0.5], dist.ReduceOp.MAX: [9.0]})
    assert p.reduce_mean(torch.tensor(1.5)).item() == 1.0  # (1.5 + 0.5) / 2
    second_rank(monkeypatch, {dist.ReduceOp.SUM: [60.0], dist.ReduceOp.MAX: [2.5]})
    assert p.reduce_throughput(40, 2.0) == (100, 2.5)  # both ranks' samples over the slower rank's time


@pytest.mark.parametrize(
    ("here", "there", "agreed"),
    [(None, None, None), (None, 5, 5), (3, None, 3), (3, 8, 8), (0, None, 0)],
    ids=["neither", "the-other-rank", "this-rank", "the-later", "step-0"],
)
def test_every_rank_agrees_on_the_diverged_step(
    monkeypatch: pytest.MonkeyPatch, here: int | None, there: int | None, agreed: int | None
) -> None:
    """`diverged_step` takes the latest step any rank saw diverge, through `Placement.reduce_max`."""
    p = Placement(HardwareConfig(name="cpu", device="cpu"), DistState(0, 2, 0, "gloo"), CPU)
    second_rank(monkeypatch, {dist.ReduceOp.MAX: [-1.0 if there is None else float(there)]})
    run = SimpleNamespace(monitor=SimpleNamespace(diverged_step=lambda: here), placement=p)
    assert diverged_step(run) == agreed  # type: ignore[arg-type]
