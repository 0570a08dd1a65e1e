"""The run's checkpoints as one object, made once per run (Lightning's ``CheckpointConnector``).

`Checkpointer` owns everything a run does to be able to stop and continue: the resume policy
(`start`), the random streams (`seed_everything`, `seed_rank_streams`, each rank's own), saving
(`save`: the run's objects in, the checkpoint's file written and rotated, or a non-zero rank's
random state beside it) and restoring (`restore`). The pure pieces it calls stay in their
modules: what a checkpoint holds (`normbench.resume.checkpoint`), the verified files
(`normbench.resume.files`), the seeds (`normbench.resume.seeds`).

Rotation: older checkpoints are removed only after the new one and its sidecar are complete (the
last ``keep`` verified ones are kept). On resume, a checkpoint counts only if its bytes match its
sidecar and it loads: a newer one that fails (flipped bits, truncated, no sidecar because the
process died between the two renames) is named in a warning, moved to ``checkpoints/rejected/``
(kept for inspection, out of the ``keep`` rotation), and the previous verified one is used. When
none verifies, or there is none, resume stops with an error; it never starts over from step 0.
Leftover ``.tmp`` files of a write that died are removed, and a write that fails (a full disk)
removes its own.

A signal (`normbench.run.loop.interrupts.Interrupts`) calls `Checkpointer.request_stop`: a
checkpoint is then due at the next step, and `Checkpointer.write` raises `RunInterrupted` once it
is complete, so that the run stops at a step boundary with a checkpoint of that very step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from normbench.base.errors import ConfigError, RunInterrupted
from normbench.base.layout import RunDir
from normbench.base.output import info, warn
from normbench.records import rundir
from normbench.records import segments as run_records
from normbench.records.segments import RecordsWatch
from normbench.resume import seeds
from normbench.resume.checkpoint import (
    Carried,
    CheckpointConfig,
    Load,
    Position,
    Trained,
    config_difference,
    find_latest,
    record_difference,
    restore,
    training_state,
)
from normbench.resume.files import (
    CHECKPOINT_DIR,
    atomic_torch_save,
    checksum_path,
    list_checkpoints,
    reject,
    remove_rank_files,
    remove_stale_tmp,
    verify,
)

RESULT_STATUSES = ("finished", "diverged")
"""A run that ended with one of these is a result: nothing starts over it."""


class Saved(Protocol):
    """What `Checkpointer.save` asks of the run (the runner's ``Run``): its objects and its records."""

    def trained(self) -> Trained: ...

    def carried(self) -> Carried: ...


def summary_status(path: Path) -> str | None:
    """``status`` in a run's ``summary.json``; None when there is none; ``unreadable`` when it
    does not parse (a result that cannot be read is still not overwritten)."""
    try:
        return str(json.loads(path.read_text()).get("status"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return "unreadable"


class Checkpointer:
    """A run's checkpoints: the resume policy, the random streams, save and restore (``rank``: this
    process's; rank 0 writes the checkpoint, every other rank its random state beside it).
    ``record`` is the run's config as recorded: what a checkpoint holds and a resume is checked against."""

    def __init__(
        self,
        run_dir: Path,
        cfg: CheckpointConfig,
        record: Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
        rank: int = 0,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / CHECKPOINT_DIR
        self.enabled = cfg.enabled
        self.every_n_steps = cfg.every_n_steps
        self.keep = max(cfg.keep, 2)
        self.record: dict[str, Any] = dict(record or {})
        self.seed = seed
        self.rank = rank
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

    # -----------------------------------------------------------------------------------------
    # the resume policy

    def start(self, resume: bool, load: Load | None = None) -> dict[str, Any] | None:
        """The checkpoint to continue from (``resume``: a verified one whose config is the run's
        record, both as ``load`` reads them, else `ConfigError`); None for a new run.

        A new run is refused where a run left a checkpoint or a result. Where one left neither
        (killed or interrupted before its first checkpoint, or failed), the new run starts over;
        the old records are moved to ``restarts/<n>/`` first (`run_records.set_aside`), so nothing
        is lost."""
        run_dir = self.run_dir
        if not rundir.secondary_rank():  # where the run writes, before anything takes time
            info(f"[normbench] run directory: {run_dir}")
        if resume:
            return self.resume_state(self.record, load=load)  # compared as typed records
        status = summary_status(RunDir(run_dir).summary)
        if self.has_checkpoints() or status in (*RESULT_STATUSES, "unreadable"):
            raise ConfigError(
                f"the run directory {run_dir} already holds a run; pass resume=true to continue it, "
                "or choose another hydra.run.dir"
            )
        if not rundir.secondary_rank():  # rank 0 moves them
            moved = run_records.set_aside(run_dir)
            if moved is not None:
                warn(
                    f"{run_dir} holds a run that left no checkpoint (status {status or 'unknown: it was killed'}); "
                    f"starting over, its records moved to {moved}"
                )
        return None

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

    # -----------------------------------------------------------------------------------------
    # the random streams

    def seed_everything(self) -> None:
        """python, numpy and torch seeded with the run's seed (`seeds.seed_everything`)."""
        seeds.seed_everything(self.seed)

    def seed_rank_streams(self) -> None:
        """Ranks other than 0 start their own global streams (`seeds.seed_rank_streams`)."""
        seeds.seed_rank_streams(self.seed, self.rank)

    # -----------------------------------------------------------------------------------------
    # save and restore

    def due(self, step: int) -> bool:
        """A checkpoint is due at ``step``: every ``every_n_steps``, and at once after `request_stop`."""
        if self.stop_signal is not None:
            return self.enabled
        return self.enabled and self.every_n_steps > 0 and step % self.every_n_steps == 0

    def request_stop(self, signum: int) -> None:
        """A signal asked the run to stop: the next checkpoint is due at the next step (`due`), and
        `write` raises `RunInterrupted` once that checkpoint is complete."""
        self.stop_signal = signum

    def save(self, run: Saved, at: Position) -> Path | None:
        """The checkpoint of ``run`` at ``at`` (rank 0; its path) or, on every other rank, this
        rank's random state beside it (`seeds.save_rank_rng`; None); nothing when checkpoints are off."""
        if not self.enabled:
            return None
        if self.rank > 0:
            seeds.save_rank_rng(self.folder, at.step, self.rank)
            return None
        carried = run.carried()  # the clocks and the sinks' positions first, as they stand at this step
        return self.write(training_state(self.record, run.trained(), at, carried))

    def restore(self, state: Mapping[str, Any], trained: Trained) -> None:
        """Load ``state`` (`start`'s) into ``trained`` and the global random streams; every other
        rank then its own streams of that step (`seeds.restore_rank_rng`)."""
        restore(state, trained)
        if self.rank > 0:
            seeds.restore_rank_rng(self.folder, int(state["step"]), self.seed, self.rank)

    def _is_verified(self, path: Path) -> bool:
        if path.name not in self._verified:
            if verify(path) is not None:
                return False
            self._verified.add(path.name)
        return True

    def write(self, state: dict[str, Any]) -> Path | None:
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
