"""`verify_folder`: a results folder's claims.csv must be what the current code judges from its
per_run.csv (issue 59, item 1; red-team case 2: a verdict hand-edited to "opposite" passed the
index check). A copy of a committed folder, its claims written by the writer normbench-figures
uses, passes; a hand-edited verdict or estimate, or a per_run.csv with a run twice, fails with one
line naming the file, the claim, the column and both values."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from normbench.analysis.findings.verify import same_cell, verify_folder
from normbench.analysis.judging.claims import judge_rows, write_claims
from normbench.analysis.judging.per_run import read_per_run
from normbench.analysis.loading.provenance import results_root
from normbench.analysis.wording.claims_text import write_claims_markdown
from tests.faults import fault

PRESET = "bn_saturation_cpu"
"""A small committed folder (10 runs, 2 claims, a check)."""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the committed folder, its claims.csv / claims.md written from its per_run.csv."""
    source = results_root() / PRESET
    if not (source / "per_run.csv").is_file():
        pytest.skip(f"results/{PRESET} holds no per_run.csv")
    copy = tmp_path / PRESET
    copy.mkdir()
    shutil.copy(source / "per_run.csv", copy / "per_run.csv")
    write_claims(judge_rows(PRESET, read_per_run(copy / "per_run.csv", PRESET)), copy)
    with open(copy / "claims.csv", newline="") as f:  # claims.md as normbench-figures writes it (issue 57)
        write_claims_markdown(PRESET, list(csv.DictReader(f)), copy)
    return copy


def edit(path: Path, claim_id: str, column: str, change) -> tuple[str, str]:
    """Set one cell of claims.csv by hand; returns (old, new)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), list(reader)
    row = next(r for r in rows if r["id"] == claim_id)
    old = row[column]
    row[column] = change(old)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return old, row[column]


def judged_claim(path: Path) -> str:
    with open(path, newline="") as f:
        return next(r["id"] for r in csv.DictReader(f) if r["estimate"] not in ("", "nan"))


def test_a_copy_of_a_committed_folder_passes(folder: Path) -> None:
    assert verify_folder(folder) == []


@fault("claims.csv edited by hand: a verdict, an estimate, a claim row or a column (issue 59)",
       "index --check rebuilds it from per_run.csv: one line per difference naming the file and the claim",
       "one-line")  # fmt: skip
def test_a_verdict_edited_by_hand_fails(folder: Path) -> None:
    """The red team's case: a verdict set to "opposite" by hand (here the judged verdict is
    already "opposite", so the edit sets "supported": the same lie the other way round)."""
    claim = judged_claim(folder / "claims.csv")
    old, new = edit(folder / "claims.csv", claim, "verdict", lambda v: "supported" if v == "opposite" else "opposite")
    assert old != new
    lines = verify_folder(folder)
    assert f"{folder / 'claims.csv'}: {claim}: verdict is {new!r}, rebuilt from per_run.csv {old!r}" in lines
    assert all("\n" not in line for line in lines)


@fault("claims.csv edited by hand: a verdict, an estimate, a claim row or a column (issue 59)",
       "index --check rebuilds it from per_run.csv: one line per difference naming the file and the claim",
       "one-line")  # fmt: skip
def test_a_changed_estimate_fails_and_a_rounding_within_1e_9_does_not(folder: Path) -> None:
    claim = judged_claim(folder / "claims.csv")
    old, new = edit(folder / "claims.csv", claim, "estimate", lambda v: repr(float(v) * (1 + 1e-12)))
    assert verify_folder(folder) == []
    edit(folder / "claims.csv", claim, "estimate", lambda v: repr(float(v) * 1.001))
    (line,) = [x for x in verify_folder(folder) if ": estimate is " in x]
    assert line.startswith(f"{folder / 'claims.csv'}: {claim}: estimate is ") and repr(float(old)) in line


def test_a_per_run_table_with_a_run_twice_cannot_be_re_judged(folder: Path) -> None:
    lines = (folder / "per_run.csv").read_text().splitlines(keepends=True)
    (folder / "per_run.csv").write_text("".join(lines + [lines[1]]))
    (line,) = verify_folder(folder)
    assert "per_run.csv: cannot be re-judged:" in line and "counted twice" in line


@fault("claims.csv edited by hand: a verdict, an estimate, a claim row or a column (issue 59)",
       "index --check rebuilds it from per_run.csv: one line per difference naming the file and the claim",
       "one-line")  # fmt: skip
def test_a_dropped_claim_row_and_a_missing_column_are_differences(folder: Path) -> None:
    with open(folder / "claims.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    fields = [k for k in rows[0] if k != "p_holm"]
    with open(folder / "claims.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows[1:])
    lines = verify_folder(folder)
    assert any("column 'p_holm' is missing" in x for x in lines)
    assert any(f"claims {[r['id'] for r in rows[1:]]} but the rebuilt table has" in x for x in lines)


@pytest.mark.parametrize("a, b, same", [("0.1", "0.1", True), ("1.0", repr(1.0 + 1e-12), True), ("1.0", "1.001", False),
                                         ("nan", "nan", True), ("inf", "inf", True), ("inf", "-inf", False),
                                         ("supported", "opposite", False), ("", "0", False)])  # fmt: skip
def test_cells_agree_as_numbers_to_a_relative_1e_9_else_as_text(a: str, b: str, same: bool) -> None:
    assert same_cell(a, b) is same
