"""Evidence that cannot be bent (issue 59, red team items 1-4, T1, T2): a ``per_run.csv`` edited
by hand or by a buggy tool is refused in one line naming the file, the bad column, row or value
and what to do, never judged silently into another verdict; the committed tables, untouched, read
and judge as their committed ``claims.csv`` says."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from normbench.analysis.judging.claims import judge_rows
from normbench.analysis.judging.evidence import PREFIXES, looks_alike
from normbench.analysis.judging.per_run import SCOPE, read_per_run, write_per_run
from normbench.analysis.loading.provenance import results_root
from normbench.base.errors import ConfigError
from tests.analysis.judging.test_evidence import toy_rows
from tests.analysis.judging.test_plan_cli import RULES, use_rules

Table = list[list[str]]
SAT, LR = "bn_saturation_cpu", "bn_lr_range_cpu"


def committed(preset: str) -> Path:
    path = results_root() / preset / "per_run.csv"
    if not path.is_file():
        pytest.skip(f"{path} is not committed")
    return path


def tampered(preset: str, tmp_path: Path, edit: Callable[[Table], Any]) -> Path:
    """A copy of ``preset``'s committed table with ``edit`` applied to its cells (header first)."""
    with open(committed(preset), newline="") as f:
        table = list(csv.reader(f))
    edit(table)
    path = tmp_path / "per_run.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(table)
    return path


def refusal(path: Path, preset: str | None) -> str:
    """The one-line refusal of reading (and judging) ``path`` with ``preset``'s rules."""
    with pytest.raises(ConfigError) as err:
        judge_rows(preset, read_per_run(path, preset)) if preset else read_per_run(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message, message
    return message


def cell(table: Table, row: int, column: str, value: str | None = None) -> str:
    """Row ``row``'s (1: the first run) cell of ``column``, set to ``value`` when given."""
    i = table[0].index(column)
    if value is not None:
        table[row][i] = value
    return table[row][i]


def first_row(table: Table, **want: str) -> int:
    return next(i for i, r in enumerate(table) if i and all(cell(table, i, k) == v for k, v in want.items()))


def verdicts(path: Path, preset: str) -> dict[str, str]:
    return {c.id: c.verdict for c in judge_rows(preset, read_per_run(path, preset))}


@pytest.mark.parametrize("preset", [SAT, LR])
def test_an_untouched_committed_table_judges_as_its_claims_csv(preset: str, tmp_path: Path) -> None:
    """The checks leave clean tables alone: a copy rewritten by the csv module reads and judges to
    the committed verdicts (bn_lr_range_cpu: its lr 1 and 3 rows are in no claim's arm)."""
    path = tampered(preset, tmp_path, lambda table: None)
    with open(committed(preset).parent / "claims.csv", newline="") as f:
        want = {r["id"]: r["verdict"] for r in csv.DictReader(f)}
    assert verdicts(path, preset) == want


def test_a_column_twice_is_refused(tmp_path: Path) -> None:
    """Item 1: a second 'claim:bn_fewer_saturated' holding 0.5 made the claim inconclusive, rc 0."""

    def append_copy(table: Table) -> None:
        for i, row in enumerate(table):
            row.append("claim:bn_fewer_saturated" if i == 0 else "0.5")

    path = tampered(SAT, tmp_path, append_copy)
    width = len(path.read_text().splitlines()[0].split(","))
    message = refusal(path, SAT)
    assert f"column 'claim:bn_fewer_saturated' is in the header twice (columns 7 and {width})" in message
    assert "keep one" in message
    assert "in the header twice" in refusal(path, None)  # with or without the rules


def test_a_config_column_among_the_measures_is_refused(tmp_path: Path) -> None:
    """Item 2: norm.name moved after the claim columns, plus a copy of a BN row under another
    source, was accepted with n = 6 (the duplicate-run check saw no selector)."""

    def move_and_copy(table: Table) -> None:
        i = table[0].index("norm.name")
        for row in table:
            row.append(row.pop(i))
        copy = list(table[first_row(table, **{"norm.name": "bn"})])
        copy[0] += "b"
        table.append(copy)

    path = tampered(SAT, tmp_path, move_and_copy)
    message = refusal(path, SAT)
    assert "column 'norm.name' (column " in message and "follows 'claim:bn_fewer_saturated'" in message
    assert "move it there" in message


def test_an_unprefixed_column_after_the_scope_columns_is_refused_and_scope_columns_are_prefixed(tmp_path) -> None:
    assert SCOPE in PREFIXES  # scope: columns close the table and are never selectors
    path = tampered(SAT, tmp_path, lambda t: [r.append("note" if i == 0 else "x") for i, r in enumerate(t)])
    assert "column 'note' (column " in refusal(path, None)


@pytest.mark.parametrize("header, hint", [("norm_name", ""), ("norm.name ", " (column 'norm.name ' looks like it)")])
def test_a_selector_key_of_the_rules_missing_from_the_table_is_refused(header: str, hint: str, tmp_path) -> None:
    """Item 2/3: with norm.name renamed every claim read "not run at this scale", a false reason."""
    path = tampered(SAT, tmp_path, lambda t: t[0].__setitem__(t[0].index("norm.name"), header))
    message = refusal(path, SAT)
    assert f"the rules of {SAT} select runs on 'norm.name', which is not a config column of the table{hint}" in message
    assert len(read_per_run(path)) == 10  # without the rules, nothing says which keys select


BN, NONE, BN_01 = {"norm.name": "bn"}, {"norm.name": "none"}, {"norm.name": "bn", "lr": "0.1"}
NAME = "norm.name"


@pytest.mark.parametrize(
    "preset, where, column, value, says",
    [
        (SAT, BN, NAME, "BN", "norm.name = 'BN', which looks like 'bn' of arm 'BN' of "),
        (SAT, BN, NAME, "bn ", "norm.name = 'bn ', which has whitespace around it (write 'bn')"),
        (SAT, NONE, NAME, "\tnone", "has whitespace around it (write 'none')"),
        (SAT, BN, NAME, "b\u200bn", "holds the control character '\\u200b' (U+200B)"),
        (SAT, BN, NAME, "b\u043f", "holds the non-ASCII letter 'п' (CYRILLIC SMALL LETTER PE)"),
        (LR, BN_01, "lr", "0.1000001", "lr = 0.1000001, which looks like 0.1 of arm 'BN' of"),
        (LR, BN_01, "lr", '"0.1"', "lr = '0.1', which looks like 0.1 of arm 'BN' of "),
        (LR, {NAME: "none", "lr": "0.1"}, NAME, "NONE", "norm.name = 'NONE', which looks like 'none' of"),
    ],
)
def test_a_selector_value_that_only_looks_like_an_arms_is_refused(
    preset: str, where: dict[str, str], column: str, value: str, says: str, tmp_path: Path
) -> None:
    """Item 3: each of these rows fell silently out of every arm (a claim "not judged: too few
    seeds", or n 8 -> 7 with the estimate moved)."""
    row: list[int] = []
    path = tampered(preset, tmp_path, lambda t: (row.append(first_row(t, **where)), cell(t, row[0], column, value)))
    message = refusal(path, preset)
    assert f"row {row[0]} (" in message and says in message, message


def test_rows_in_no_arm_are_accepted_and_judge_as_before(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A setting no claim compares (GroupNorm beside the toy rules' BN and none) passes, whatever
    its values; the verdict is the one judged without those rows."""
    use_rules(monkeypatch, dict(RULES))
    rows = toy_rows()
    extra = [{**r, "source": r["source"].replace("bn", "gn"), "norm.name": "gn", "claim:bn_higher": None}
             for r in rows[:5]]  # fmt: skip
    alone = judge_rows("toy_cpu", read_per_run(write_per_run(rows, tmp_path / "a.csv"), "toy_cpu"))
    beside = judge_rows("toy_cpu", read_per_run(write_per_run(rows + extra, tmp_path / "b.csv"), "toy_cpu"))
    assert [(c.id, c.verdict, c.a.n, c.b.n) for c in beside] == [(c.id, c.verdict, c.a.n, c.b.n) for c in alone]
    assert alone[0].verdict == "supported"


@pytest.mark.parametrize("value, status", [("inf", "finished"), ("-inf", "finished")])
def test_an_infinite_measure_of_a_finished_run_is_refused(value: str, status: str, tmp_path: Path) -> None:
    """Item 4: ±inf in a finished run counted it as diverged; -inf in check:bn_learns passed the check."""
    for column in ("claim:bn_fewer_saturated", "check:bn_learns"):
        path = tampered(SAT, tmp_path, lambda t, c=column: cell(t, first_row(t, status=status, **{"norm.name": "bn"}),
                                                               c, value))  # fmt: skip
        message = refusal(path, SAT)
        assert f"{column} of " in message and f"(status {status}) is {value}: only a diverged run" in message


def test_a_diverged_run_still_holds_its_worst_value(tmp_path: Path) -> None:
    """The committed bn_lr_range_cpu table's diverged runs hold ±inf and read as before."""
    rows = read_per_run(committed(LR), LR)
    diverged = [r for r in rows if r["status"] == "diverged"]
    assert diverged and all(math.isinf(v) for r in diverged for k, v in r.items()
                            if k.startswith(("claim:", "check:")) and v is not None)  # fmt: skip


@pytest.mark.parametrize("damage", ["empty check", "empty claim", "no check column", "no learning column"])
def test_a_value_a_check_or_an_arm_needs_is_refused_when_missing(damage: str, tmp_path: Path) -> None:
    """T1: an empty or missing check column was a TypeError / KeyError traceback."""
    column = {"empty check": "check:bn_learns", "empty claim": "claim:bn_fewer_saturated",
              "no check column": "check:bn_learns", "no learning column": "check:learns_cifar10"}[damage]  # fmt: skip

    def damage_it(table: Table) -> None:
        i = table[0].index(column)
        if damage.startswith("empty"):
            table[first_row(table, **{"norm.name": "bn"})][i] = ""
        else:
            for row in table:
                del row[i]

    message = refusal(tampered(SAT, tmp_path, damage_it), SAT)
    if damage.startswith("empty"):
        assert f"is selected for {column} but its cell is empty" in message
    else:
        assert f"no column {column!r}, which the rules of {SAT} judge" in message


def test_the_judge_itself_refuses_a_check_without_its_value_in_one_line() -> None:
    """T1 for rows given to `judge_rows` directly (no file): a ConfigError, not a traceback."""
    rows = read_per_run(committed(SAT), SAT)
    without = [{k: v for k, v in r.items() if k != "check:bn_learns"} for r in rows]
    with pytest.raises(ConfigError, match=r"bn_learns: .* has no column check:bn_learns"):
        judge_rows(SAT, without)
    empty = [{**r, "check:bn_learns": None} for r in rows]
    with pytest.raises(ConfigError, match=r"has an empty cell in check:bn_learns"):
        judge_rows(SAT, empty)


def test_a_cell_over_the_csv_field_limit_is_refused_with_its_line(tmp_path: Path) -> None:
    """T2: a cell over 131,072 characters was a _csv.Error traceback."""
    limit = csv.field_size_limit()
    path = tampered(SAT, tmp_path, lambda t: cell(t, 2, "source", "x" * (limit + 1)))
    message = refusal(path, SAT)
    assert f"line 3, cannot be parsed as CSV (field larger than field limit ({limit}))" in message


def test_looks_alike_tidies_case_space_unicode_quotes_and_floats_only() -> None:
    """The normalisation the look-alike check uses, against values written by hand."""
    assert looks_alike("BN ", "bn") and looks_alike("ｂｎ", "bn") and looks_alike('"0.1"', 0.1)
    assert looks_alike(0.1 * (1 + 9e-7), 0.1) and looks_alike(3, 3.0) and looks_alike("True", True)
    assert not looks_alike(0.1 * (1 + 2e-6), 0.1) and not looks_alike("gn", "bn") and not looks_alike(1, True)


def test_a_diverged_run_under_rules_not_kept_says_so_when_the_preset_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pilot's refusal said "read the table with its preset" though the preset was given."""
    use_rules(monkeypatch, dict(RULES))
    rows = [{**r, "rules_hash": "oldhash"} for r in toy_rows()]
    rows[0]["status"] = "diverged"
    path = write_per_run(rows, tmp_path / "per_run.csv")
    given = refusal(path, "toy_cpu")
    assert "has status diverged but claim:bn_higher = 10.0" in given and "read the table with its preset" not in given
    assert "rules hash 'oldhash' is neither the current one nor kept under normbench/rules/superseded/" in given
    assert "read the table with its preset" in refusal(path, None)


def test_a_blank_rules_hash_is_refused_where_the_preset_judges_by_rules(tmp_path: Path) -> None:
    """A blank hash was judged under the current rules, skipping the checks that need the table's own."""
    path = tampered(SAT, tmp_path, lambda t: [cell(t, i, "rules_hash", "") for i in range(1, len(t))])
    message = refusal(path, SAT)
    assert f"rules_hash is blank, but {SAT} judges by rules (now " in message
    assert len(read_per_run(path)) == 10  # without a preset, nothing judges it
