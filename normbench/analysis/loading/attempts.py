"""The seeds a preset's earlier attempts used, read from its results folder (issue 56.5).

A confirmatory attempt runs seeds that no earlier attempt of the preset used, so that nothing it
judges was seen while its rules were written. Earlier attempts leave their seeds in three places of
``results/<preset>/``: each attempt's entry in ``HISTORY.md`` (``- runs (runs.csv): 20 runs, seeds
0-4``), the last attempt's ``per_run.csv`` and the pilot's ``pilot/per_run.csv``. `earlier_seeds`
reads them all; `normbench.analysis.judging.verdicts.check_fresh_seeds` refuses a confirmatory table that
reuses one.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from pathlib import Path

RUNS_LINE = re.compile(r"^- runs \(runs\.csv\): .*?seeds ((?:\d+(?:-\d+)?)(?:,\s*\d+(?:-\d+)?)*)", re.M)
"""An attempt's runs in ``HISTORY.md``: ``- runs (runs.csv): 30 runs, seeds 0-4`` (or ``0-4, 100-102``)."""


def parse_seeds(spec: str) -> set[int]:
    """``0-4, 7, 100-102`` → {0, 1, 2, 3, 4, 7, 100, 101, 102}."""
    seeds: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.strip().partition("-")
        seeds.update(range(int(first), int(last or first) + 1))
    return seeds


RUN_COMMIT = re.compile(r"^- run: commit ([0-9a-f]+)", re.M)


def history_seeds(history: str, commit: str | None = None) -> set[int]:
    """Every seed the attempts of a ``HISTORY.md`` text record, but those of an attempt run at
    ``commit`` (the runs judged now, once their entry is on record)."""
    seeds: set[int] = set()
    for block in re.split(r"^## Attempt ", history, flags=re.M)[1:]:
        ran = RUN_COMMIT.search(block)
        if commit and ran and commit.startswith(ran.group(1)):
            continue
        for spec in RUNS_LINE.findall(block):
            seeds |= parse_seeds(spec)
    return seeds


def table_seeds(path: Path, leave_out: Iterable[str] = ()) -> set[int]:
    """The seeds of a ``per_run.csv``'s rows, those whose ``source`` is in ``leave_out`` aside (the
    runs being judged now, when the table is theirs)."""
    if not path.is_file():
        return set()
    skip = set(leave_out)
    with open(path, newline="") as f:
        return {int(row["seed"]) for row in csv.DictReader(f) if row.get("source") not in skip}


def earlier_seeds(folder: Path, sources: Iterable[str] = (), commit: str | None = None) -> set[int]:
    """The seeds the earlier attempts in results folder ``folder`` used (see the module doc); the
    runs judged now (their ``sources``, their run ``commit``) do not count as earlier."""
    sources = list(sources)
    history = folder / "HISTORY.md"
    seeds = history_seeds(history.read_text(), commit) if history.is_file() else set()
    return seeds | table_seeds(folder / "per_run.csv", sources) | table_seeds(folder / "pilot" / "per_run.csv")
