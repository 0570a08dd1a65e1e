"""Device, precision and backend settings (``conf/hardware/``).

``precision=bf16`` runs the forward under `torch.autocast` in bfloat16; the norms keep their
statistics in float32 (torch's batch/layer/group/RMS norm kernels accumulate in float32 for
bfloat16 inputs, and `tests/test_hardware.py` checks every registered norm against a float64
reference). ``channels_last`` stores images and conv weights NHWC; ``compile`` trains through
`torch.compile` of the model while diagnostics and checkpoints use the uncompiled module (same
parameters). ``distributed`` (``hardware=ddp``) is described in `normbench.distributed`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from normbench.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16")


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
    distributed: bool = False
    """One process per device under torchrun / a multi-task SLURM job (`normbench.distributed`)."""
    backend: str = "auto"
    """``torch.distributed`` backend: ``auto`` (NCCL on CUDA, gloo on CPU), ``gloo``, ``nccl``."""
    resolved: dict[str, Any] = field(default_factory=dict)
    """Written by the runner (what ran: device, precision, versions, processes); input is ignored."""


def check(cfg: Mapping[str, Any]) -> None:
    """Reject unknown names before anything is built or written."""
    name = str(cfg.get("device", "auto"))
    kind, _, index = name.partition(":")
    if name != "auto" and (kind not in DEVICES[1:] or (index and (kind != "cuda" or not index.isdigit()))):
        raise ConfigError(f"unknown hardware.device {name!r}; valid choices: {', '.join(DEVICES)}, cuda:N")
    precision = str(cfg.get("precision", "fp32"))
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown hardware.precision {precision!r}; valid choices: {', '.join(PRECISIONS)}")
    threads = cfg.get("num_threads")
    if threads is not None and int(threads) <= 0:
        raise ConfigError(f"hardware.num_threads={threads} must be positive (or null for torch's default)")


def device_type(cfg: Mapping[str, Any]) -> str:
    """``cpu`` or ``cuda``: what `resolve_device` will pick, without choosing an index."""
    name = str(cfg.get("device", "auto"))
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name.split(":")[0]


def resolve_device(cfg: Mapping[str, Any], local_rank: int | None = None) -> torch.device:
    """The training device; in a distributed run on CUDA, GPU ``local_rank`` of this node."""
    check(cfg)
    name = str(cfg.get("device", "auto"))
    kind = device_type(cfg)
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"hardware.device={name!r} but CUDA is not available here; use hardware=cpu or hardware=auto")
    if kind == "cuda" and local_rank is not None and ":" not in name:
        return torch.device("cuda", local_rank)
    return torch.device(kind if name == "auto" else name)


def configure_backends(cfg: Mapping[str, Any]) -> None:
    """Threads, cuDNN autotuning and deterministic algorithms, process-wide."""
    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg["num_threads"]))
    torch.backends.cudnn.benchmark = bool(cfg.get("cudnn_benchmark", False))
    deterministic = bool(cfg.get("deterministic", False))
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic


def autocast(cfg: Mapping[str, Any], device: torch.device) -> contextlib.AbstractContextManager:
    check(cfg)
    if str(cfg.get("precision", "fp32")) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def prepare_model(model: torch.nn.Module, cfg: Mapping[str, Any]) -> torch.nn.Module:
    """NHWC weights when ``channels_last`` (in place; returns the same module)."""
    if cfg.get("channels_last", False):
        model.to(memory_format=torch.channels_last)
    return model


def maybe_compile(model: torch.nn.Module, cfg: Mapping[str, Any]) -> torch.nn.Module:
    """`torch.compile` of ``model`` when ``compile``; it shares the module's parameters and buffers.

    Random ops (dropout, the noise of ``bn_noisy``) keep torch's own generator under inductor
    (``fallback_random``), so a compiled run draws the same stream as an eager one and the
    diagnostics, which rewind that generator to the step, see the step's draws."""
    if not cfg.get("compile", False):
        return model
    import torch._inductor.config

    torch._inductor.config.fallback_random = True
    return torch.compile(model)


def describe(device: torch.device, cfg: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Device, precision, layout options and versions, for the logged config and the summary."""
    cfg = cfg or {}
    info: dict[str, Any] = {
        "device": str(device),
        "precision": str(cfg.get("precision", "fp32")),
        "channels_last": bool(cfg.get("channels_last", False)),
        "compile": bool(cfg.get("compile", False)),
        "num_threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
