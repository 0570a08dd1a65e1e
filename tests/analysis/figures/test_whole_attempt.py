"""normbench-figures judges one whole attempt of its preset (issue 59, the second red team): a
confirmatory table read with ``--pilot``, a run the table says finished short of the preset's
length, a run whose Hydra overrides name another experiment than its recorded rules, and a sweep
with one run left out (its arm short of a seed) are each refused in one line; the clean input is
judged. Each clean input is the committed table or runs written here."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest
import yaml

from normbench.analysis.figures import figures_cli
from normbench.rules import rules_hash
from tests.analysis.figures.test_unbent_evidence import FOLDER, said, saturation_runs
from tests.conftest import REPO


def committed() -> list[list[str]]:
    with open(FOLDER / "per_run.csv", newline="") as f:
        return list(csv.reader(f))


def err_lines(capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> list[str]:
    return [line for line in said(capsys, caplog)[1].splitlines() if "error:" in line]


def test_a_confirmatory_table_is_not_read_as_a_pilot(tmp_path: Path, capsys, caplog) -> None:
    """The committed confirmatory table (seeds 1500-1504, the rules' cpu block) with --pilot: refused
    naming the seeds, nothing written; the committed pilot's seeds (100-102, the rules' pilot seeds)
    pass the same check."""
    seeds = sorted({int(r[1]) for r in committed()[1:]})
    args = ["bn_saturation_cpu", "--pilot", "--per-run"]
    assert figures_cli.main([*args, str(FOLDER / "per_run.csv"), "--out", str(tmp_path / "a")]) == 2
    err = err_lines(capsys, caplog)
    assert len(err) == 1 and f"seeds {seeds} are in the rules' cpu confirmatory seed block" in err[0]
    assert not (tmp_path / "a" / "claims.csv").exists()
    with open(FOLDER / "pilot" / "per_run.csv", newline="") as f:
        pilot = [{"seed": int(r["seed"]), "status": r["status"]} for r in csv.DictReader(f)]
    rules = figures_cli.load_rules("bn_saturation_cpu")
    assert rules is not None and {r["seed"] for r in pilot} == set(rules.pilot_seeds)
    figures_cli.check_pilot_seeds(rules, pilot, "pilot/per_run.csv")  # the pilot's own seeds pass


def test_a_run_finished_short_of_the_presets_length_is_refused(tmp_path: Path, capsys, caplog) -> None:
    """Every run's final:step set to a quarter of conf/experiment/bn_saturation_cpu.yaml's max_steps."""
    steps = yaml.safe_load((REPO / "conf/experiment/bn_saturation_cpu.yaml").read_text())["max_steps"]
    rows = committed()
    at = rows[0].index("final:step")
    assert {int(r[at]) for r in rows[1:]} == {steps}
    for row in rows[1:]:
        row[at] = str(steps // 4)
    with open(tmp_path / "p.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    assert figures_cli.main(["bn_saturation_cpu", "--per-run", str(tmp_path / "p.csv"), "--out", str(tmp_path)]) == 2
    err = err_lines(capsys, caplog)
    assert len(err) == 1 and f"has status 'finished' but final:step {steps // 4}, where" in err[0]
    assert f"end at {steps}" in err[0]


def record_rules(runs: Path) -> None:
    for job in (p for p in runs.iterdir() if p.is_dir()):
        summary = json.loads((job / "summary.json").read_text())
        rules = {"preset": "bn_saturation_cpu", "hash": rules_hash("bn_saturation_cpu")}
        (job / "summary.json").write_text(json.dumps({**summary, "rules": rules}))
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["experiment=bn_saturation_cpu", *overrides]))


def test_a_run_launched_as_another_experiment_is_refused(tmp_path: Path, capsys, caplog) -> None:
    runs = saturation_runs(tmp_path / "runs")
    record_rules(runs)
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(tmp_path / "a")]) in (0, 1)
    said(capsys, caplog)
    path = runs / "2" / ".hydra" / "overrides.yaml"
    path.write_text(path.read_text().replace("experiment=bn_saturation_cpu", "experiment=gn_batch_size_cpu"))
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(tmp_path / "b")]) == 2
    err = err_lines(capsys, caplog)
    assert len(err) == 1 and f"{runs / '2'} was launched as experiment=gn_batch_size_cpu" in err[0]


def test_a_sweep_with_a_run_left_out_is_not_judged(tmp_path: Path, capsys, caplog) -> None:
    """Job 3 (seed 3 of the standard arm) killed before its summary: the loader leaves it out in a
    warning naming it, and the claims are not judged on an arm short of a seed: one line naming the
    seed, nothing written. The clean sweep is judged."""
    caplog.set_level(logging.WARNING)
    runs = saturation_runs(tmp_path / "runs")
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(tmp_path / "a")]) in (0, 1)
    said(capsys, caplog)
    (runs / "3" / "summary.json").unlink()
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(tmp_path / "b")]) == 2
    out, err = said(capsys, caplog)
    assert str(runs / "3") in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "has seeds [3] that arm 'standard' lacks" in errors[0]
    assert not (tmp_path / "b" / "claims.csv").exists()
