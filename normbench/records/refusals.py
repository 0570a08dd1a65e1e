"""A sweep's job refused before it could write into its folder, because another run holds the folder
(`normbench.records.rundir.RunDirBusyError`) or the folder cannot be written: the refusal is
kept beside the folder, not in it (the folder is not the job's to write), so that the sweep's
summary lists the job as ``refused`` with its reason rather than as a job killed before it wrote
its summary::

    <sweep dir>/.normbench-refused/<job folder name>.json    {"status": "refused", "error": "<one line>"}

A later run of the job that writes its own ``summary.json`` supersedes the note (`refusal` reads a
note only when it is newer than the folder's summary).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from normbench.base.layout import RunDir
from normbench.base.output import atomic_write_text

REFUSED_DIR = ".normbench-refused"
REFUSED = "refused"


def note_path(job_dir: Path) -> Path:
    """Where the refusal of the job in ``job_dir`` is kept: in its parent (the sweep directory)."""
    job_dir = Path(job_dir)
    return job_dir.parent / REFUSED_DIR / f"{job_dir.name}.json"


def note_refused(job_dir: Path, message: str) -> None:
    """Keep the refusal of the job in ``job_dir`` (best effort: a parent that cannot be written
    leaves the job listed as it was)."""
    path = note_path(job_dir)
    with contextlib.suppress(OSError):
        path.parent.mkdir(exist_ok=True)
        atomic_write_text(path, json.dumps({"status": REFUSED, "error": message}) + "\n")


def refusal(job_dir: Path) -> dict[str, Any] | None:
    """The kept refusal of the job in ``job_dir`` (``status`` and ``error``), when there is one newer
    than the folder's ``summary.json``; else None."""
    path = note_path(job_dir)
    try:
        noted = path.stat().st_mtime
        note = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    summary = RunDir(Path(job_dir)).summary
    with contextlib.suppress(OSError):
        if summary.stat().st_mtime > noted:
            return None
    return note if isinstance(note, dict) and note.get("status") == REFUSED else None
