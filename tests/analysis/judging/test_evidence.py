"""A per-run table is evidence only when every run is in it once, finished or diverged, at one
commit under one rules hash (issue 59, item 1): each case of the issue's red team, on small
tables written here, is a one-line refusal naming the file and the bad value, or the right count."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from normbench.analysis.judging.claims import judge_rows
from normbench.analysis.judging.evidence import selector_columns, vouch_rows
from normbench.analysis.judging.per_run import read_per_run, write_per_run
from normbench.base.errors import ConfigError
from tests.analysis.judging.test_plan_cli import RULES, use_rules
from tests.faults import fault

SEEDS = (0, 1, 2, 3, 4)


@pytest.fixture
def toy_rules(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return use_rules(monkeypatch, dict(RULES))


def toy_rows(commit: str = "c0ffee") -> list[dict[str, Any]]:
    """Five seeds of BN (10 + seed) and of none (seed): the toy rules' one claim, BN higher."""
    return [{"source": f"runs/{norm}{seed}", "seed": seed, "status": "finished", "commit": commit,
             "rules_hash": "toyhash", "norm.name": norm, "claim:bn_higher": base + seed, "final:step": 10}
            for norm, base in (("bn", 10.0), ("none", 0.0)) for seed in SEEDS]  # fmt: skip


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def refusal(path: Path, *, preset: str | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        read_per_run(path, preset)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_clean_table_reads_and_its_selectors_are_the_config_columns(tmp_path: Path) -> None:
    path = write_per_run(toy_rows(), tmp_path / "per_run.csv")
    rows = read_per_run(path)
    assert len(rows) == 10
    with open(path, newline="") as f:
        header = next(csv.reader(f))
    assert selector_columns(header) == ["norm.name"]


@fault("per_run.csv concatenated with itself (issue 59)",
       "one line naming the file and the source in two rows; never judged at twice the n",
       "one-line")  # fmt: skip
def test_a_table_concatenated_with_itself_is_refused(tmp_path: Path) -> None:
    path = write_per_run(toy_rows(), tmp_path / "per_run.csv")
    text = lines(path)
    path.write_text("".join(text + text[1:]))
    assert "source 'runs/bn0' is in rows 1 and 11" in refusal(path)


@fault("one per_run.csv row duplicated (issue 59)",
       "one line naming the file and the run that would be counted twice",
       "one-line")  # fmt: skip
def test_one_row_duplicated_is_refused(tmp_path: Path) -> None:
    path = write_per_run(toy_rows(), tmp_path / "per_run.csv")
    text = lines(path)
    path.write_text("".join(text + [text[7]]))  # none's seed 1... any one row, twice
    assert "would be counted twice" in refusal(path) and "runs/none1" in refusal(path)


@fault("the same seed of one arm under a second source in per_run.csv (issue 59)",
       "one line naming the seed, the setting and both rows",
       "one-line")  # fmt: skip
def test_the_same_seed_of_one_arm_under_a_second_source_is_refused(tmp_path: Path) -> None:
    rows = toy_rows()
    rows.append({**rows[2], "source": "elsewhere/bn2", "claim:bn_higher": 3.0})
    message = refusal(write_per_run(rows, tmp_path / "per_run.csv"))
    assert "seed 2 of norm.name=bn is in rows 3 (runs/bn2) and 11 (elsewhere/bn2)" in message


@fault("a header-only per_run.csv (issue 59)",
       "one line: the table holds no runs; no claim reads 'not judged' from it",
       "one-line")  # fmt: skip
def test_a_header_only_table_is_refused(tmp_path: Path) -> None:
    path = write_per_run(toy_rows(), tmp_path / "per_run.csv")
    path.write_text(lines(path)[0])
    assert "holds no runs (its header only)" in refusal(path)


@fault("a nan measure of a finished run in per_run.csv (issue 59)",
       "one line naming the column, the run and its status; the run is not dropped silently",
       "one-line")  # fmt: skip
def test_a_nan_measure_of_a_finished_run_is_refused(tmp_path: Path) -> None:
    rows = toy_rows()
    rows[3]["claim:bn_higher"] = math.nan
    message = refusal(write_per_run(rows, tmp_path / "per_run.csv"))
    assert "claim:bn_higher of runs/bn3 (status finished) is nan" in message


@fault("a per_run.csv row of another commit or rules hash (issue 59)",
       "one line naming both values and a row",
       "one-line")  # fmt: skip
def test_a_run_of_another_commit_is_refused(tmp_path: Path) -> None:
    rows = toy_rows()
    rows[4]["commit"] = "badc0de"
    assert "mixes commit 'c0ffee' and 'badc0de' (e.g. runs/bn4)" in refusal(write_per_run(rows, tmp_path / "p.csv"))


@fault("a per_run.csv row of another commit or rules hash (issue 59)",
       "one line naming both values and a row",
       "one-line")  # fmt: skip
def test_a_run_under_other_rules_is_refused(tmp_path: Path) -> None:
    rows = toy_rows()
    rows[-1]["rules_hash"] = "older"
    message = refusal(write_per_run(rows, tmp_path / "p.csv"))
    assert "mixes rules_hash 'toyhash' and 'older' (e.g. runs/none4)" in message


@fault("a per_run.csv row of a run that ended neither finished nor diverged (issue 59)",
       "one line naming the run and its status (read only when unfinished runs are asked for)",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("status", ["interrupted", "crashed", "killed", "failed"])
def test_runs_that_are_not_results_are_refused_unless_asked_for(tmp_path: Path, status: str) -> None:
    rows = toy_rows()
    rows[5]["status"] = status
    path = write_per_run(rows, tmp_path / "per_run.csv")
    assert f"1 run(s) ended neither finished nor diverged: runs/none0 ({status})" in refusal(path)
    assert len(read_per_run(path, unfinished=True)) == 10


@fault("a per_run.csv row with status diverged, holding a value or nan (issue 59)",
       "counted as diverged at its measure's worst value under its preset's rules; without them, one line",
       "result")  # fmt: skip
def test_a_diverged_status_is_honoured_whatever_value_the_row_holds(toy_rules: dict, tmp_path: Path) -> None:
    """BN's seed 1 diverged but holds a finite value: read with its preset it counts at the worst
    value (−inf: higher is better), so the arm has one diverged run of five and the claim is judged
    by rank (the rule for diverged runs); read without it, it is refused."""
    rows = toy_rows()
    rows[1]["status"] = "diverged"
    path = write_per_run(rows, tmp_path / "per_run.csv")
    assert "runs/bn1 has status diverged but claim:bn_higher = 11.0" in refusal(path)
    back = read_per_run(path, "toy_cpu")
    assert back[1]["claim:bn_higher"] == -math.inf and [r["claim:bn_higher"] for r in back[2:5]] == [12, 13, 14]
    (claim,) = judge_rows("toy_cpu", back)
    assert claim.a is not None and (claim.a.n, claim.a.diverged) == (5, 1) and claim.comparison is not None
    assert claim.comparison.test == "rank"
    clean = judge_rows("toy_cpu", read_per_run(write_per_run(toy_rows(), tmp_path / "clean.csv"), "toy_cpu"))[0]
    assert clean.a is not None and clean.a.diverged == 0 and clean.comparison.test == "welch"


@fault("a per_run.csv row with status diverged, holding a value or nan (issue 59)",
       "counted as diverged at its measure's worst value under its preset's rules; without them, one line",
       "result")  # fmt: skip
def test_a_nan_in_a_diverged_run_counts_as_its_worst_value(toy_rules: dict, tmp_path: Path) -> None:
    rows = toy_rows()
    rows[6].update(status="diverged", **{"claim:bn_higher": math.nan})
    back = read_per_run(write_per_run(rows, tmp_path / "per_run.csv"), "toy_cpu")
    assert back[6]["claim:bn_higher"] == -math.inf


def test_vouch_rows_checks_rows_made_in_memory() -> None:
    rows = toy_rows()
    vouch_rows(rows, "the runs")
    with pytest.raises(ConfigError, match="the runs: source 'runs/bn0' is in rows 1 and 11"):
        vouch_rows(rows + rows, "the runs")


def test_an_empty_measure_of_a_run_in_an_arm_is_refused_when_judged(toy_rules: dict, tmp_path: Path) -> None:
    """An empty cell reads as "does not apply"; in a run of a claim's arm it is refused: on reading
    with the rules (naming the file and the row, issue 59 T1), and by the judge given the rows."""
    rows = toy_rules and toy_rows()
    rows[3]["claim:bn_higher"] = None
    path = write_per_run(rows, tmp_path / "per_run.csv")
    message = refusal(path, preset="toy_cpu")
    assert "row 4 (runs/bn3) is selected for claim:bn_higher but its cell is empty" in message
    with pytest.raises(ConfigError, match="no value of claim:bn_higher for runs/bn3"):
        judge_rows("toy_cpu", rows)


def test_a_table_without_selector_columns_counts_sources_only(tmp_path: Path) -> None:
    """A preset without rules writes no selector columns: its settings share seeds, and only a
    source twice is a run twice."""
    rows = [{k: v for k, v in r.items() if k not in ("norm.name", "claim:bn_higher")} for r in toy_rows()]
    path = write_per_run(rows, tmp_path / "per_run.csv")
    assert len(read_per_run(path)) == 10
    text = lines(path)
    path.write_text("".join(text + [text[1]]))
    assert "source 'runs/bn0' is in rows 1 and 11" in refusal(path)


@fault("normbench-figures --per-run of a committed table concatenated, cut to its header or of another "
       "commit (issue 59)",
       "one line naming the file, exit 2; nothing written",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("damage", ["concatenated", "header only", "another commit"])
def test_normbench_figures_per_run_refuses_a_damaged_committed_table_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, damage: str
) -> None:
    """The red team's command on a committed table: exit 2, one line naming the file, nothing written."""
    from normbench.analysis.figures.figures_cli import main
    from normbench.analysis.loading.provenance import results_root

    source = results_root() / "bn_saturation_cpu" / "per_run.csv"
    if not source.is_file():
        pytest.skip("results/bn_saturation_cpu holds no per_run.csv")
    text = lines(source)
    path = tmp_path / "per_run.csv"
    if damage == "concatenated":
        path.write_text("".join(text + text[1:]))
    elif damage == "header only":
        path.write_text(text[0])
    else:
        commit = text[1].split(",")[3]
        path.write_text("".join(text[:-1] + [text[-1].replace(commit, "0" * len(commit))]))
    out = tmp_path / "out"
    assert main(["bn_saturation_cpu", "--per-run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and not out.exists()
