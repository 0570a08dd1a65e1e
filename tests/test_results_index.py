"""`normbench.analysis.reports.index` (``normbench-reports index``): the index is up to date, and a rule
changed after its runs fails the check; `normbench.analysis.reports.history`: every attempt on record."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

import normbench.rules as rules
from normbench.analysis.judging.claims import CSV_FIELDS
from normbench.analysis.reports import history, index
from tests.faults import fault


def test_the_committed_index_is_current_and_no_rule_changed_after_its_runs(capsys: pytest.CaptureFixture) -> None:
    """In-process (the default suite guards the committed results): ``normbench-reports index --check``."""
    assert index.main(["--check"]) == 0, capsys.readouterr().err


def write_claims(folder: Path, rules_hash: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    row = dict.fromkeys(CSV_FIELDS, "")
    row.update(id="x", figure="powernorm_fig2", claim="NLP above CV", paper="Fig. 2", verdict="supported",
               scale="reduced", rules_hash=rules_hash, a="NLP", a_centre="2", a_lo="1", a_hi="3", a_n="5",
               b="CV", b_centre="1", b_lo="0.5", b_hi="1.5", b_n="5", estimate="2", lo="1.5", hi="2.5",
               ratio="True", p="0.001", p_holm="0.002", test="welch_log")  # fmt: skip
    with open(folder / "claims.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerow(row)


def test_a_tampered_rule_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules_dir = tmp_path / "rules"
    shutil.copytree(rules.RULES_DIR, rules_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(rules, "RULES_DIR", rules_dir)
    monkeypatch.setattr(index, "rules_hash", rules.rules_hash)
    results = tmp_path / "results"
    write_claims(results / "powernorm_stats_cpu", rules.rules_hash("powernorm_stats_cpu"))
    text, problems = index.build(results)
    assert problems == [] and "NLP / CV: 2× [1.5, 2.5]" in text and "**supported**" in text
    # the rule moved after the runs: a margin made stricter, a direction flipped — any change counts
    path = rules_dir / "powernorm_stats.yaml"
    path.write_text(path.read_text().replace("relation: greater", "relation: less", 1))
    text, problems = index.build(results)
    assert len(problems) == 1 and "powernorm_stats_cpu" in problems[0] and "rerun" in problems[0]
    assert "STALE" in text


def test_a_folder_judged_before_the_rules_is_listed_as_awaiting_its_rerun(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "ln_axes_cpu"
    folder.mkdir(parents=True)
    (folder / "claims.csv").write_text("figure,claim,paper,measured,verdict\nln_axes,c,p,m,holds\n")
    text, problems = index.build(tmp_path / "results")
    assert problems == [] and "Awaiting a rerun" in text and "holds" not in text


def write_run(folder: Path, commit: str, start: str) -> None:
    text = f"preset: {folder.name}\ncommit: {commit}\nstart (UTC): {start}; wall clock: 12 min 3 s (10 runs)\n"
    (folder / "RUN.txt").write_text(text + "exit status: runs 0, figures 0\n")


def test_a_folder_whose_rules_hash_has_no_history_entry_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    folder = results / "powernorm_stats_cpu"
    write_claims(folder, rules.rules_hash("powernorm_stats_cpu"))
    write_run(folder, "abc1234", "2026-12-03 08:45:51")
    monkeypatch.setattr(index, "RESULTS", results)
    monkeypatch.setattr(index, "evidence_problems", lambda results: [])  # no per_run.csv here: see the next test
    (results / "README.md").write_text(index.build(results)[0])
    index.write_all(results)  # the forests and claims.md, as the command writes them
    assert index.main(["--check"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results/powernorm_stats_cpu" in err[0] and "HISTORY.md" in err[0]
    history.append_entry(folder, "first run under these rules")
    index.write_all(results)  # the folder's README lists its new HISTORY.md: `normbench-reports index` after `history`
    assert index.main(["--check"]) == 0, capsys.readouterr().err


@fault("claims.csv edited by hand: a verdict, an estimate, a claim row or a column (issue 59)",
       "index --check rebuilds it from per_run.csv: one line per difference naming the file and the claim",
       "one-line")  # fmt: skip
def test_the_check_reports_each_folder_whose_claims_differ_from_its_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--check`` runs `normbench.analysis.findings.verify.verify_folder` on every judged folder (not the pilots)."""
    import normbench.analysis.findings.verify as verify

    results = tmp_path / "results"
    write_claims(results / "powernorm_stats_cpu", rules.rules_hash("powernorm_stats_cpu"))
    write_claims(results / "powernorm_stats_cpu" / "pilot", rules.rules_hash("powernorm_stats_cpu"))
    seen: list[Path] = []
    monkeypatch.setattr(verify, "verify_folder", lambda folder, **kw: seen.append(folder) or ["verdict differs"])
    assert index.evidence_problems(results) == ["results/powernorm_stats_cpu: verdict differs"]
    assert seen == [results / "powernorm_stats_cpu"]


def test_history_is_append_only_and_numbers_each_attempt(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "powernorm_stats_cpu"
    write_claims(folder, "1111222233334444")
    write_run(folder, "abc1234", "2026-12-01 10:00:00")
    (folder / "runs.csv").write_text("source,seed,status\nx/0,0,finished\nx/1,1,diverged\nx/2,3,finished\n")
    first = history.append_entry(folder, "first run")
    assert "- runs (runs.csv): 3 runs, seeds 0-1, 3, 1 diverged" in first
    assert first.startswith("## Attempt 1 — rules 1111222233334444, run at abc1234 (2026-12-01 10:00:00)")
    assert "- verdicts: claims: supported 1" in first and "wall clock 12 min 3 s" in first
    before = (folder / "HISTORY.md").read_text()
    with pytest.raises(ValueError, match="on record already"):
        history.append_entry(folder, "the same run again")
    (folder / "claims.csv").unlink()
    write_claims(folder, "5555666677778888")
    write_run(folder, "def5678", "2026-12-02 11:00:00")
    history.append_entry(folder, "margin tightened after seeing the first verdicts")
    after = (folder / "HISTORY.md").read_text()
    assert after.startswith(before) and "## Attempt 2 — rules 5555666677778888, run at def5678" in after
    assert [a[:2] for a in history.attempts(folder)] == [(1, "1111222233334444"), (2, "5555666677778888")]
    for bad in ("", "two\nlines"):
        with pytest.raises(ValueError, match="--changed"):
            history.append_entry(folder, bad)


def test_history_tally_counts_claims_and_setup_checks_apart() -> None:
    rows = [{"verdict": v} for v in ("inconclusive", "supported", "failed", "inconclusive", "holds")]
    assert history.tally(rows) == "claims: supported 1, inconclusive 2, holds 1; setup checks: failed 1"


def test_history_refuses_a_folder_judged_before_the_rules(tmp_path: Path) -> None:
    folder = tmp_path / "ln_axes_cpu"
    folder.mkdir()
    (folder / "claims.csv").write_text("figure,claim,paper,measured,verdict\nln_axes,c,p,m,holds\n")
    assert history.main([str(folder), "--changed", "x"]) == 2 and not (folder / "HISTORY.md").exists()


def test_the_tally_and_the_table_come_from_the_claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "rules_hash", lambda preset: "h")
    results = tmp_path / "results"
    write_claims(results / "powernorm_stats_cpu", "h")
    with open(results / "powernorm_stats_cpu" / "claims.csv", "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writerow({**dict.fromkeys(CSV_FIELDS, ""), "id": "y", "verdict": "not judged", "test": "welch",
                         "measured": "not run in powernorm_stats_cpu (the rules judge it in: full)", "rules_hash": "h"})
        writer.writerow({**dict.fromkeys(CSV_FIELDS, ""), "id": "z", "verdict": "passed", "rules_hash": "h"})
    text, problems = index.build(results)
    assert problems == []
    assert "**2 claims of 1 presets: 1 judged** (supported **1** · opposite **0**" in text
    assert "**1 not judged** (not run at this scale 1). Setup checks (not claims): 1 passed, 0 failed." in text
    (row,) = [x for x in text.splitlines() if x.startswith("| ") and "NLP / CV" in x]
    assert "| 2 vs 1 | NLP / CV: 2× [1.5, 2.5] | **supported** |" in row
    assert "All 1 judged verdicts come from exploratory attempts" in text  # no confirmatory column: exploratory
    assert "<summary>The 1 claims not judged" in text and "**Not run at this scale: 1**" in text


def test_changed_rules_declared_as_a_planned_attempt_pass_the_check_and_mark_the_verdicts_superseded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule changed after the runs fails the check until the change is on record, before its runs,
    as a planned attempt (what changed and why); the old verdicts then read superseded, and the
    rerun's entry takes the planned attempt's number; an amended plan keeps it too."""
    rules_dir = tmp_path / "rules"
    shutil.copytree(rules.RULES_DIR, rules_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(rules, "RULES_DIR", rules_dir)
    for module in (index, history):
        monkeypatch.setattr(module, "rules_hash", rules.rules_hash)
    folder = tmp_path / "results" / "powernorm_stats_cpu"
    write_claims(folder, rules.rules_hash("powernorm_stats_cpu"))
    write_run(folder, "abc1234", "2026-12-01 10:00:00")
    history.append_entry(folder, "first run")
    with pytest.raises(ValueError, match="on record already"):  # nothing changed: nothing to plan
        history.plan_entry(folder, "nothing")
    path = rules_dir / "powernorm_stats.yaml"
    path.write_text(path.read_text().replace("relation: greater", "relation: less", 1))
    assert len(index.build(tmp_path / "results")[1]) == 1  # changed, not on record: the check fails
    planned = history.plan_entry(folder, "the relation turned, as the paper's Fig. 2 reads")
    assert planned.startswith(f"## Attempt 2 — rules {rules.rules_hash('powernorm_stats_cpu')}, planned before")
    text, problems = index.build(tmp_path / "results")
    assert problems == [] and "await their rerun" in text  # every folder superseded: said once, not per row
    assert "under the superseded rules, and exploratory" in text and "*(superseded)*" not in text
    path.write_text(path.read_text().replace("alpha: 0.05", "alpha: 0.01", 1))  # amended before any run
    assert history.plan_entry(folder, "alpha 0.01").startswith("## Attempt 2 — rules ")
    write_claims(folder, rules.rules_hash("powernorm_stats_cpu"))  # the rerun under the amended plan
    write_run(folder, "def5678", "2026-12-04 10:00:00")
    assert history.append_entry(folder, "the planned rerun").startswith("## Attempt 2 — rules ")
    assert "superseded" not in index.build(tmp_path / "results")[0]
