"""The run's random streams: one seed for everything that must agree across processes, one
stream per rank for what must not.

- `seed_everything`: python, numpy and torch seeded with the run's ``seed``: the model's initial
  weights, and every rank's until its own stream starts (DDP also broadcasts rank 0's weights).
  The data order and augmentation draw from the runner's own generator, shared by every rank, and
  the diagnostics from generators seeded with ``seed + step``: the same on every rank.
- `seed_rank_streams`: once the model is built, ranks other than 0 re-seed the global streams
  with `rank_seed` (``seed`` and the rank through numpy's ``SeedSequence``, as nanoGPT offsets its
  seed by the rank), so dropout and ``bn_noisy``'s per-activation noise differ between the
  ranks' slices of the batch instead of repeating. Rank 0 keeps ``seed``'s stream: a one-process
  run draws what it always drew.
- `capture_rng` / `restore_rng`: the global RNG states (python, numpy, torch CPU and CUDA) as plain
  types and tensors, for a ``weights_only`` checkpoint.
- `save_rank_rng` / `restore_rank_rng`: rank 0's checkpoint holds its RNG states; every other rank
  writes its own beside it (``checkpoints/step-<N>.rank-<r>.rng.pt`` with its SHA-256 sidecar, no
  collective: a rank stopped by a signal may not reach the same step), and a resume restores each
  rank's own, so a resumed DDP run continues bit for bit. A rank whose file is missing or fails
  its checksum continues from `rank_seed` of the step, with a warning.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normbench.base.output import warn
from normbench.resume.files import atomic_torch_save, rank_rng_path, verify


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
    """Set the global RNG states to ``state`` (`capture_rng`'s)."""
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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """A 63-bit seed for ``rank``'s own stream (and, with ``step``, for one that restarts there):
    distinct for every (seed, rank, step), unlike ``seed + rank`` (seed 1 rank 0 = seed 0 rank 1)."""
    words = [seed % 2**64, rank, step]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def seed_rank_streams(seed: int, rank: int) -> None:
    """Ranks other than 0 start their own global streams (`rank_seed`); rank 0 keeps ``seed``'s."""
    if rank > 0:
        seed_everything(rank_seed(seed, rank))


def save_rank_rng(folder: Path, step: int, rank: int) -> Path:
    """This rank's global RNG states at ``step``, beside rank 0's checkpoint of that step."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f".step-*.rank-{int(rank)}.rng.pt*.tmp"):  # this rank's writes that died
        stale.unlink(missing_ok=True)
    path = rank_rng_path(folder, step, rank)
    atomic_torch_save(capture_rng(), path)
    return path


def restore_rank_rng(folder: Path, step: int, seed: int, rank: int) -> bool:
    """Restore this rank's RNG states saved at ``step``; True if it did. Without a verified file,
    a warning and the stream of `rank_seed` ``(seed, rank, step)``: the run goes on, not bit for bit."""
    path = rank_rng_path(folder, step, rank)
    problem = "it is missing" if not path.exists() else verify(path)
    if problem is None:
        try:
            restore_rng(torch.load(path, map_location="cpu", weights_only=True))
            return True
        except Exception as e:  # a file that verifies but does not load: written by another version
            problem = f"it does not load ({type(e).__name__})"
    seed_everything(rank_seed(seed, rank, step))
    warn(f"rank {rank}'s random state at step {step} ({path}) cannot be used ({problem}); it continues from a "
         "fresh stream of its own: dropout and noise differ from an uninterrupted run")  # fmt: skip
    return False
