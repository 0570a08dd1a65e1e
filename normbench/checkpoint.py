"""Crash-safe checkpoints and exact resume.

A checkpoint holds everything a run needs to continue as if it had never stopped: model
(parameters and every norm buffer: running statistics, PowerNorm counters and EMAs), optimizer,
schedule, step / epoch / position in the epoch, the data generator's state at the start of the
epoch (the loader replays the epoch's first batches to reach the same position), the global RNG
states (python, numpy, torch, CUDA), the epoch's running sums, the last epoch metrics, the
divergence monitor's reference loss, the diagnostics' state (hooks that have ``state_dict``), the
W&B run id and the byte length of ``metrics.jsonl`` at that step (a resume cuts the file back to
it, so that no step is logged twice).

Files: ``<run dir>/checkpoints/step-<step>.pt``. Each is written to a temporary file, flushed and
fsynced, then renamed into place; the older ones are removed only after the new one is complete
(the last ``keep`` are kept). Loading uses ``torch.load(weights_only=True)``: everything that is
not a tensor is stored as plain python types. A file that fails to load (truncated on disk) is
skipped with a warning and the previous checkpoint is used.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normbench.errors import ConfigError
from normbench.output import warn

FORMAT_VERSION = 1
CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d+)\.pt$")

VOLATILE_KEYS = ("resume", "logger", "checkpoint")
"""Top-level config keys that may change between a run and its resume (how it is logged and
saved); every other key must match the checkpoint's."""


@dataclass
class CheckpointConfig:
    enabled: bool = True
    """Write checkpoints (every ``every_n_steps`` and at each epoch end)."""
    every_n_steps: int = 500
    """Also checkpoint in the middle of an epoch every this many steps (0: at epoch ends only)."""
    keep: int = 2
    """How many complete checkpoints to keep (at least 2: the previous survives a crash while
    the next is written)."""


# ---------------------------------------------------------------------------------------------
# RNG states as plain types


def capture_rng() -> dict[str, Any]:
    """The global RNG states: python, numpy (as a tensor of its keys), torch CPU and CUDA."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["name"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------------------------------------
# Files


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some file systems do not allow opening a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file, flush + fsync, then ``os.replace`` onto ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the checkpoints in ``run_dir``, newest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found, reverse=True)


def load_latest(run_dir: Path, map_location: str | torch.device = "cpu") -> tuple[dict[str, Any], Path] | None:
    """The newest checkpoint that loads, with its path; a broken one is skipped with a warning."""
    for _, path in list_checkpoints(run_dir):
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
            if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
                raise ValueError(f"not a normbench checkpoint of format {FORMAT_VERSION}")
        except Exception as e:  # truncated or corrupted on disk: fall back to the previous one
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            warn(f"checkpoint {path} is unreadable ({type(e).__name__}: {reason}); using the previous one")
            continue
        return state, path
    return None


def config_difference(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> str | None:
    """The first key whose value differs, as ``key=<saved> there, <current> here``; else None."""
    for key in sorted(set(saved) | set(current)):
        if not prefix and key in VOLATILE_KEYS:
            continue
        name = f"{prefix}{key}"
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


class Checkpointer:
    """Writes and finds a run's checkpoints; ``due(step)`` says when one is due mid-epoch."""

    def __init__(self, run_dir: Path, cfg: Mapping[str, Any]) -> None:
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / CHECKPOINT_DIR
        self.enabled = bool(cfg.get("enabled", True))
        self.every_n_steps = int(cfg.get("every_n_steps", 0) or 0)
        self.keep = max(int(cfg.get("keep", 2)), 2)

    def due(self, step: int) -> bool:
        return self.enabled and self.every_n_steps > 0 and step % self.every_n_steps == 0

    def resume_state(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        """The latest checkpoint's state, checked against ``config``; None when there is none."""
        found = load_latest(self.run_dir)
        if found is None:
            if list_checkpoints(self.run_dir):
                warn(f"no readable checkpoint in {self.folder}; starting from step 0")
            return None
        state, path = found
        diff = config_difference(state["config"], config)
        if diff:
            raise ConfigError(
                f"resume=true but checkpoint {path} comes from another configuration ({diff}); "
                "resume with the run's own settings, or start a new run directory"
            )
        return state

    def has_checkpoints(self) -> bool:
        return bool(list_checkpoints(self.run_dir))

    def save(self, state: dict[str, Any]) -> Path | None:
        if not self.enabled:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"step-{int(state['step']):08d}.pt"
        atomic_torch_save(state, path)
        for _, old in list_checkpoints(self.run_dir)[self.keep :]:
            old.unlink(missing_ok=True)
        return path


def training_state(
    *,
    config: Mapping[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    hooks: Iterable[Any],
    epoch_generator_state: torch.Tensor,
    step: int,
    epoch: int,
    batch_in_epoch: int,
    epoch_sums: Mapping[str, torch.Tensor],
    final: Mapping[str, Any],
    reference_loss: float | None,
    wandb_run_id: str | None,
    metrics_offset: int | None,
) -> dict[str, Any]:
    """Everything `restore` needs, in plain types and tensors (``weights_only`` loadable)."""
    return {
        "format": FORMAT_VERSION,
        "config": dict(config),
        "step": int(step),
        "epoch": int(epoch),
        "batch_in_epoch": int(batch_in_epoch),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch_generator_state": epoch_generator_state.clone(),
        "rng": capture_rng(),
        "epoch_sums": {k: v.detach().clone() for k, v in epoch_sums.items()},
        "final": {k: v for k, v in final.items() if isinstance(v, (int, float, str, bool)) or v is None},
        "reference_loss": reference_loss,
        "diagnostics": {h.name: h.state_dict() for h in hooks if hasattr(h, "state_dict")},
        "wandb_run_id": wandb_run_id,
        "metrics_offset": metrics_offset,
    }


def restore(
    state: Mapping[str, Any],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    hooks: Iterable[Any],
    generator: torch.Generator,
) -> None:
    """Load ``state`` into the run's objects and the global RNGs (the counters stay in ``state``)."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    for hook in hooks:
        saved = state["diagnostics"].get(hook.name)
        if saved is not None and hasattr(hook, "load_state_dict"):
            hook.load_state_dict(saved)
    generator.set_state(state["epoch_generator_state"])
    restore_rng(state["rng"])
