"""A HISTORY.md entry's numbers come from the folder's files (issue 56, item 8): each claim as
claims.md states it, each learning bound's range and passes per setting, counted here again from
per_run.csv."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

from normbench.analysis.reports import history
from normbench.analysis.reports.attempt_numbers import BOUNDS_LINE, CLAIMS_LINE

RESULTS = Path(__file__).resolve().parents[3] / "results"


def copy_of(tmp_path: Path, preset: str) -> Path:
    folder = tmp_path / "results" / preset
    folder.mkdir(parents=True)
    for name in ("claims.csv", "claims.md", "per_run.csv", "RUN.txt", "runs.csv"):
        shutil.copy(RESULTS / preset / name, folder / name)
    return folder


def test_an_entry_states_each_claim_as_claims_md_does_and_counts_each_bound(tmp_path: Path) -> None:
    """bn_lr_range_cpu: two claims, and a learning bound over an lr grid where runs without a norm
    diverged at lr 1 and 3 (their value not finite: failing, counted apart)."""
    folder = copy_of(tmp_path, "bn_lr_range_cpu")
    text = history.append_entry(folder, "a copy, to read its entry")
    lines = text.splitlines()
    claims = lines[lines.index(CLAIMS_LINE) + 1 : lines.index(BOUNDS_LINE)]
    with open(folder / "claims.csv", newline="") as f:
        judged = [r for r in csv.DictReader(f) if r["verdict"] not in ("passed", "failed")]
    committed = (RESULTS / "bn_lr_range_cpu" / "claims.md").read_text()
    assert len(claims) == len(judged) == 2
    for line, row in zip(claims, judged, strict=True):
        assert f": {row['verdict']}" in line
        difference = line.split("; ", 1)[1].rsplit(" (E ", 1)[0]  # e.g. "BN − no norm: +11.1 pts [9.71, 12.5]"
        assert f"| {difference} |" in committed
    bound = lines[lines.index(BOUNDS_LINE) + 1]
    with open(folder / "per_run.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["norm.name"] == "none" and float(r["lr"]) == 3.0]
    values = [float(r["check:learns_over_lr_grid"]) for r in rows]
    passing, broken = sum(v > 0.2 for v in values), sum(not math.isfinite(v) for v in values)
    assert broken > 0 and bound.startswith("  - learns_over_lr_grid (above 0.2): ")
    assert "lr 3.0, no norm " in bound and f"({passing} of {len(values)} pass; {broken} not finite: diverged)" in bound
