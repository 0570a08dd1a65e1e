"""scripts/results_index.py: the index is up to date, and a rule changed after its runs fails the check."""

from __future__ import annotations

import csv
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import normbench.rules as rules
from normbench.analysis.claims import CSV_FIELDS

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "results_index.py"


def load_script():
    spec = importlib.util.spec_from_file_location("results_index", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
def test_the_committed_index_is_current_and_no_rule_changed_after_its_runs() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def write_claims(folder: Path, rules_hash: str) -> None:
    folder.mkdir(parents=True)
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
    index = load_script()
    monkeypatch.setattr(index, "rules_hash", rules.rules_hash)
    results = tmp_path / "results"
    write_claims(results / "powernorm_stats_cpu", rules.rules_hash("powernorm_stats_cpu"))
    text, problems = index.build(results)
    assert problems == [] and "ratio 2 [1.5, 2.5]" in text and "**supported**" in text
    # the rule moved after the runs: a margin made stricter, a direction flipped — any change counts
    path = rules_dir / "powernorm_stats.yaml"
    path.write_text(path.read_text().replace("relation: greater", "relation: less", 1))
    text, problems = index.build(results)
    assert len(problems) == 1 and "powernorm_stats_cpu" in problems[0] and "rerun" in problems[0]
    assert "STALE" in text


def test_a_folder_judged_before_the_rules_is_listed_as_awaiting_its_rerun(tmp_path: Path) -> None:
    index = load_script()
    folder = tmp_path / "results" / "ln_axes_cpu"
    folder.mkdir(parents=True)
    (folder / "claims.csv").write_text("figure,claim,paper,measured,verdict\nln_axes,c,p,m,holds\n")
    text, problems = index.build(tmp_path / "results")
    assert problems == [] and "Awaiting a rerun" in text and "holds" not in text
