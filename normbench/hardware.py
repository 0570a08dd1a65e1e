"""Device, precision and backend settings (``conf/hardware/``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
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


def resolve_device(cfg: Mapping[str, Any]) -> torch.device:
    name = str(cfg.get("device", "auto"))
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.split(":")[0] not in DEVICES[1:]:
        raise ConfigError(f"unknown hardware.device {name!r}; valid choices: {', '.join(DEVICES)}, cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"hardware.device={name!r} but CUDA is not available here; use hardware=cpu or hardware=auto")
    return torch.device(name)


def configure_backends(cfg: Mapping[str, Any]) -> None:
    """Threads, cuDNN autotuning and deterministic algorithms, process-wide."""
    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg["num_threads"]))
    torch.backends.cudnn.benchmark = bool(cfg.get("cudnn_benchmark", False))
    if cfg.get("deterministic", False):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def autocast(cfg: Mapping[str, Any], device: torch.device) -> contextlib.AbstractContextManager:
    precision = str(cfg.get("precision", "fp32"))
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown hardware.precision {precision!r}; valid choices: {', '.join(PRECISIONS)}")
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def describe(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
