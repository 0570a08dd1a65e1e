"""One writer per run directory, and a clean retreat when a run is refused.

- `RunDirLock`: an exclusive ``fcntl.flock`` on ``<run dir>/.normbench.lock``, which holds the
  holder's PID. A second process that asks for the same directory fails at once with
  `RunDirBusyError` naming that PID. The kernel drops the lock when the holder exits (even on
  ``kill -9``), so a stale file never blocks; the file is removed on release.
- `Snapshot`: which folders and entries existed before the run. On a refused run (a
  `ConfigError` before any result was written), `discard_new` removes only what this run
  created (Hydra's ``.hydra/`` and log file, a run directory it made, the parents it made)
  and leaves everything that was there before, even when that is the current directory.

Both start in `take_run_dir`, called by a Hydra callback (`normbench.cli.callbacks.RunDirCallback`)
that runs before Hydra creates the run directory or writes anything into it (declared in
``conf/config.yaml``'s ``hydra.callbacks``); it also refuses ``resume=true`` when the run directory
does not exist. What else a directory holds (Hydra's files of the accepted run, records set aside,
temporary files): `normbench.records.segments`.
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

from normbench.base.layout import RunDir
from normbench.base.output import atomic_write_bytes, error_line
from normbench.placement import distributed
from normbench.records.folders import RunDirError, check_output_folder

LOCK_NAME = RunDir.LOCK
RESULT_NAMES = RunDir.RESULTS
"""Entries that mean a run got as far as results: a run that wrote one is never cleaned away."""


class RunDirBusyError(RunDirError):
    """Another process holds the run directory's lock."""


# ---------------------------------------------------------------------------------------------
# The lock


class RunDirLock:
    """An exclusive, non-blocking ``flock`` on the run directory itself and on ``<run_dir>/<name>``
    (``.normbench.lock``, which holds the PID for the message). The directory's lock is the one that
    counts: deleting the lock file under a running run (``rm .normbench.lock``) lets no second
    writer in, since the second one's lock on the directory still fails."""

    name = LOCK_NAME

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(os.path.abspath(run_dir))
        self.path = self.run_dir / self.name
        self._fd: int | None = None
        self._dir_fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory if needed) or raise `RunDirBusyError`."""
        if self._fd is not None:
            return
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._dir_fd = self._lock_dir()
            fd = self._lock_file()
        except OSError as e:  # read-only, not a folder, no space, a name too long
            self.release()
            if e.errno == errno.ENAMETOOLONG:
                raise RunDirError(name_too_long(self.run_dir)) from None
            raise RunDirError(f"the run directory {self.run_dir} cannot be written ({type(e).__name__}: {e})") from None
        except RunDirError:
            self.release()
            raise
        if fd is None:
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def _lock_dir(self) -> int | None:
        """A descriptor of the run directory, locked; None where the file system has no locks
        (`_lock_file` then says so)."""
        fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                return None
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise RunDirBusyError(self.busy_message(self._holder())) from None
        return fd

    def _lock_file(self) -> int | None:
        """A descriptor of the lock file, locked; None where the file system has no locks."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    from normbench.base.output import warn

                    self.path.unlink(missing_ok=True)
                    warn(f"the file system of {self.run_dir} has no file locks; two runs there would not be stopped")
                    return None
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise RunDirBusyError(self.busy_message(self._holder())) from None
            # the holder may have removed the file between our open and our lock: lock the new one
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)

    def busy_message(self, holder: str) -> str:
        return (
            f"the run directory {self.run_dir} is in use by another normbench run ({holder}); "
            "wait for it to end, or choose another hydra.run.dir"
        )

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
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def take_snapshot(run_dir: Path) -> Snapshot:
    """`Snapshot.take`, with a path the file system refuses (a name too long, a folder that cannot
    be listed) as a `RunDirError`."""
    try:
        return Snapshot.take(run_dir)
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise RunDirError(name_too_long(run_dir)) from None
        raise RunDirError(f"the run directory {run_dir} cannot be read ({type(e).__name__}: {e})") from None


def name_too_long(run_dir: Path) -> str:
    """Why ``run_dir`` cannot be made (``ENAMETOOLONG``): the folder name, or the whole path, that is
    longer than the file system allows, said once (the path itself may be thousands of characters)."""
    folder = run_dir.parent
    while not os.path.isdir(folder) and folder.parent != folder:  # isdir: False also for a name too long
        folder = folder.parent  # the longest part that exists: its limits are the file system's
    name_max, path_max = (
        _pathconf(folder, key, default) for key, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096))
    )
    long = next((part for part in run_dir.parts if len(os.fsencode(part)) > name_max), None)
    what = (
        f"the folder name {long[:24]}... is {len(os.fsencode(long))} bytes long and the file system allows {name_max}"
        if long is not None
        else f"the path is {len(os.fsencode(str(run_dir)))} bytes long and the file system allows {path_max}"
    )
    setting = f"hydra.run.dir={_shorten(str(run_dir))}"
    return f"{setting} cannot be made: {what} (errno {errno.ENAMETOOLONG}); choose a shorter hydra.run.dir"


def _pathconf(folder: Path, key: str, default: int) -> int:
    try:
        return os.pathconf(folder, key)
    except (OSError, ValueError):
        return default


def _shorten(text: str, keep: int = 60) -> str:
    return text if len(text) <= 2 * keep else f"{text[:keep]}...{text[-keep:]}"


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
    hydra_files: dict[str, bytes] = field(default_factory=dict)
    """The bytes of the files in ``run_dir/.hydra`` before the run: Hydra rewrites ``config.yaml``,
    ``hydra.yaml`` and ``overrides.yaml`` on every start, also of a resume that is then refused."""
    log_sizes: dict[str, int] = field(default_factory=dict)
    """Sizes of the ``*.log`` files directly in ``run_dir`` (Hydra appends to its job log)."""

    @classmethod
    def take(cls, run_dir: str | Path) -> Snapshot:
        run_dir = Path(os.path.abspath(run_dir))
        if run_dir.is_dir():
            hydra = RunDir(run_dir).hydra
            entries = set(os.listdir(run_dir))
            return cls(
                run_dir,
                True,
                entries=entries,
                hydra_entries=set(os.listdir(hydra)) if hydra.is_dir() else set(),
                hydra_files=_small_files(hydra),
                log_sizes={n: (run_dir / n).stat().st_size for n in entries if n.endswith(".log")},
            )
        root = run_dir
        while not root.parent.exists() and root.parent != root:
            root = root.parent
        return cls(run_dir, False, created_root=root)

    def new_entries(self) -> list[Path]:
        """What this run added directly in ``run_dir`` (the lock file aside)."""
        if not os.path.isdir(self.run_dir):  # False, not an error, also for a name too long
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
            if os.path.isdir(self.run_dir):
                shutil.rmtree(self.run_dir, ignore_errors=True)
                removed.append(self.run_dir)
            folder = self.run_dir.parent  # the parents that Hydra's mkdir(parents=True) made
            while self.created_root is not None and folder.is_relative_to(self.created_root):
                try:
                    folder.rmdir()  # only if empty: another run may have used it meanwhile
                    removed.append(folder)
                except OSError as e:
                    if e.errno not in (errno.ENOENT, errno.ENAMETOOLONG):  # those were never made
                        break
                folder = folder.parent
            return removed
        hydra = RunDir(self.run_dir).hydra
        if hydra.name in self.entries and hydra.is_dir():
            for name in sorted(set(os.listdir(hydra)) - self.hydra_entries):
                _remove(hydra / name)
                removed.append(hydra / name)
            for name, data in self.hydra_files.items():  # what Hydra rewrote: back as it was
                path = hydra / name
                with contextlib.suppress(OSError):
                    if not path.is_file() or path.read_bytes() != data:
                        atomic_write_bytes(path, data)
        for name, size in self.log_sizes.items():  # lines Hydra appended to a log that was there
            with contextlib.suppress(OSError):
                if (self.run_dir / name).stat().st_size > size:
                    os.truncate(self.run_dir / name, size)
        for path in new:
            _remove(path)
            removed.append(path)
        return removed


def _small_files(folder: Path, limit: int = 1 << 20) -> dict[str, bytes]:
    """Name -> bytes of the regular files in ``folder`` up to ``limit`` bytes each."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.stat().st_size <= limit}


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
    env = distributed.launch_env()
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


def discard_new(run_dir: str | Path) -> list[Path]:
    """Undo what this run created in ``run_dir``; nothing when no snapshot was taken before."""
    snap = _snapshots.get(_key(run_dir))
    return snap.discard_new() if snap is not None else []


distributed.on_own_run_dir(discard_new)  # a non-zero rank's own Hydra folder: only what it created goes


def fail(message: str) -> None:
    """``normbench: error: <message>`` on stderr, exit code 2."""
    error_line(message)
    sys.exit(2)


def resume_without_run_dir(run_dir: Path, hydra_overrides: list[str]) -> str:
    """Why ``resume=true`` cannot go on: the run directory it would continue does not exist."""
    if not any(o.lstrip("+").startswith("hydra.run.dir=") for o in hydra_overrides):
        return (
            "resume=true continues the run in hydra.run.dir, but none was given (the default is a new folder, "
            f"{run_dir}); pass hydra.run.dir=<the folder of the run to continue>"
        )
    return f"resume=true but hydra.run.dir={run_dir} does not exist; pass the folder of the run to continue"


def take_run_dir(run_dir: str | Path, resume: bool, hydra_overrides: list[str]) -> None:
    """Before a single run's directory is made (`normbench.cli.callbacks.RunDirCallback`, with the
    values Hydra resolved): remember what exists and take the lock, so that a refused second writer
    leaves no trace (not even Hydra's ``.hydra/``); refuse ``resume=true`` without the directory."""
    snap: Snapshot | None = None
    try:
        check_output_folder(run_dir, "hydra.run.dir")
        key = _key(run_dir)
        snap = take_snapshot(key)  # before the lock file (and maybe the folder) is made
        if resume and not snap.existed:
            raise RunDirError(resume_without_run_dir(key, hydra_overrides))
        hold(key)  # fails before anything is made when another run holds it
    except RunDirError as e:
        if snap is not None:  # the parents that a failed mkdir made (a name too long fails after them)
            snap.discard_new()
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        fail(str(e))
    if snap is not None:
        _snapshots.setdefault(key, snap)
