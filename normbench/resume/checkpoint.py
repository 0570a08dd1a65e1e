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

Files (`normbench.resume.files`): ``<run dir>/checkpoints/step-<step>.pt`` with a SHA-256
sidecar, each written atomically. Older checkpoints are removed only after the new one and its
sidecar are complete (the last ``keep`` verified ones are kept). Loading uses
``torch.load(weights_only=True)``: everything that is not a tensor is stored as plain python types.

On resume, a checkpoint counts only if its bytes match its sidecar and it loads: a newer one that
fails (flipped bits, truncated, no sidecar because the process died between the two renames) is
named in a warning, moved to ``checkpoints/rejected/`` (kept for inspection, out of the ``keep``
rotation), and the previous verified one is used. When none verifies, or there is none, resume
stops with an error; it never starts over from step 0. Leftover ``.tmp`` files of a write that
died are removed, and a write that fails (a full disk) removes its own.

A signal (`normbench.run.loop.state.Interrupts`) calls `Checkpointer.request_stop`: a checkpoint is
then due at the next step, and `Checkpointer.save` raises `RunInterrupted` once it is complete, so
that the run stops at a step boundary with a checkpoint of that very step.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normbench.base.errors import ConfigError, RunInterrupted
from normbench.base.output import warn
from normbench.records.segments import RecordsWatch
from normbench.resume.files import (
    CHECKPOINT_DIR,
    atomic_torch_save,
    checksum_path,
    list_checkpoints,
    reject,
    remove_rank_files,
    remove_stale_tmp,
    sha256_file,
    verify,
)

__all__ = [
    "CHECKPOINT_DIR",
    "Checkpointer",
    "CheckpointConfig",
    "atomic_torch_save",
    "capture_rng",
    "checksum_path",
    "config_difference",
    "record_difference",
    "find_latest",
    "list_checkpoints",
    "restore",
    "restore_rng",
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
    restore_cuda_rng(state["cuda"])


def restore_cuda_rng(states: list[torch.Tensor]) -> None:
    """The saved CUDA RNG state of each device that is visible now (by index). A checkpoint
    written with more devices than are visible here (a resume on fewer GPUs, or on the CPU)
    keeps only those, with a warning: the dropped devices' streams are not resumed."""
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if len(states) > visible:
        warn(
            f"the checkpoint holds CUDA RNG states of {len(states)} devices and {visible} "
            f"{'is' if visible == 1 else 'are'} visible here: the states of devices {visible}.."
            f"{len(states) - 1} are dropped, so their random draws do not continue the saved run's"
        )
    for index, cuda_state in enumerate(states[:visible]):
        torch.cuda.set_rng_state(cuda_state, index)


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


class Checkpointer:
    """Writes and finds a run's checkpoints; ``due(step)`` says when one is due mid-epoch."""

    def __init__(self, run_dir: Path, cfg: CheckpointConfig) -> None:
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / CHECKPOINT_DIR
        self.enabled = cfg.enabled
        self.every_n_steps = cfg.every_n_steps
        self.keep = max(cfg.keep, 2)
        self._verified: set[str] = set()
        """Names of checkpoints whose checksum this process wrote or checked."""
        self.stop_signal: int | None = None
        """The signal that asked the run to stop (`request_stop`), or None."""
        self.stopped = False
        """The checkpoint that a stop asked for is written; the run is stopping."""
        self.writing = False
        """A checkpoint file is being written (an exception raised inside torch.save aborts the process)."""
        self.watch = RecordsWatch(self.run_dir)
        """The run directory as the run found it: a checkpoint is never written into a folder made anew."""

    def due(self, step: int) -> bool:
        """A checkpoint is due at ``step``: every ``every_n_steps``, and at once after `request_stop`."""
        if self.stop_signal is not None:
            return self.enabled
        return self.enabled and self.every_n_steps > 0 and step % self.every_n_steps == 0

    def request_stop(self, signum: int) -> None:
        """A signal asked the run to stop: the next checkpoint is due at the next step (`due`), and
        `save` raises `RunInterrupted` once that checkpoint is complete."""
        self.stop_signal = signum

    def resume_state(self, config: Mapping[str, Any], load: Load | None = None) -> dict[str, Any]:
        """The newest verified checkpoint's state, checked against ``config`` (both as ``load``
        reads them, `record_difference`; None: as they are). Newer ones that fail are named in a
        warning and moved aside; a ConfigError when none verifies or there is none."""
        remove_stale_tmp(self.folder)
        state, path, rejected = find_latest(self.run_dir)
        if state is None or path is None:
            if not rejected:
                raise ConfigError(
                    f"resume=true but {self.folder} holds no checkpoint, so there is nothing to resume; "
                    "drop resume=true to start a new run (in a new hydra.run.dir)"
                )
            reasons = "; ".join(f"{p.name}: {r}" for p, r in rejected)
            raise ConfigError(
                f"resume=true but no checkpoint in {self.folder} verifies ({reasons}); not starting over from "
                "step 0: restore a checkpoint and its .sha256 file, or start a new run in a new hydra.run.dir"
            )
        saved = state["config"]
        diff = config_difference(saved, config) if load is None else record_difference(saved, config, load)
        if diff:
            raise ConfigError(
                f"resume=true but checkpoint {path} comes from another configuration ({diff}); "
                "resume with the run's own settings, or start a new run directory"
            )
        for bad, reason in rejected:
            moved = reject(bad)
            warn(f"checkpoint {bad} is unusable ({reason}); moved to {moved.parent}, using the previous one")
        self._verified.add(path.name)
        return state

    def has_checkpoints(self) -> bool:
        return bool(list_checkpoints(self.run_dir))

    def _is_verified(self, path: Path) -> bool:
        if path.name not in self._verified:
            if verify(path) is not None:
                return False
            self._verified.add(path.name)
        return True

    def save(self, state: dict[str, Any]) -> Path | None:
        """Write the checkpoint of ``state["step"]``, then keep the newest ``keep`` verified ones.
        Files that fail verification take no place among them: they are moved to ``rejected/``."""
        if not self.enabled:
            return None
        self.watch.check()
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(self.folder)
        path = self.folder / f"step-{int(state['step']):08d}.pt"
        self._verified.discard(path.name)
        self.writing = True  # a signal now waits for the file to be complete (`Interrupts`)
        try:
            atomic_torch_save(state, path)
        finally:
            self.writing = False
        self._verified.add(path.name)
        kept = 0
        for old_step, old in list_checkpoints(self.run_dir):
            if not self._is_verified(old):
                warn(f"checkpoint {old} fails its checksum; moved to {reject(old).parent}")
            elif kept < self.keep:
                kept += 1
            else:
                old.unlink(missing_ok=True)
                checksum_path(old).unlink(missing_ok=True)
                remove_rank_files(self.folder, old_step)  # the other ranks' RNG states of that step
                self._verified.discard(old.name)
        if self.stop_signal is not None:
            self.stopped = True
            raise RunInterrupted(self.stop_signal, int(state["step"]), str(path))
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
    wall_time_s: float = 0.0,
    metrics_sha256: str | None = None,
    train_time_s: float = 0.0,
    segments: Iterable[Mapping[str, Any]] = (),
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
        "metrics_sha256": metrics_sha256,
        "wall_time_s": float(wall_time_s),
        "train_time_s": float(train_time_s),
        "segments": [dict(seg) for seg in segments],
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
