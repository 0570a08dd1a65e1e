"""What a run directory holds besides the run's own files, and how it is kept whole.

- `keep_trained_records` / `restore_trained_records`: Hydra rewrites ``.hydra/config.yaml``,
  ``hydra.yaml`` and ``overrides.yaml`` at every start, also of a job that is then refused (a
  resume with another norm); a copy taken when the run was accepted (``.hydra/trained/``) is put
  back, so the sweep summary reads what the run trained with. (A single run needs no copy:
  `normbench.records.rundir.Snapshot` restores the bytes it saw before Hydra started.)
- `set_aside`: the records of a run that left no checkpoint (killed or interrupted before its
  first, or failed) go to ``restarts/<n>/`` before a new run starts over in the directory.
- `remove_tmp_files`: the temporary files of writes that failed (a full disk).
- `RecordsWatch`: the run directory and ``metrics.jsonl`` are still the ones the run made,
  checked before every write (`normbench.sinks.files.LocalSink`, `normbench.resume.checkpointer.Checkpointer`):
  a run whose records were removed or replaced under it stops, failed (`RecordsVanished`),
  rather than recreate a folder with a lone summary or write into another one.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from normbench.base.errors import RecordsVanished
from normbench.base.hydra_job import hydra_output_subdir
from normbench.base.layout import RunDir
from normbench.base.output import atomic_write_bytes

TRAINED_DIR = RunDir.TRAINED
"""``.hydra/trained/``: Hydra's three files as they were when the directory's run was last
accepted (a fresh start or a verified resume); a refused job of a sweep puts them back."""
HYDRA_RECORDS = RunDir.HYDRA_FILES
RECORD_NAMES = RunDir.RECORDS
"""What a run writes at its top level (`normbench.sinks.files.LocalSink`)."""
RESTARTS_DIR = RunDir.RESTARTS
_TMP = re.compile(r"^\..+\.tmp$")


def hydra_dir(run_dir: Path) -> Path | None:
    """``<run_dir>/<hydra.output_subdir>`` (``.hydra``) of the running Hydra job; None outside
    Hydra or when Hydra writes no such folder."""
    subdir = hydra_output_subdir()
    return None if subdir is None else run_dir / subdir


def keep_trained_records(run_dir: Path) -> None:
    """Copy Hydra's files of an accepted run into ``.hydra/trained/``."""
    folder = hydra_dir(run_dir)
    if folder is None or not folder.is_dir():
        return
    (folder / TRAINED_DIR).mkdir(exist_ok=True)
    for name in HYDRA_RECORDS:
        if (folder / name).is_file():
            atomic_write_bytes(folder / TRAINED_DIR / name, (folder / name).read_bytes())


def restore_trained_records(run_dir: Path) -> list[Path]:
    """Put the accepted run's Hydra files back over those a refused job's Hydra wrote."""
    folder, restored = hydra_dir(run_dir), []
    for name in HYDRA_RECORDS if folder is not None else ():
        kept, path = folder / TRAINED_DIR / name, folder / name
        if kept.is_file() and (not path.is_file() or path.read_bytes() != kept.read_bytes()):
            atomic_write_bytes(path, kept.read_bytes())
            restored.append(path)
    return restored


def set_aside(run_dir: Path) -> Path | None:
    """Move the records of a run that left no checkpoint (killed or interrupted before its first)
    into ``restarts/<n>/``, so that a run starting over in ``run_dir`` neither appends to them
    nor loses them. Returns the folder, or None when there was nothing to move."""
    present = [run_dir / n for n in RECORD_NAMES if (run_dir / n).exists()]
    if not present:
        return None
    n = 1
    while (run_dir / RESTARTS_DIR / str(n)).exists():
        n += 1
    folder = run_dir / RESTARTS_DIR / str(n)
    folder.mkdir(parents=True)
    for path in present:
        os.replace(path, folder / path.name)
    return folder


def remove_tmp_files(run_dir: Path) -> list[Path]:
    """Remove the ``.<name>.tmp`` files of writes that failed (a full disk) in ``run_dir`` and its
    ``checkpoints/``; only this run writes there (it holds the lock)."""
    removed = []
    for folder in (run_dir, RunDir(run_dir).checkpoints):
        for path in folder.iterdir() if folder.is_dir() else []:
            if _TMP.match(path.name) and ".rank-" not in path.name and path.is_file():  # not a rank's write
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


class RecordsWatch:
    """The identity (device, inode) of a run's directory and of the files it appends to, as the
    run found them; `check` raises `RecordsVanished` naming the first one removed or replaced
    (``rm -r``, ``mv`` and a new folder, a file moved aside). Two ``stat`` calls per check."""

    def __init__(self, run_dir: Path) -> None:
        self.identities: dict[Path, tuple[int, int] | None] = {}
        self.add(run_dir)

    def add(self, path: Path) -> None:
        self.identities[path] = _identity(path)

    def check(self, *paths: Path) -> None:
        """Those of ``paths`` (default: every watched one) are still the ones first seen."""
        for path in paths or tuple(self.identities):
            now, first = _identity(path), self.identities[path]
            if first is None:  # not there when the run began: the run makes it
                self.identities[path] = now
            elif now != first:
                raise RecordsVanished(path)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino
