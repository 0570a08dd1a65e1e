"""The digests of a results folder's ``per_run.csv`` and ``plan.txt`` in its ``RUN.txt`` (issue 59,
items I41, I32 and I36).

``normbench-figures --runs`` writes ``per_run.csv`` from the runs themselves and stamps its SHA-256
into the folder's ``RUN.txt`` (``scripts/reproduce_cpu.sh`` writes the same line when it writes
``RUN.txt`` after the figures); ``normbench-reports index --check`` compares. A value edited in the
table afterwards, within its range and with the claims regenerated from the edited table
(``normbench-figures --per-run``, which reads the table and never stamps it), no longer passes: the
runs are not committed, so nothing else in the folder could re-measure it.

``plan.txt`` (``normbench-plan``'s printed output, the sizes the rules took before the run) is stamped
beside it, as it stood when the verdicts were written. Re-running its command is no check (the plan's
code moves on), so the digest is: an edit after the verdicts is named. It is compared only while the
rules are those ``RUN.txt`` names: a new attempt planned since (new rules, a new ``plan.txt``) is the
next run's to stamp. `normbench.analysis.judging.plan_record` checks the plan's keys against the rules.

A ``RUN.txt`` without a line (written before it existed) is not checked for that file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from normbench.rules import rules_hash


@dataclass(frozen=True)
class Digested:
    """A file of the folder whose digest ``RUN.txt`` keeps."""

    name: str
    note: str
    remedy: str
    while_rules_unchanged: bool = False
    """Compared only while the preset's rules are those ``RUN.txt`` names (a plan: a new attempt's
    plan is the next run's to stamp)."""

    @property
    def key(self) -> str:
        return f"{self.name} sha256"

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(rf"^{re.escape(self.key)}: ([0-9a-f]+)", re.M)


TABLE = Digested("per_run.csv", "written by normbench-figures from the runs; normbench-reports index --check compares",
                 "regenerate it from the runs (normbench-figures <preset> --runs <run folder> --out <this folder>)")
PLAN = Digested("plan.txt", "the plan the sweep was sized by, as it stood when the verdicts were written; "
                "normbench-reports index --check compares",
                "restore it (git checkout <RUN.txt's commit> -- <this folder>/plan.txt); a new plan belongs to a new "
                "attempt, with new rules", while_rules_unchanged=True)  # fmt: skip
DIGESTED = (TABLE, PLAN)
DIGEST_KEY = TABLE.key
RULES_HASH_RE = re.compile(r"^rules hash: (\S+)", re.M)


def table_digest(path: Path) -> str:
    """The SHA-256 of the file's bytes, its first 16 hex digits (as the rules hashes)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def digest_line(folder: Path) -> str:
    """``RUN.txt``'s lines for the folder's ``per_run.csv`` and ``plan.txt`` (one per file present;
    empty when the folder has no table: nothing was judged)."""
    if not (folder / TABLE.name).is_file():
        return ""
    present = [d for d in DIGESTED if (folder / d.name).is_file()]
    return "\n".join(f"{d.key}: {table_digest(folder / d.name)} ({d.note})" for d in present)


def stamp_digest(folder: Path) -> Path | None:
    """Write the digests into ``folder/RUN.txt``, replacing the lines there or appending them; None
    (nothing written) when ``RUN.txt`` or ``per_run.csv`` is missing."""
    run_txt, lines = folder / "RUN.txt", digest_line(folder)
    if not (run_txt.is_file() and lines):
        return None
    kept = [t for t in run_txt.read_text().splitlines() if not any(d.pattern.match(t) for d in DIGESTED)]
    run_txt.write_text("\n".join([*kept, lines]) + "\n")
    return run_txt


def digest_problem(folder: Path) -> str | None:
    """One line per file whose digest ``RUN.txt`` names and the file no longer has (None: every one
    agrees, or ``RUN.txt`` names none); ``plan.txt`` only while the rules are those ``RUN.txt`` names."""
    run_txt = folder / "RUN.txt"
    text = run_txt.read_text() if run_txt.is_file() else ""
    problems = [p for d in DIGESTED if (p := _file_problem(folder, d, text)) is not None]
    return "; ".join(problems) or None


def _file_problem(folder: Path, digested: Digested, run_txt: str) -> str | None:
    found = digested.pattern.search(run_txt)
    if found is None or (digested.while_rules_unchanged and not _rules_unchanged(folder, run_txt)):
        return None
    path = folder / digested.name
    if not path.is_file():
        return f"RUN.txt names {digested.key} {found[1]}, but the folder has no {digested.name}"
    if (now := table_digest(path)) != found[1]:
        return (f"{digested.name} has sha256 {now}, RUN.txt names {found[1]} ({digested.note.split(';')[0]}): it "
                f"was edited after; {digested.remedy}")  # fmt: skip
    return None


def _rules_unchanged(folder: Path, run_txt: str) -> bool:
    """The preset's rules hash now is the one ``RUN.txt`` names (no attempt planned since)."""
    named = RULES_HASH_RE.search(run_txt)
    return named is not None and rules_hash(folder.name) == named[1]
