"""The second red team of issue 59 bent committed ``per_run.csv`` tables in ways the cell checks let
through, each a silent wrong verdict: a claim's values in another unit in half the rows, two claims'
columns swapped, a run's row deleted, a row of another model pooled into an arm, a seed edited or
a run copied under a new seed, a finished run marked diverged (or the reverse), a column of no claim
of the rules. Each case here reads the committed table clean (no refusal) and bent (one line naming
the file, the row and the value), the expected numbers computed here from the table's own cells.
A row deleted is refused of a confirmatory table only (`vouch_whole`)."""

from __future__ import annotations

import csv
import math
import re
import shutil
from pathlib import Path

import pytest

from normbench.analysis.judging.per_run import read_per_run, vouch_whole
from normbench.analysis.judging.rules_schema import load_rules
from normbench.base.errors import ConfigError
from tests.conftest import REPO

RESULTS = REPO / "results"
GN, SAT, LR = "gn_batch_size_cpu", "bn_saturation_cpu", "bn_lr_range_cpu"


def table(preset: str) -> list[list[str]]:
    with open(RESULTS / preset / "per_run.csv", newline="") as f:
        return list(csv.reader(f))


def write(rows: list[list[str]], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def refusal(rows: list[list[str]], path: Path, preset: str) -> str:
    """The one-line refusal of the bent table; the committed table of ``preset`` reads clean."""
    assert read_per_run(RESULTS / preset / "per_run.csv", preset)
    with pytest.raises(ConfigError) as err:
        read_per_run(write(rows, path), preset)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def cell(rows: list[list[str]], i: int, column: str) -> str:
    return rows[i][rows[0].index(column)]


def test_a_claim_in_another_unit_in_some_rows_is_refused(tmp_path: Path) -> None:
    """gn_batch_size judges the validation error in percent (measure ``error``): the batch-2 rows of
    seeds 1600-1601 divided by 100 stay inside [0, 100], but each row's own final:val/acc gives
    100 (1 - acc): the first bent row is named with the value its record gives."""
    rows = table(GN)
    column, bent = "claim:bn_error_grows", set()
    for i, row in enumerate(rows[1:], start=1):
        if row[1] in ("1600", "1601") and cell(rows, i, column):
            row[rows[0].index(column)] = repr(float(cell(rows, i, column)) / 100)
            bent.add(i)
    assert bent
    message = refusal(rows, tmp_path / "p.csv", GN)
    named = int(message.split(": row ")[1].split(" ")[0])  # the first bent row of the first arm checked
    assert rows[named][1] in ("1600", "1601") and named in bent
    expected = 100.0 * (1.0 - float(cell(rows, named, "final:val/acc")))
    assert f"row {named} ({rows[named][0]}) has {column} = {float(cell(rows, named, column))!r}" in message
    got = float(message.split("in that row (its final: columns) is ")[1].split(":")[0])
    assert math.isclose(got, expected, rel_tol=1e-12)


def test_two_claims_columns_swapped_are_refused_by_the_measures_range(tmp_path: Path) -> None:
    """bn_saturation's saturated fraction (in [0, 1]) and gradient ratio swapped: the first row whose
    ratio, now read as a fraction, is above 1 is named."""
    rows = table(SAT)
    a, b = rows[0].index("claim:bn_fewer_saturated"), rows[0].index("claim:early_gradients_vanish_without_bn")
    rows[0][a], rows[0][b] = rows[0][b], rows[0][a]
    above = {i for i, r in enumerate(rows[1:], start=1) if float(r[b]) > 1}  # b: now named bn_fewer_saturated
    assert above
    message = refusal(rows, tmp_path / "p.csv", SAT)
    named = int(message.split(": row ")[1].split(" ")[0])
    assert named in above
    assert f"row {named} ({rows[named][0]}) has claim:bn_fewer_saturated = {float(rows[named][b])!r}" in message
    assert "outside [0, 1]" in message and "'saturated_fraction'" in message


def test_a_deleted_row_leaves_a_seed_in_one_arm_only(tmp_path: Path) -> None:
    """A confirmatory table is the whole attempt (`vouch_whole`, which a pilot is not held to)."""
    rules = load_rules(SAT)
    assert rules is not None
    vouch_whole(read_per_run(RESULTS / SAT / "per_run.csv", SAT), rules, SAT, "committed")
    rows = table(SAT)
    gone = rows.pop(1)  # the first run of the standard arm
    bent = read_per_run(write(rows, tmp_path / "p.csv"), SAT)
    with pytest.raises(ConfigError, match=re.escape(f"has seeds [{gone[1]}] that arm 'standard' lacks")):
        vouch_whole(bent, rules, SAT, str(tmp_path / "p.csv"))


def test_a_row_of_another_model_in_an_arm_is_refused(tmp_path: Path) -> None:
    rows = table(SAT)
    rows[2][rows[0].index("scope:model.name")] = "vgg11"
    message = refusal(rows, tmp_path / "p.csv", SAT)
    assert "one arm pools runs of two settings" in message and "scope:model.name = " in message
    assert "row 2 'vgg11'" in message or f"row 2 ({rows[2][0]}) of" in message


def test_a_seed_cell_that_is_not_the_runs_own_is_refused(tmp_path: Path) -> None:
    """Every seed moved by 50 (still in the rules' block 1500-1599): final:seed, the run's summary,
    still says which seed ran."""
    rows = table(SAT)
    for row in rows[1:]:
        row[1] = str(int(row[1]) + 50)
    own = cell(rows, 1, "final:seed")
    assert f"row 1 ({rows[1][0]}) has seed {int(own) + 50} but its run recorded final:seed = {own}" in refusal(
        rows, tmp_path / "p.csv", SAT
    )


def test_a_run_copied_under_a_new_seed_is_refused(tmp_path: Path) -> None:
    rows = table(SAT)
    copy = list(rows[1])
    copy[0], copy[1] = copy[0] + "-b", "1505"
    copy[rows[0].index("final:seed")] = "1505"
    message = refusal([*rows, copy], tmp_path / "p.csv", SAT)
    assert f"holds the same record as row 1 ({rows[1][0]})" in message


@pytest.mark.parametrize("case", ["finished marked diverged", "diverged marked finished"])
def test_a_status_that_is_not_the_runs_is_refused(tmp_path: Path, case: str) -> None:
    """bn_lr_range_cpu holds both: a diverged run records final:diverged_step, a finished one none."""
    rows = table(LR)
    status, steps = rows[0].index("status"), rows[0].index("final:diverged_step")
    want = "finished" if case == "finished marked diverged" else "diverged"
    i = next(i for i, r in enumerate(rows[1:], start=1) if r[status] == want)
    assert (rows[i][steps] == "") == (want == "finished")
    rows[i][status] = "diverged" if want == "finished" else "finished"
    message = refusal(rows, tmp_path / "p.csv", LR)
    assert f"row {i} ({rows[i][0]}) has status {rows[i][status]!r}" in message


def test_a_column_of_no_claim_of_the_rules_is_refused(tmp_path: Path) -> None:
    rows = [[*r, "claim:made_up" if i == 0 else "1.0"] for i, r in enumerate(table(SAT))]
    assert "column 'claim:made_up' is no claim or check the rules of bn_saturation_cpu judge" in refusal(
        rows, tmp_path / "p.csv", SAT
    )


def test_a_blank_source_and_a_byte_order_mark_are_named(tmp_path: Path) -> None:
    rows = table(SAT)
    rows[3][0] = ""
    assert "row 3 has a blank source" in refusal(rows, tmp_path / "p.csv", SAT)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (RESULTS / SAT / "per_run.csv").read_bytes())
    with pytest.raises(ConfigError, match="starts with a byte-order mark"):
        read_per_run(bom, SAT)
    shutil.copy(RESULTS / SAT / "per_run.csv", tmp_path / "clean.csv")
    assert len(read_per_run(tmp_path / "clean.csv", SAT)) == len(table(SAT)) - 1


def test_a_rules_hash_written_in_by_hand_is_refused(tmp_path: Path) -> None:
    """The table's rules_hash set to bn_saturation's superseded hash (kept, so the table would be
    judged by the old rules): git holds the rules file at the table's commit, whose hash is the one
    the runs recorded; refused naming both. Skipped where git cannot tell (a shallow clone)."""
    from normbench.analysis.judging.evidence import rules_hash_at
    from normbench.rules import superseded_rules

    rows = table(SAT)
    commit, digest = cell(rows, 1, "commit"), cell(rows, 1, "rules_hash")
    if rules_hash_at(SAT, commit) is None:
        pytest.skip("git cannot show the rules at the table's commit here")
    assert rules_hash_at(SAT, commit) == digest
    old = next(h for h in superseded_rules(SAT) if h != digest)
    for row in rows[1:]:
        row[rows[0].index("rules_hash")] = old
    message = refusal(rows, tmp_path / "p.csv", SAT)
    assert f"rules_hash {old} is not the rules bn_saturation had at the table's commit {commit[:7]} ({digest})" in (
        message
    )
