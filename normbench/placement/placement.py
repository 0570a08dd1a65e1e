"""`Placement`: where one run runs, made once from ``config.hardware`` (Lightning's ``Strategy``).

The runner asks it, and nothing else, about the device, the processes and the machine: the device
(`hardware.resolve_device`), this process's place in the job (`distributed.DistState`), the forward's
precision (`autocast`), the process-wide backends (threads, cuDNN, determinism), the model as the
step calls it (on the device, NHWC, DDP-wrapped, compiled: `setup_model`), this rank's slice of the
data (`setup_task`), the collectives (``reduce_*``), what the run records of its hardware
(`describe`), the machine's load, and leaving the process group (`shutdown`). Each method is a thin
wrapper of a pure function of `hardware` or `distributed`; in a single-process run every
collective returns its input untouched, with no kernel and no sync.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from normbench.placement import distributed, hardware
from normbench.placement.distributed import DistState
from normbench.placement.hardware import HardwareConfig


@dataclass(frozen=True)
class Placement:
    """The device and the processes of one run. `start` makes it; `shutdown` ends it."""

    hardware: HardwareConfig
    dist: DistState
    """Where this process sits among the processes of the job (one, unless ``hardware=ddp``)."""
    device: torch.device
    """The training device; in a distributed run on CUDA, this node's GPU ``local_rank``."""

    @classmethod
    def start(cls, hw: HardwareConfig) -> Placement:
        """Choose the device (`hardware.resolve_device`: in a launched ``hw.distributed`` run, this
        node's GPU ``LOCAL_RANK``), then join the process group where ``hw.distributed``
        (`distributed.init`: the launch and the config must agree)."""
        launched = distributed.launch_env() if hw.distributed else None
        device = hardware.resolve_device(hw, launched[2] if launched is not None else None)
        return cls(hw, distributed.init(hw, device.type), device)

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files and W&B."""
        return self.dist.is_main

    @property
    def rank(self) -> int:
        return self.dist.rank

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    # ---- the set-up -----------------------------------------------------------------------

    def check_batch(self, batch_size: int) -> None:
        """The global ``batch_size`` splits evenly over the processes (`ConfigError` where not)."""
        distributed.check_batch(batch_size, self.dist)

    def shared_run_dir(self, run_dir: Path) -> Path:
        """Rank 0's run directory, on every rank (`distributed.shared_run_dir`)."""
        return distributed.shared_run_dir(run_dir, self.dist)

    def configure_backends(self) -> None:
        """Threads, cuDNN autotuning and deterministic algorithms, process-wide (`hardware.configure_backends`)."""
        hardware.configure_backends(self.hardware)

    def main_first(self) -> contextlib.AbstractContextManager[None]:
        """A block that rank 0 runs first (writing a data set), then the other ranks."""
        return distributed.main_first(self.dist)

    def setup_task(self, task: Any) -> Any:
        """The task as this process trains it: its images NHWC where ``channels_last``, its
        training batches this rank's slice of the global batch (`shard`)."""
        if self.hardware.channels_last:
            task.memory_format = torch.channels_last
        return self.shard(task)

    def shard(self, task: Any) -> Any:
        """``task`` whose training batches are this rank's contiguous slice of each global batch
        (`distributed.ShardedTask`); the task itself in a single process."""
        return distributed.shard_task(task, self.dist)

    def setup_model(self, model: nn.Module, *, varying_shapes: bool = False) -> nn.Module:
        """Move ``model`` to the device (in place; NHWC weights where ``channels_last``) and return
        the module the training step calls: ``model`` DDP-wrapped in a distributed run, compiled
        where ``compile`` (with symbolic sizes for ``varying_shapes``: `hardware.maybe_compile`).
        Diagnostics, checkpoints and evaluation statistics keep using ``model`` (same parameters)."""
        model.to(self.device)
        hardware.prepare_model(model, self.hardware)
        wrapped = distributed.wrap_model(model, self.dist, self.device)
        return hardware.maybe_compile(wrapped, self.hardware, varying_shapes=varying_shapes)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward's precision: `torch.autocast` in bfloat16 for ``precision=bf16``, else nothing."""
        return hardware.autocast(self.hardware, self.device)

    # ---- the collectives: sums, means and maxima over the ranks ---------------------------

    def reduce_sum(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Each value summed over the ranks, in float64 (`distributed.sum_over_ranks`)."""
        return distributed.sum_over_ranks(values, self.dist)

    def reduce_mean(self, value: Tensor) -> Tensor:
        """``value``'s mean over the ranks (float64 in a distributed run; the value itself in one process)."""
        return distributed.mean_over_ranks(value, self.dist)

    def reduce_max(self, value: float) -> float:
        """``value``'s largest over the ranks (`distributed.max_over_ranks`)."""
        return distributed.max_over_ranks(value, self.dist, self.device)

    def reduce_throughput(self, units: int, seconds: float) -> tuple[int, float]:
        """All ranks' units over the slowest rank's seconds (`distributed.throughput_over_ranks`)."""
        return distributed.throughput_over_ranks(units, seconds, self.dist, self.device)

    # ---- what the run records; the end ----------------------------------------------------

    def describe(self, batch_size: int, sync: bool) -> dict[str, Any]:
        """``hardware.resolved``: device, precision, layout, threads and versions (`hardware.describe`),
        then the processes and BatchNorm's batch (`distributed.describe`; ``sync``: the norm
        synchronizes its statistics over the processes)."""
        return {**hardware.describe(self.device, self.hardware), **distributed.describe(self.dist, batch_size, sync)}

    def machine_load(self) -> tuple[float, float, float]:
        """The machine's 1-, 5- and 15-minute load averages now (`hardware.load_now`)."""
        return hardware.load_now()

    def machine_record(self, load_start: tuple[float, float, float]) -> dict[str, Any]:
        """The summary's ``machine``: the load at ``load_start`` and now, the usable cores, ``quiet``
        (`hardware.machine_record`)."""
        return hardware.machine_record(load_start, hardware.load_now(), hardware.usable_cores())

    def shutdown(self, wait_for_others: bool = True) -> None:
        """Leave the process group (`distributed.shutdown`); ``wait_for_others=False`` after an
        error (the other ranks may be stuck in a collective)."""
        distributed.shutdown(self.dist, wait_for_others)
