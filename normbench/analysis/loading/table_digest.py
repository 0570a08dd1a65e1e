"""The digest of a results folder's ``per_run.csv`` in its ``RUN.txt`` (issue 59, items I41 and I32).

``normbench-figures --runs`` writes ``per_run.csv`` from the runs themselves and stamps its SHA-256
into the folder's ``RUN.txt`` (``scripts/reproduce_cpu.sh`` writes the same line when it writes
``RUN.txt`` after the figures); ``normbench-reports index --check`` compares. A value edited in the
table afterwards, within its range and with the claims regenerated from the edited table
(``normbench-figures --per-run``, which reads the table and never stamps it), no longer passes: the
runs are not committed, so nothing else in the folder could re-measure it. A ``RUN.txt`` without the
line (written before it existed) is not checked.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

DIGEST_KEY = "per_run.csv sha256"
DIGEST_RE = re.compile(rf"^{re.escape(DIGEST_KEY)}: ([0-9a-f]+)", re.M)
DIGEST_NOTE = "written by normbench-figures from the runs; normbench-reports index --check compares"


def table_digest(path: Path) -> str:
    """The SHA-256 of the file's bytes, its first 16 hex digits (as the rules hashes)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def digest_line(folder: Path) -> str:
    """``RUN.txt``'s line for ``folder/per_run.csv`` (empty when the folder has no table)."""
    table = folder / "per_run.csv"
    return f"{DIGEST_KEY}: {table_digest(table)} ({DIGEST_NOTE})" if table.is_file() else ""


def stamp_digest(folder: Path) -> Path | None:
    """Write ``folder/per_run.csv``'s digest into ``folder/RUN.txt``, replacing the line there or
    appending it; None (nothing written) when either file is missing."""
    run_txt, line = folder / "RUN.txt", digest_line(folder)
    if not (run_txt.is_file() and line):
        return None
    text = run_txt.read_text()
    kept = [t for t in text.splitlines() if not DIGEST_RE.match(t)]
    run_txt.write_text("\n".join([*kept, line]) + "\n")
    return run_txt


def digest_problem(folder: Path) -> str | None:
    """One line when ``RUN.txt`` names a digest that ``per_run.csv`` no longer has (None: it has, or
    ``RUN.txt`` names none)."""
    run_txt, table = folder / "RUN.txt", folder / "per_run.csv"
    found = DIGEST_RE.search(run_txt.read_text()) if run_txt.is_file() else None
    if found is None:
        return None
    if not table.is_file():
        return f"RUN.txt names {DIGEST_KEY} {found[1]}, but the folder has no per_run.csv"
    if (now := table_digest(table)) != found[1]:
        return (f"per_run.csv has sha256 {now}, RUN.txt names {found[1]} (the table written from the runs): it was "
                "edited after; regenerate it from the runs (normbench-figures <preset> --runs <run folder> --out "
                "<this folder>)")  # fmt: skip
    return None
