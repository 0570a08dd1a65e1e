"""Crash-safe checkpoints and exact resume.

A checkpoint holds everything a run needs to continue as if it had never stopped: model
(parameters and every norm buffer: running statistics, PowerNorm counters and EMAs), optimizer,
schedule, step / epoch / position in the epoch, the data generator's state at the start of the
epoch (the loader replays the epoch's first batches to reach the same position), the global RNG
states (python, numpy, torch, CUDA), the epoch's running sums, the last epoch metrics, the
divergence monitor's reference loss, the diagnostics' state (hooks that have ``state_dict``), the
W&B run id and the byte length of ``metrics.jsonl`` at that step (a resume cuts the file back to
it, so that no step is logged twice; a segment run without those sinks carries the previous
segment's values forward), and the wall time of all segments so far.

This module is the pure side: what a checkpoint holds (`training_state` of the run's `Trained`
objects, its `Position` and what it `Carried`; `restore` loads it back), which checkpoint a resume
finds (`find_latest`: the newest that verifies and loads) and whether it comes from the same
configuration (`config_difference`, `record_difference`). `normbench.resume.checkpointer.Checkpointer`
(one per run) calls them: it writes, rotates and finds the files, applies the resume policy and
owns the random streams.

Files (`normbench.resume.files`): ``<run dir>/checkpoints/step-<step>.pt`` with a SHA-256
sidecar, each written atomically. Loading uses ``torch.load(weights_only=True)``: everything that
is not a tensor is stored as plain python types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from normbench.base.errors import ConfigError
from normbench.resume.files import (
    CHECKPOINT_DIR,
    atomic_torch_save,
    checksum_path,
    list_checkpoints,
    sha256_file,
    verify,
)
from normbench.resume.seeds import capture_rng, restore_rng

__all__ = [
    "CHECKPOINT_DIR",
    "CheckpointConfig",
    "Carried",
    "Position",
    "Trained",
    "atomic_torch_save",
    "checksum_path",
    "config_difference",
    "record_difference",
    "find_latest",
    "list_checkpoints",
    "restore",
    "sha256_file",
    "training_state",
    "verify",
]

FORMAT_VERSION = 1

VOLATILE_KEYS = ("resume", "logger", "checkpoint")
"""Top-level config keys that may change between a run and its resume (how it is logged and
saved); every other key must match the checkpoint's."""
NEUTRAL_KEYS = ("hardware.num_threads",)
"""Settings that cannot change a result and may differ on a resume (the segment records them)."""
RECORD_ONLY_KEYS = ("hardware.resolved",)
"""Keys that checkpoints of earlier versions hold but the config no longer has (what ran is in
the logged config and the summary)."""


@dataclass
class CheckpointConfig:
    enabled: bool = True
    """Write checkpoints (every ``every_n_steps`` and at each epoch end)."""
    every_n_steps: int = 500
    """Also checkpoint in the middle of an epoch every this many steps (0: at epoch ends only)."""
    keep: int = 2
    """How many complete checkpoints to keep (at least 2: the previous survives a crash while
    the next is written)."""

    def __post_init__(self) -> None:
        if self.every_n_steps < 0:
            raise ConfigError(
                f"checkpoint.every_n_steps={self.every_n_steps} is not allowed; "
                "checkpoint.every_n_steps must be >= 0 (0: epoch ends only)"
            )


# ---------------------------------------------------------------------------------------------
# Finding the checkpoint to resume from


def _load_verified(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    """The state in ``path`` after its checksum passed; raises ValueError naming the reason."""
    reason = verify(path)
    if reason is not None:
        raise ValueError(reason)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        detail = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"it does not load ({type(e).__name__}: {detail})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise ValueError(f"it is not a normbench checkpoint of format {FORMAT_VERSION}")
    return state


def find_latest(
    run_dir: Path, map_location: str | torch.device = "cpu"
) -> tuple[dict[str, Any] | None, Path | None, list[tuple[Path, str]]]:
    """``(state, path, rejected)``: the newest checkpoint that verifies and loads (None, None if
    none does) and the newer ones that failed, each with the reason."""
    rejected: list[tuple[Path, str]] = []
    for _, path in list_checkpoints(run_dir):
        try:
            return _load_verified(path, map_location), path, rejected
        except ValueError as e:
            rejected.append((path, str(e)))
    return None, None, rejected


def config_difference(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> str | None:
    """The first key whose value differs, as ``key=<saved> there, <current> here``; else None."""
    for key in sorted(set(saved) | set(current)):
        if not prefix and key in VOLATILE_KEYS:
            continue
        name = f"{prefix}{key}"
        if name in RECORD_ONLY_KEYS or name in NEUTRAL_KEYS:
            continue
        if key not in saved:
            return f"{name} is new here (={current[key]!r})"
        if key not in current:
            return f"{name}={saved[key]!r} there is absent here"
        a, b = saved[key], current[key]
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            diff = config_difference(a, b, f"{name}.")
            if diff:
                return diff
        elif a != b:
            return f"{name}={a!r} there, {b!r} here"
    return None


Load = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""A typed loader of records into plain python (`normbench.config.comparable_record`), passed in
by the runner: this module sits below the config and does not import it."""


def record_difference(saved: Any, current: Mapping[str, Any], load: Load) -> str | None:
    """`config_difference` of two records as ``load`` reads them (a key that an older version did
    not write compares at its default); why, when ``load`` cannot read the saved one."""
    try:
        before = load(saved)
    except ConfigError as e:
        return str(e)
    return config_difference(before, load(current))


@dataclass(frozen=True)
class Trained:
    """What trains: the objects whose state a checkpoint holds and a resume loads back."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    hooks: Sequence[Any]
    """The diagnostics (those with ``state_dict`` are saved, by name)."""
    generator: torch.Generator
    """The training loader's random stream."""


@dataclass(frozen=True)
class Position:
    """Where the run stands at the checkpoint: the step, and ``batch_in_epoch`` batches into ``epoch``."""

    step: int
    epoch: int
    batch_in_epoch: int
    generator_state: torch.Tensor
    """The loader's random stream at the epoch's start: a resume replays the epoch from there."""
    sums: Mapping[str, torch.Tensor]
    """The epoch's running metric sums so far."""


@dataclass(frozen=True)
class Carried:
    """What the run's records stand at, carried into its next segment: the last epoch's metrics,
    the divergence monitor's reference loss, the W&B run id, ``metrics.jsonl``'s length and
    SHA-256, the wall and training time of all segments so far, the segments."""

    final: Mapping[str, Any] = field(default_factory=dict)
    reference_loss: float | None = None
    wandb_run_id: str | None = None
    metrics_offset: int | None = None
    metrics_sha256: str | None = None
    wall_time_s: float = 0.0
    train_time_s: float = 0.0
    segments: Sequence[Mapping[str, Any]] = ()


def training_state(config: Mapping[str, Any], trained: Trained, at: Position, carried: Carried) -> dict[str, Any]:
    """Everything `restore` needs, in plain types and tensors (``weights_only`` loadable)."""
    return {
        "format": FORMAT_VERSION,
        "config": dict(config),
        "step": int(at.step),
        "epoch": int(at.epoch),
        "batch_in_epoch": int(at.batch_in_epoch),
        "model": trained.model.state_dict(),
        "optimizer": trained.optimizer.state_dict(),
        "scheduler": trained.scheduler.state_dict(),
        "epoch_generator_state": at.generator_state.clone(),
        "rng": capture_rng(),
        "epoch_sums": {k: v.detach().clone() for k, v in at.sums.items()},
        "final": {k: v for k, v in carried.final.items() if isinstance(v, (int, float, str, bool)) or v is None},
        "reference_loss": carried.reference_loss,
        "diagnostics": {h.name: h.state_dict() for h in trained.hooks if hasattr(h, "state_dict")},
        "wandb_run_id": carried.wandb_run_id,
        "metrics_offset": carried.metrics_offset,
        "metrics_sha256": carried.metrics_sha256,
        "wall_time_s": float(carried.wall_time_s),
        "train_time_s": float(carried.train_time_s),
        "segments": [dict(seg) for seg in carried.segments],
    }


def restore(state: Mapping[str, Any], trained: Trained) -> None:
    """Load ``state`` into the run's objects and the global RNGs (the counters stay in ``state``)."""
    trained.model.load_state_dict(state["model"])
    trained.optimizer.load_state_dict(state["optimizer"])
    trained.scheduler.load_state_dict(state["scheduler"])
    for hook in trained.hooks:
        saved = state["diagnostics"].get(hook.name)
        if saved is not None and hasattr(hook, "load_state_dict"):
            hook.load_state_dict(saved)
    trained.generator.set_state(state["epoch_generator_state"])
    restore_rng(state["rng"])
