"""``normbench-reports index --check`` sees a results folder bent after its run (issue 59, items 6
and 7): a confirmatory table whose seeds an earlier attempt on record used, the last attempt's
HISTORY.md entry edited (its verdicts, seeds or run commit), a per_run.csv of another commit, a
blank commit or rules hash. Each case on a copy of results/bn_saturation_cpu (its confirmatory
attempt at 7df5e7f): the clean copy has no problem, each tampered one exactly the one it names."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from normbench.analysis.reports import attempt_record, index
from tests.conftest import REPO

FOLDER = REPO / "results" / "bn_saturation_cpu"
FILES = ("claims.csv", "claims.md", "per_run.csv", "runs.csv", "RUN.txt", "HISTORY.md", "plan.txt")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results" / FOLDER.name
    out.mkdir(parents=True)
    for name in FILES:
        shutil.copy(FOLDER / name, out / name)
    return out.parent


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new))


def edit_table(path: Path, change: Callable[[dict[str, str]], None]) -> None:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = list(reader.fieldnames or []), list(reader)
    for row in rows:
        change(row)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)


def test_the_clean_copy_has_no_problem(results: Path) -> None:
    assert index.record_problems(results) == []
    assert index.evidence_problems(results) == []


LAST = "## Attempt 4 — rules 36a8aca641140174, run at 7df5e7f"


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("- verdicts: claims: supported 2; setup checks: passed 1",
         "- verdicts: claims: opposite 2; setup checks: failed 1", "verdicts 'claims: opposite 2"),
        ("- runs (runs.csv): 10 runs, seeds 1500-1504", "- runs (runs.csv): 10 runs, seeds 1600-1604",
         "seeds '1600-1604', per_run.csv holds seeds '1500-1504'"),
        ("- runs (runs.csv): 10 runs, seeds 1500-1504", "- runs (runs.csv): 12 runs, seeds 1500-1504",
         "runs '12 runs, seeds 1500-1504', runs.csv holds '10 runs, seeds 1500-1504'"),
        ("- run: commit 7df5e7f, started 2026-12-06 06:06:55", "- run: commit 1234567, started 2026-12-06 06:06:55",
         "line names 1234567, RUN.txt 7df5e7f"),
        (f"{LAST} (2026-12-06 06:06:55)", "## Attempt 4 — rules 8e896676f72ad53b, run at 7df5e7f (2026-12-06 06:06:55)",
         "names rules 8e896676f72ad53b, claims.csv was judged under 36a8aca641140174"),
    ],
)  # fmt: skip
def test_the_last_attempts_entry_is_checked_against_the_files(results: Path, old: str, new: str, named: str) -> None:
    history = results / FOLDER.name / "HISTORY.md"
    before = history.read_text()
    at = before.rindex(LAST)  # only the last attempt's entry is edited
    history.write_text(before[:at] + before[at:].replace(old, new))
    problems = index.record_problems(results)
    assert any(named in p for p in problems), problems  # seeds: against runs.csv and per_run.csv, two lines
    assert all(p.startswith("results/bn_saturation_cpu: HISTORY.md: attempt 4 (run at 7df5e7f)") for p in problems)


def test_an_entry_of_another_run_is_not_compared(results: Path) -> None:
    """Only the last attempt that ran, and only when it is RUN.txt's run: an earlier entry's tally
    (attempt 3's, of another run) differs from claims.csv and is no problem."""
    entry = attempt_record.last_run_entry((results / FOLDER.name / "HISTORY.md").read_text())
    assert entry is not None and entry["number"] == "4" and entry["commit"] == "7df5e7f"
    claims = index.read_claims(results / FOLDER.name)
    assert attempt_record.entry_problems({**entry, "text": entry["text"].replace("supported 2", "opposite 2")},
                                         "abc1234", claims, None, None) == []  # fmt: skip


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [
        ("commit", "1234567aaaabbbb", "measured at commit 1234567aaaabbbb, RUN.txt names 7df5e7f"),
        ("commit", "", "a row with a blank commit"),
        ("rules_hash", "", "a row with a blank rules_hash"),
    ],
)  # fmt: skip
def test_per_run_csv_names_the_run_txt_commit_and_a_rules_hash(
    results: Path, column: str, value: str, named: str
) -> None:
    edit_table(results / FOLDER.name / "per_run.csv", lambda row: row.update({column: value}))
    problems = index.record_problems(results)
    assert len(problems) == 1 and named in problems[0], problems


def test_a_blank_run_txt_commit_is_a_problem(results: Path) -> None:
    edit(results / FOLDER.name / "RUN.txt", "commit: 7df5e7f\n", "commit: \n")
    assert any("RUN.txt names no commit" in p for p in index.record_problems(results))


def test_seeds_an_earlier_attempt_used_are_a_problem(results: Path) -> None:
    """Item 6: an attempt on record (another run's commit) with the table's seeds 1500-1504: the
    confirmatory table reuses them, so the folder is not what its evidence says."""
    with open(results / FOLDER.name / "HISTORY.md", "a") as f:
        f.write("\n## Attempt 5 — rules 36a8aca641140174, run at abcdef1 (2026-12-07 00:00:00)\n\n"
                "- run: commit abcdef1, started 2026-12-07 00:00:00 UTC\n"
                "- runs (runs.csv): 10 runs, seeds 1500-1504\n")  # fmt: skip
    assert index.folder_earlier_seeds(results / FOLDER.name) >= set(range(1500, 1505))
    problems = index.evidence_problems(results)
    assert any("[1500, 1501, 1502, 1503, 1504] were used by an earlier attempt" in p for p in problems), problems
    assert any("verdict is 'supported', rebuilt from per_run.csv 'not judged'" in p for p in problems)


def test_exploratory_seeds_reused_are_no_problem() -> None:
    """Seeds outside every confirmatory block (attempts 1-3's 0-4, reused knowingly) do not count:
    bn_dropout_cpu's last attempt ran seeds 0-12 after earlier ones ran 0-4, and its folder passes."""
    folder = REPO / "results" / "bn_dropout_cpu"
    assert set(range(5)) <= index.folder_earlier_seeds(folder)
    from normbench.analysis.findings.verify import verify_folder

    assert verify_folder(folder, earlier_seeds=index.folder_earlier_seeds(folder)) == []


def test_runs_summary_and_the_runs_line_read_back() -> None:
    rows = [{"seed": str(s), "status": st} for s, st in ((0, "finished"), (1, "finished"), (3, "diverged"))]
    line = attempt_record.runs_summary(rows)
    assert line == "3 runs, seeds 0-1, 3, 1 diverged"
    found = attempt_record.RUNS_LINE.search(f"- runs (runs.csv): {line}")
    assert found is not None and found.group(1) == "3" and found.group(2) == "0-1, 3"
    assert attempt_record.same_commit("7df5e7f", "7df5e7fa23eca7562b") and not attempt_record.same_commit("", "")


def test_the_command_exits_1_with_one_line_for_an_edited_entry(
    results: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``index --check`` end to end: the clean copy passes (0), the edited tally fails (1) with its line."""
    monkeypatch.setattr(index, "RESULTS", results)
    (results / "README.md").write_text(index.build(results)[0])
    index.write_all(results)
    assert index.main(["--check"]) == 0, capsys.readouterr().err
    history = results / FOLDER.name / "HISTORY.md"
    why = "\n- what changed and why: the confirmatory"
    edit(history, f"- verdicts: claims: supported 2; setup checks: passed 1{why}",
         f"- verdicts: claims: supported 1, opposite 1; setup checks: passed 1{why}")  # fmt: skip
    assert index.main(["--check"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "verdicts 'claims: supported 1, opposite 1; setup checks: passed 1'" in err[0]


def test_a_run_without_its_entry_is_a_problem(results: Path) -> None:
    """RUN.txt names a run (commit 1234567) that no attempt records: the last entry (7df5e7f) is not
    compared with files it did not write, and the missing entry is one problem naming the command."""
    edit(results / FOLDER.name / "RUN.txt", "commit: 7df5e7f\n", "commit: 1234567\n")
    edit_table(results / FOLDER.name / "per_run.csv", lambda row: row.update({"commit": "1234567" + "0" * 33}))
    problems = index.record_problems(results)
    assert len(problems) == 1 and "(commit 1234567) has no attempt in HISTORY.md after attempt 4" in problems[0]
    assert "normbench-reports history results/bn_saturation_cpu" in problems[0]
