"""Data parallel training over processes (``hardware=ddp``), with `torch.distributed`.

One process per device, started by ``torchrun --nproc_per_node=N -m normbench hardware=ddp``
(its ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_*`` environment), or by a SLURM job
with several tasks through Hydra's submitit launcher (``hydra.launcher.tasks_per_node=N``; the
same variables are exported from submitit's job environment). Backend: gloo on CPU, NCCL on CUDA.

What changes against one process:

- ``batch_size`` stays the *global* batch. Every rank walks the same permutation of the
  in-memory training split (the runner's generator has the same seed on every rank), builds the
  same global batch and trains on its contiguous ``1/world_size`` slice of it, so the global
  batch of step k is the one a single process would use. Augmentation runs on the global batch
  before slicing, so its random draws are those of a single process too.
- DDP averages the gradients of the per-rank mean losses: the gradient of the global mean.
- BatchNorm statistics are per rank (``batch_size / world_size`` samples) unless
  ``norm.sync=true`` synchronizes them over the global batch; ``hardware.resolved`` records
  which (``batch_stats_samples``).
- Epoch metrics are sums all-reduced over ranks before the means are taken; the logged
  ``train/batch_loss`` is the mean over ranks (the loss of the global batch); throughput counts
  every rank's samples. Evaluation runs on every rank (same weights, same numbers); only rank 0
  writes files and W&B.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from normbench.base.errors import ConfigError
from normbench.placement.hardware import HardwareConfig

LAUNCH_HINT = (
    "launch one process per device: torchrun --nproc_per_node=N -m normbench hardware=ddp ..., "
    "or hydra/launcher=slurm hydra.launcher.tasks_per_node=N hardware=ddp"
)


@dataclass(frozen=True)
class DistState:
    """Where this process sits in the job. ``backend is None``: a plain single-process run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.backend is not None


def launch_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """``(rank, world_size, local_rank)`` set by the launcher, or ``None`` outside a launcher.

    torchrun sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``. In a submitit job with several tasks
    (SLURM, or the ``submitit_local`` launcher) they are exported here from submitit's job
    environment, with ``MASTER_ADDR``/``MASTER_PORT``, for ``init_process_group``'s ``env://``.
    """
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", env["RANK"]))
    if environ is None and "SUBMITIT_EXECUTOR" in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        job = TorchDistributedEnvironment()
        if job.world_size > 1:
            job.export(set_cuda_visible_devices=False)
            return job.rank, job.world_size, job.local_rank
    return None


def init(hw: HardwareConfig, device_type: str) -> DistState:
    """Join the process group when ``hw.distributed``; check that the launch and the config agree.

    A multi-process launch with a single-process ``hardware`` config (every rank would train
    alone and write the same files) and ``hardware=ddp`` without a launcher both raise
    `ConfigError`.
    """
    launched = launch_env()
    if not hw.distributed:
        if launched is not None and launched[1] > 1:
            raise ConfigError(
                f"started as {launched[1]} processes (WORLD_SIZE={launched[1]}) but hardware={hw.name} "
                "is single-process; pass hardware=ddp"
            )
        return DistState()
    if launched is None:
        raise ConfigError(f"hardware.distributed=true needs a launcher; {LAUNCH_HINT}")
    backend = hw.backend
    if backend == "auto":
        backend = "nccl" if device_type == "cuda" else "gloo"
    rank, world_size, local_rank = launched
    if not dist.is_initialized():
        if device_type == "cuda":  # an explicit index (hardware.device=cuda:0) is every rank's: ranks may share a GPU
            index = hw.device.partition(":")[2]
            torch.cuda.set_device(int(index) if index else local_rank)
        dist.init_process_group(backend, rank=rank, world_size=world_size)
    return DistState(rank, world_size, local_rank, backend)


def shutdown(state: DistState, wait_for_others: bool = True) -> None:
    """Leave the process group; after a normal end, only once every rank is done with it (a
    rank that tears gloo down while another still talks to it aborts that one)."""
    if state.active and dist.is_initialized():
        if wait_for_others:
            dist.barrier()
        dist.destroy_process_group()


def check_batch(batch_size: int, state: DistState) -> None:
    if batch_size % state.world_size:
        raise ConfigError(
            f"batch_size={batch_size} (the global batch) is not divisible by the {state.world_size} processes"
        )


_discard_own_dir: Callable[[Path], object] | None = None


def on_own_run_dir(discard: Callable[[Path], object]) -> None:
    """How `shared_run_dir` cleans a non-zero rank's own run directory: `normbench.records.rundir` sets
    its ``discard_new`` (only what this run created; never a folder or file that was there
    before), so that this room need not import it."""
    global _discard_own_dir
    _discard_own_dir = discard


def shared_run_dir(run_dir: Path, state: DistState) -> Path:
    """Rank 0's run directory, on every rank. A rank whose Hydra made a directory of its own (no
    ``hydra.run.dir`` given: each rank's timestamp differs) hands it to `on_own_run_dir`'s cleaner,
    which removes what this run created there; without one, nothing is removed."""
    if not state.active:
        return run_dir
    holder: list[Any] = [str(run_dir)]
    dist.broadcast_object_list(holder, src=0)
    main_dir = Path(holder[0])
    if run_dir.resolve() != main_dir.resolve() and _discard_own_dir is not None:
        _discard_own_dir(run_dir)
    return main_dir


@contextlib.contextmanager
def main_first(state: DistState) -> Iterator[None]:
    """Rank 0 runs the block first (writing a data set, downloading), then the other ranks."""
    if state.active and not state.is_main:
        dist.barrier()
    yield
    if state.active and state.is_main:
        dist.barrier()


def shard(batch: Any, rank: int, world_size: int) -> Any:
    """Rank ``rank``'s contiguous slice (along dim 0) of every tensor in a batch of tensors,
    tuples, lists, dicts and dataclasses (a `TranslationBatch`); concatenating the ranks' slices
    gives the batch back. A dataclass's fields that hold no tensors (``pad``) are kept as they are."""
    if isinstance(batch, Tensor):
        return batch.tensor_split(world_size)[rank]
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(
            batch,
            **{
                f.name: shard(getattr(batch, f.name), rank, world_size)
                for f in dataclasses.fields(batch)
                if f.init and _holds_tensors(getattr(batch, f.name))
            },
        )
    if isinstance(batch, tuple):
        return tuple(shard(b, rank, world_size) for b in batch)
    if isinstance(batch, list):
        return [shard(b, rank, world_size) for b in batch]
    if isinstance(batch, dict):
        return {k: shard(v, rank, world_size) for k, v in batch.items()}
    raise TypeError(
        f"cannot shard a batch of type {type(batch).__name__}; use tensors, tuples, lists, dicts or dataclasses"
    )


def _holds_tensors(value: Any) -> bool:
    if isinstance(value, Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensors(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensors(v) for v in value.values())
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


class ShardedTask:
    """A `Task` whose training batches are this rank's slice of the wrapped task's global batches.

    Everything else (evaluation, summaries, model arguments) is the wrapped task's.
    """

    def __init__(self, task: Any, state: DistState) -> None:
        self.task = task
        self.state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def train_batches(self, epoch: int, generator: torch.Generator) -> Iterator[Any]:
        for batch in self.task.train_batches(epoch, generator):
            yield shard(batch, self.state.rank, self.state.world_size)


def shard_task(task: Any, state: DistState) -> Any:
    return ShardedTask(task, state) if state.world_size > 1 else task


def wrap_model(model: nn.Module, state: DistState, device: torch.device) -> nn.Module:
    """``DistributedDataParallel(model)`` in a distributed run, the model itself otherwise."""
    if not state.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def sum_over_ranks(values: Mapping[str, Tensor], state: DistState) -> dict[str, Tensor]:
    """Each value summed over ranks (in float64: counts and sums stay exact)."""
    if not state.active or not values:
        return dict(values)
    keys = sorted(values)
    device = values[keys[0]].device
    stacked = torch.stack([values[k].detach().to(device, torch.float64).reshape(()) for k in keys])
    dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
    return dict(zip(keys, stacked.unbind()))


def mean_over_ranks(value: Tensor, state: DistState) -> Tensor:
    if not state.active:
        return value
    total = value.detach().to(torch.float64).clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / state.world_size


def max_over_ranks(value: float, state: DistState, device: torch.device) -> float:
    """``value``'s largest over ranks (in float32 on ``device``: exact for integers below 2**24,
    such as a step number)."""
    if not state.active:
        return value
    t = torch.tensor(float(value), device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def throughput_over_ranks(units: int, seconds: float, state: DistState, device: torch.device) -> tuple[int, float]:
    """All ranks' units, over the slowest rank's time."""
    if not state.active:
        return units, seconds
    t = torch.tensor([float(units), seconds], dtype=torch.float64, device=device)
    total = t[:1].clone()
    slowest = t[1:].clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return int(total.item()), float(slowest.item())


def describe(state: DistState, batch_size: int, sync: bool) -> dict[str, Any]:
    """What the logged config and summary say about the process layout and BN's batch
    (``sync``: the norm synchronizes its batch statistics over the processes)."""
    per_rank = batch_size // state.world_size
    return {
        "world_size": state.world_size,
        "dist_backend": state.backend,
        "norm_sync": sync,
        "batch_stats_samples": batch_size if sync or state.world_size == 1 else per_rank,
    }
