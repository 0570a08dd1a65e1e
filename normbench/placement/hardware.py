"""Device, precision and backend settings (``conf/hardware/``).

``precision=bf16`` runs the forward under `torch.autocast` in bfloat16; the norms keep their
statistics in float32 (torch's batch/layer/group/RMS norm kernels accumulate in float32 for
bfloat16 inputs, and `tests/placement/test_hardware.py` checks every registered norm against a float64
reference). ``channels_last`` stores images and conv weights NHWC; ``compile`` trains through
`torch.compile` of the model while diagnostics and checkpoints use the uncompiled module (same
parameters). ``distributed`` (``hardware=ddp``) is described in `normbench.placement.distributed`.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from normbench.base.errors import ConfigError
from normbench.base.hydra_job import current_hydra_job
from normbench.base.output import warn

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16")
BACKENDS = ("auto", "gloo", "nccl")


@dataclass
class HardwareConfig:
    name: str = "auto"
    device: str = "auto"
    """``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    precision: str = "fp32"
    """``fp32`` or ``bf16`` (autocast; the norms compute their statistics in float32)."""
    channels_last: bool = False
    compile: bool = False
    cudnn_benchmark: bool = False
    num_threads: int | None = None
    deterministic: bool = False
    fallback_random: bool = True
    """Under ``compile``, random ops draw torch's own generator (eager's stream); false: inductor's
    fused random (`maybe_compile`)."""
    distributed: bool = False
    """One process per device under torchrun / a multi-task SLURM job (`normbench.placement.distributed`)."""
    backend: str = "auto"
    """``torch.distributed`` backend: ``auto`` (NCCL on CUDA, gloo on CPU), ``gloo``, ``nccl``."""

    def __post_init__(self) -> None:
        kind, _, index = self.device.partition(":")
        if self.device != "auto" and (kind not in DEVICES[1:] or (index and (kind != "cuda" or not index.isdigit()))):
            raise ConfigError(f"unknown hardware.device {self.device!r}; valid choices: {', '.join(DEVICES)}, cuda:N")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"hardware.precision={self.precision!r} is not registered; valid choices: {', '.join(PRECISIONS)}"
            )
        if self.num_threads is not None and self.num_threads <= 0:
            raise ConfigError(
                f"hardware.num_threads={self.num_threads} must be positive (or null: the cores free at the start)"
            )
        cores = os.cpu_count() or 1
        if self.num_threads is not None and self.num_threads > cores:  # 100000 segfaults, 5000 crawls
            raise ConfigError(
                f"hardware.num_threads={self.num_threads} is not allowed; hardware.num_threads must be in "
                f"[1, {cores}] (this machine's {cores} cores), or null: the cores free at the start"
            )
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown hardware.backend {self.backend!r}; valid choices: {', '.join(BACKENDS)}")


def device_type(cfg: HardwareConfig) -> str:
    """``cpu`` or ``cuda``: what `resolve_device` will pick, without choosing an index."""
    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device.split(":")[0]


def resolve_device(cfg: HardwareConfig, local_rank: int | None = None) -> torch.device:
    """The training device; in a distributed run on CUDA, GPU ``local_rank`` of this node."""
    kind = device_type(cfg)
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"hardware.device={cfg.device!r} but CUDA is not available here; use hardware=cpu or hardware=auto"
        )
    if kind == "cuda" and local_rank is not None and ":" not in cfg.device:
        return torch.device("cuda", local_rank)
    return torch.device(kind if cfg.device == "auto" else cfg.device)


PARALLEL_LOCAL_LAUNCHERS = ("submitit_local", "joblib")
"""Hydra launchers that run several jobs of a sweep at once on this machine."""


def default_num_threads(cores: int, load1: float, parallel_local: bool) -> int:
    """CPU threads when ``hardware.num_threads`` is null: 1 for a job of a sweep whose launcher runs
    several jobs at once here; else the cores free at the start (usable cores less the 1-minute
    load, rounded; all of them where the system keeps no load), at least 1. Torch's own default (one
    per core) ran GroupNorm ResNet20 at 10 samples/s on 2 cores at load 9, against 62 at load 2.2."""
    if parallel_local:
        return 1
    if math.isnan(load1):
        return cores
    return max(1, min(cores, round(cores - load1)))


def start_load() -> float:
    """The 1-minute load when a run picks its threads (`configure_backends`); NaN where unknown."""
    return load_now()[0]


def _parallel_local_sweep() -> bool:
    job = current_hydra_job()
    return bool(job and job.multirun and job.choices.get("hydra/launcher") in PARALLEL_LOCAL_LAUNCHERS)


def configure_backends(cfg: HardwareConfig) -> None:
    """Threads (on CPU, `default_num_threads` unless ``num_threads`` is set, with one warning when
    the machine is busier than its cores, unless ``NORMBENCH_LOAD_WARNING=off``), cuDNN autotuning
    and deterministic algorithms, process-wide."""
    threads = cfg.num_threads
    if device_type(cfg) == "cpu":
        cores, load1 = usable_cores(), start_load()
        if threads is None:  # chosen here: say so when the machine is busier than its cores
            threads = default_num_threads(cores, load1, _parallel_local_sweep())
            if load1 > cores + QUIET_MARGIN and os.environ.get("NORMBENCH_LOAD_WARNING", "on") != "off":
                plural = "s" * (threads > 1)
                warn(f"the machine's 1-minute load is {load1:.1f} on {cores} cores: this run takes {threads} "
                     f"thread{plural} and its timings are not quiet (hardware.num_threads sets them)")  # fmt: skip
    if threads:
        torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    if cfg.deterministic != torch.are_deterministic_algorithms_enabled():  # it imports torch._inductor
        torch.use_deterministic_algorithms(cfg.deterministic)  # and so dynamo (~3 s): only to change it
    torch.backends.cudnn.deterministic = cfg.deterministic


def autocast(cfg: HardwareConfig, device: torch.device) -> contextlib.AbstractContextManager:
    if cfg.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def upload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (in host memory) on ``device`` without stalling the host: on CUDA pinned, then copied
    asynchronously (a copy from pageable memory first waits for the device's stream, a host
    sync per call); the pinned block is not reused before its copy ends (torch's host allocator)."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def prepare_model(model: torch.nn.Module, cfg: HardwareConfig) -> torch.nn.Module:
    """NHWC weights when ``channels_last`` (in place; returns the same module)."""
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)
    return model


def maybe_compile(
    model: torch.nn.Module, cfg: HardwareConfig, *, varying_shapes: bool = False, backend: str = "inductor"
) -> torch.nn.Module:
    """`torch.compile` of ``model`` when ``compile``; it shares the module's parameters and buffers.

    ``varying_shapes`` (translation: every batch has its own (batch, source, target) sizes):
    compile with symbolic sizes from the first call, so a run builds one graph (plus one per size
    0/1 specialization) instead of up to four (a static graph, then one per axis seen to change);
    images keep static shapes. ``fallback_random`` (default true): random ops (dropout, the noise
    of ``bn_noisy``) keep torch's own generator under inductor, so a compiled run draws the same
    stream as an eager one and the diagnostics, which rewind that generator to the step, see the
    step's draws; false lets inductor fuse them with its own Philox stream (faster on GPU; a
    compiled run's noise then differs from eager's, and the probes replay other draws)."""
    if not cfg.compile:
        return model
    import torch._inductor.config

    torch._inductor.config.fallback_random = cfg.fallback_random
    return torch.compile(model, backend=backend, dynamic=True if varying_shapes else None)


def describe(device: torch.device, cfg: HardwareConfig) -> dict[str, Any]:
    """Device, precision, layout options and versions, for the logged config and the summary."""
    info: dict[str, Any] = {
        "device": str(device),
        "precision": cfg.precision,
        "channels_last": cfg.channels_last,
        "compile": cfg.compile,
        "num_threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


QUIET_MARGIN = 0.5
"""Load above the usable cores that still counts as quiet (a shell, a short ``git`` beside the run)."""


def load_now() -> tuple[float, float, float]:
    """The machine's 1-, 5- and 15-minute load averages (NaN where the system has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):  # not every system keeps them
        return (float("nan"),) * 3


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_record(start: tuple[float, float, float], end: tuple[float, float, float], cores: int) -> dict[str, Any]:
    """What a run's summary records of the machine's load beside its timings (``summary["machine"]``):
    the load averages at the start and the end of the run, the usable cores and ``quiet``: every 1-minute
    average seen and the 15-minute one at the end at most ``cores`` + `QUIET_MARGIN` (no process waited
    for a core, the run's own included; unknown loads are never quiet). Throughput is compared only
    between runs that ran quietly (`normbench.analysis.leaderboard.leaderboard_figure.measured_quietly`)."""
    seen = (start[0], end[0], end[2])
    quiet = all(v == v for v in seen) and max(seen) <= cores + QUIET_MARGIN
    return {"cores": cores, "load_start": list(start), "load_end": list(end), "quiet": bool(quiet)}
