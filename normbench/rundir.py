"""One writer per run directory, and a clean retreat when a run is refused.

- `RunDirLock`: an exclusive ``fcntl.flock`` on ``<run dir>/.normbench.lock``, which holds the
  holder's PID. A second process that asks for the same directory fails at once with
  `RunDirBusyError` naming that PID. The kernel drops the lock when the holder exits (even on
  ``kill -9``), so a stale file never blocks; the file is removed on release.
- `Snapshot`: which folders and entries existed before the run. On a refused run (a
  `ConfigError` before any result was written), `discard_new` removes only what this run
  created (Hydra's ``.hydra/`` and log file, a run directory it made, the parents it made)
  and leaves everything that was there before, even when that is the current directory.

Both start in `RunDirCallback.on_run_start`, a Hydra callback that runs before Hydra creates the
run directory or writes anything into it; `normbench.cli` registers it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from normbench.errors import ConfigError

LOCK_NAME = ".normbench.lock"
RESULT_NAMES = ("metrics.jsonl", "summary.json", "checkpoints", "wandb")
"""Entries that mean a run got as far as results: a run that wrote one is never cleaned away."""


class RunDirError(ConfigError):
    """The run directory cannot be taken: nothing may be written into it."""


class RunDirBusyError(RunDirError):
    """Another process holds the run directory's lock."""


# ---------------------------------------------------------------------------------------------
# The lock


class RunDirLock:
    """An exclusive, non-blocking ``flock`` on ``<run_dir>/.normbench.lock``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(os.path.abspath(run_dir))
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory if needed) or raise `RunDirBusyError`."""
        if self._fd is not None:
            return
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = self._lock_file()
        except OSError as e:  # read-only, not a folder, no space
            raise RunDirError(f"the run directory {self.run_dir} cannot be written ({type(e).__name__}: {e})") from None
        if fd is None:
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def _lock_file(self) -> int | None:
        """A descriptor of the lock file, locked; None where the file system has no locks."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    from normbench.output import warn

                    self.path.unlink(missing_ok=True)
                    warn(f"the file system of {self.run_dir} has no file locks; two runs there would not be stopped")
                    return None
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise RunDirBusyError(
                    f"the run directory {self.run_dir} is in use by another normbench run ({self._holder()}); "
                    "wait for it to end, or choose another hydra.run.dir"
                ) from None
            # the holder may have removed the file between our open and our lock: lock the new one
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)

    def _holder(self) -> str:
        for _ in range(20):  # the holder writes its PID right after it takes the lock
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text.isdigit():
                return f"pid {text}"
            time.sleep(0.025)
        return "pid unknown"

    def release(self) -> None:
        """Remove the lock file, then drop the lock (in that order: no one locks a removed file)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


# ---------------------------------------------------------------------------------------------
# What existed before the run


@dataclass
class Snapshot:
    """The state of a run directory before Hydra touched it."""

    run_dir: Path
    existed: bool
    created_root: Path | None = None
    """The outermost folder this run creates (``run_dir`` or one of its parents); None if it existed."""
    entries: set[str] = field(default_factory=set)
    """Names directly in ``run_dir`` before the run."""
    hydra_entries: set[str] = field(default_factory=set)
    """Names in ``run_dir/.hydra`` before the run."""

    @classmethod
    def take(cls, run_dir: str | Path) -> Snapshot:
        run_dir = Path(os.path.abspath(run_dir))
        if run_dir.is_dir():
            hydra = run_dir / ".hydra"
            return cls(
                run_dir,
                True,
                entries=set(os.listdir(run_dir)),
                hydra_entries=set(os.listdir(hydra)) if hydra.is_dir() else set(),
            )
        root = run_dir
        while not root.parent.exists() and root.parent != root:
            root = root.parent
        return cls(run_dir, False, created_root=root)

    def new_entries(self) -> list[Path]:
        """What this run added directly in ``run_dir`` (the lock file aside)."""
        if not self.run_dir.is_dir():
            return []
        names = set(os.listdir(self.run_dir)) - self.entries - {LOCK_NAME}
        return [self.run_dir / n for n in sorted(names)]

    def discard_new(self) -> list[Path]:
        """Remove what this run created; returns the removed paths. Nothing is removed when the
        run wrote a result (`RESULT_NAMES`), nor anything that existed before."""
        new = self.new_entries()
        if any(p.name in RESULT_NAMES for p in new):
            return []
        removed: list[Path] = []
        if not self.existed:
            if self.run_dir.is_dir():
                shutil.rmtree(self.run_dir, ignore_errors=True)
                removed.append(self.run_dir)
            folder = self.run_dir.parent  # the parents that Hydra's mkdir(parents=True) made
            while self.created_root is not None and folder.is_relative_to(self.created_root):
                try:
                    folder.rmdir()  # only if empty: another run may have used it meanwhile
                except OSError:
                    break
                removed.append(folder)
                folder = folder.parent
            return removed
        hydra = self.run_dir / ".hydra"
        if ".hydra" in self.entries and hydra.is_dir():
            for name in sorted(set(os.listdir(hydra)) - self.hydra_entries):
                _remove(hydra / name)
                removed.append(hydra / name)
        for path in new:
            _remove(path)
            removed.append(path)
        return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# This process's run directories

_locks: dict[Path, RunDirLock] = {}
_snapshots: dict[Path, Snapshot] = {}


def _key(run_dir: str | Path) -> Path:
    return Path(os.path.abspath(run_dir))


def secondary_rank() -> bool:
    """Whether this process is a non-zero rank of a distributed launch (rank 0 holds the lock)."""
    from normbench.distributed import launch_env

    env = launch_env()
    return env is not None and env[0] != 0


def hold(run_dir: str | Path) -> bool:
    """Lock ``run_dir`` for this process; True if taken now, False if already held here (or if
    this is a secondary rank). Raises `RunDirBusyError` when another process holds it."""
    key = _key(run_dir)
    if key in _locks or secondary_rank():
        return False
    lock = RunDirLock(key)
    lock.acquire()
    _locks[key] = lock
    return True


def release(run_dir: str | Path) -> None:
    lock = _locks.pop(_key(run_dir), None)
    if lock is not None:
        lock.release()
    _snapshots.pop(_key(run_dir), None)


def release_all() -> None:
    for key in list(_locks):
        release(key)
    _snapshots.clear()


def remember(run_dir: str | Path) -> Snapshot:
    """Take (once) and keep the snapshot of ``run_dir`` for `discard_new`."""
    key = _key(run_dir)
    if key not in _snapshots:
        _snapshots[key] = Snapshot.take(key)
    return _snapshots[key]


def discard_new(run_dir: str | Path) -> list[Path]:
    """Undo what this run created in ``run_dir``; nothing when no snapshot was taken before."""
    snap = _snapshots.get(_key(run_dir))
    return snap.discard_new() if snap is not None else []


def fail(message: str) -> None:
    """``normbench: error: <message>`` on stderr, exit code 2."""
    print(f"normbench: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


class RunDirCallback(Callback):
    """Hydra callback: before a single run's directory is made, remember what exists and take
    the lock, so that a refused second writer leaves no trace (not even Hydra's ``.hydra/``)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        run_dir = _key(str(OmegaConf.select(config, "hydra.run.dir")))  # as Hydra's run_job resolves it
        snap = Snapshot.take(run_dir)  # before the lock file (and maybe the folder) is made
        try:
            hold(run_dir)  # fails before anything is made when another run holds it
        except RunDirError as e:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            fail(str(e))
        _snapshots.setdefault(run_dir, snap)

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        release(str(OmegaConf.select(config, "hydra.run.dir")))
