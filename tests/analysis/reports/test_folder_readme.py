"""`normbench.analysis.reports.folder_readme`: a preset folder's README.md drawn from its files (issue 56,
item 8), its design in words from the rules' ``about`` (outside the rules hash), and kept current by
``normbench-reports index --check``."""

from __future__ import annotations

import csv
import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from normbench.analysis.judging import rules_schema
from normbench.analysis.reports import folder_readme, index
from normbench.analysis.wording.present import signed
from normbench.rules import file_hash, rules_path

PRESET = "bn_saturation_cpu"
"""A small committed folder: two judged claims, a learning bound, a setup check, one figure."""


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of the committed folder, alone in a results tree of its own."""
    shutil.copytree(index.RESULTS / PRESET, tmp_path / "results" / PRESET)
    return tmp_path / "results"


def readme(results: Path) -> str:
    return index.folder_readmes(results)[results / PRESET / "README.md"]


def test_the_committed_readme_is_the_one_its_files_draw() -> None:
    drawn = index.folder_readmes(index.RESULTS)
    assert index.RESULTS / PRESET / "README.md" in drawn
    assert (index.RESULTS / PRESET / "README.md").read_text() == drawn[index.RESULTS / PRESET / "README.md"]


def test_what_ran_is_run_txt_as_written_and_the_runs_counted_from_runs_csv(results: Path) -> None:
    text = readme(results)
    assert (results / PRESET / "RUN.txt").read_text().rstrip() in text
    with open(results / PRESET / "runs.csv", newline="") as f:
        statuses = [r["status"] for r in csv.DictReader(f)]
    assert f"{len(statuses)} runs: {statuses.count('finished')} finished" in text


def test_each_judged_claim_reads_as_on_the_findings_page(results: Path) -> None:
    text = readme(results)
    current, _ = index.judged_folders(results)
    (_, claims), = index.annotated(current)
    judged = [r for r in claims if r["verdict"] in ("supported", "opposite", "equivalent", "different", "inconclusive")]
    assert judged
    for row in judged:
        assert signed(row, row["unit"]).text() in text


def test_a_changed_file_makes_the_committed_readme_stale(results: Path) -> None:
    (results / PRESET / "README.md").write_text(readme(results))
    assert not [p for p in index.stale_files(results) if "README.md" in p]
    run = results / PRESET / "RUN.txt"
    run.write_text(run.read_text().replace("wall clock:", "wall clock (edited):"))
    stale = [p for p in index.stale_files(results) if "README.md" in p]
    assert stale == [f"results/{PRESET}/README.md is out of date: run {index.COMMAND}"]


def test_figures_and_files_are_listed_only_where_the_folder_has_them(results: Path) -> None:
    folder = results / PRESET
    text = readme(results)
    for png in folder.glob("*.png"):
        assert (f"![{png.stem}]({png.name})" in text) == (png.stem != "forest")
    assert "[`HISTORY.md`](HISTORY.md)" in text
    (folder / "HISTORY.md").unlink()
    assert "HISTORY.md" not in readme(results)


def test_the_rules_about_is_shown_and_stays_out_of_the_rules_hash(tmp_path: Path) -> None:
    rules = rules_schema.load_rules(PRESET)
    assert rules is not None and rules.about
    assert rules.about.strip() in index.folder_readmes(index.RESULTS)[index.RESULTS / PRESET / "README.md"]
    data = yaml.safe_load(rules_path(PRESET).read_text())
    edited = tmp_path / "rules.yaml"
    edited.write_text(yaml.safe_dump({**data, "about": "another design note"}))
    same = tmp_path / "same.yaml"
    same.write_text(yaml.safe_dump(data))
    assert file_hash(edited) == file_hash(same)
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({**data, "alpha": 0.01}))
    assert file_hash(changed) != file_hash(same)  # a key that judges does change it


def test_a_preset_without_about_points_to_its_design_files(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = rules_schema.load_rules(PRESET)
    monkeypatch.setattr(folder_readme, "load_rules", lambda preset: dataclasses.replace(rules, about=""))
    text = readme(results)
    assert f"`conf/experiment/{PRESET}.yaml` (what runs)" in text
    assert rules.about.strip() not in text


def test_an_about_that_is_not_text_is_one_line() -> None:
    data = yaml.safe_load(rules_path(PRESET).read_text())
    with pytest.raises(rules_schema.ConfigError, match="about must be a non-empty text") as err:
        rules_schema.parse_rules({**data, "about": ["a", "list"]}, PRESET, "h")
    assert "\n" not in str(err.value)
