"""Checkpoint files on disk: written atomically with a SHA-256 sidecar, verified, set aside.

``<run dir>/checkpoints/step-<step>.pt``. Each is written to a temporary file, flushed and
fsynced, then renamed into place; then its SHA-256 goes, the same way, into the sidecar
``step-<step>.pt.sha256`` (``sha256sum`` format). A write that fails (a full or read-only disk)
leaves neither its temporary file nor a checkpoint without a sidecar, and raises the ``OSError``
naming the file (torch would report it as "unexpected pos"). A checkpoint counts only if its bytes
match its sidecar (`verify`); one that does not is moved to ``checkpoints/rejected/`` (`reject`).
What the files hold and how a run resumes from them: `normbench.resume.checkpoint`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from normbench.base.layout import RunDir
from normbench.base.output import atomic_write_text

CHECKPOINT_DIR = RunDir.CHECKPOINTS
REJECTED_DIR = "rejected"
CHECKSUM_SUFFIX = ".sha256"
_NAME = re.compile(r"^step-(\d+)\.pt$")
_TMP = re.compile(r"^\..*\.tmp$")


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


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


class _WriteRecorder:
    """A file for ``torch.save`` that keeps the ``OSError`` of a failed write: torch turns it into a
    RuntimeError ("unexpected pos ...") that does not say the disk is full."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        try:
            self.f.flush()
        except OSError as e:
            self.error = e
            raise


def atomic_torch_save(obj: Any, path: Path) -> str:
    """``torch.save`` to a temporary file, flush + fsync, then ``os.replace`` onto ``path``;
    then the file's SHA-256 into its sidecar (`checksum_path`), also atomically. Returns the digest.

    A write that fails (a full or read-only disk) leaves neither temporary file nor a checkpoint
    without its sidecar, and raises the ``OSError`` naming the file."""
    tmp = path.with_name(f".{path.name}.tmp")
    side = checksum_path(path)
    try:
        with open(tmp, "wb") as f:
            out = _WriteRecorder(f)
            try:
                torch.save(obj, out)
            except RuntimeError as e:
                if out.error is None:
                    raise
                raise out.error from e
            f.flush()
            os.fsync(f.fileno())
        digest = sha256_file(tmp)
        os.replace(tmp, path)
        atomic_write_text(side, f"{digest}  {path.name}\n")
    except BaseException as e:
        for leftover in (tmp, side.with_name(f".{side.name}.tmp")):
            leftover.unlink(missing_ok=True)
        if not side.is_file():  # unverifiable: it would be rejected on resume; give its space back
            path.unlink(missing_ok=True)
        if isinstance(e, OSError) and not e.filename:
            e.filename = str(tmp)
        raise
    _fsync_dir(path.parent)
    return digest


def has_verified_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint whose bytes match its sidecar, without loading it
    (the requeueing launcher, ``hydra_plugins/normbench_launcher``, resumes only then)."""
    return any(verify(path) is None for _, path in list_checkpoints(run_dir))


def verify(path: Path) -> str | None:
    """Why ``path`` fails its checksum (no sidecar, unreadable sidecar, a different SHA-256), or None."""
    side = checksum_path(path)
    try:
        recorded = side.read_text().split()[0].lower()
    except FileNotFoundError:
        return f"it has no checksum file {side.name}"
    except (OSError, UnicodeDecodeError, IndexError) as e:
        return f"its checksum file {side.name} is unreadable ({type(e).__name__})"
    actual = sha256_file(path)
    if actual != recorded:
        return f"its SHA-256 {actual[:16]}... differs from {recorded[:16]}... recorded in {side.name}"
    return None


def rank_rng_path(folder: Path, step: int, rank: int) -> Path:
    """``<folder>/step-<N>.rank-<r>.rng.pt``: the RNG states of rank ``r`` > 0 at rank 0's
    checkpoint ``step-<N>.pt`` (`normbench.resume.seeds`); not a checkpoint (`list_checkpoints`)."""
    return folder / f"step-{int(step):08d}.rank-{int(rank)}.rng.pt"


def remove_rank_files(folder: Path, step: int) -> None:
    """The ranks' RNG files of checkpoint ``step`` (and their sidecars), when it is removed."""
    for path in folder.glob(f"step-{int(step):08d}.rank-*.rng.pt*"):
        path.unlink(missing_ok=True)


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the checkpoints in ``run_dir``, newest first."""
    folder = RunDir(run_dir).checkpoints
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found, reverse=True)


def remove_stale_tmp(folder: Path) -> list[Path]:
    """Remove the ``.<name>.tmp`` files that a write which died left in ``folder`` (not the other
    ranks' RNG files: a rank may be writing one now; each rank clears its own, `normbench.resume.seeds`)."""
    stale = [p for p in folder.iterdir() if _TMP.match(p.name) and ".rank-" not in p.name] if folder.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def reject(path: Path) -> Path:
    """Move a checkpoint that failed verification (and its sidecar) to ``checkpoints/rejected/``."""
    folder = path.parent / REJECTED_DIR
    folder.mkdir(exist_ok=True)
    for p in (path, checksum_path(path)):
        if p.exists():
            shutil.move(p, folder / p.name)
    return folder / path.name
