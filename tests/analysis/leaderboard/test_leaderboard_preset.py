"""``normbench-leaderboard --preset`` names a preset whose rules judge the rows (the second red team
of issue 59): a name with no rules (a typo) wrote the leaderboard without a verdict, rc 0; now one
line naming it and the presets that have rules, exit 2, before any run is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.leaderboard.leaderboard_report import check_preset, main


def test_a_preset_without_rules_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert load_rules("leaderboard_cpu") is not None and load_rules("nope_cpu") is None
    check_preset("leaderboard_cpu")
    out = tmp_path / "out"
    assert main([str(tmp_path / "no_runs"), "--preset", "nope_cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--preset 'nope_cpu' has no rules to judge the rows by" in err[0]
    assert "leaderboard_cpu" in err[0].split("valid choices: ")[1].split(", ")
    assert not out.exists()


def test_a_run_copied_under_a_new_seed_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """normbench-leaderboard vouches for its per-run values as normbench-figures does: a gn run's
    folder copied as a new seed (config and summary seed edited, its record, wall time included,
    the original's) is refused naming both rows; the sweep with a wall time per run is judged."""
    import json
    import shutil

    import yaml

    from tests.analysis.leaderboard.test_leaderboard_rules import leaderboard_sweep

    sweep = leaderboard_sweep(tmp_path / "sweep")
    for i, job in enumerate(sorted(p for p in sweep.iterdir() if p.is_dir())):
        summary = json.loads((job / "summary.json").read_text())
        (job / "summary.json").write_text(json.dumps({**summary, "wall_time_s": 60.0 + i / 7}))
    assert main([str(sweep), "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    gn = next(p for p in jobs if yaml.safe_load((p / "config.yaml").read_text())["norm"]["name"] == "gn")
    copy = shutil.copytree(gn, sweep / "copy")
    config = yaml.safe_load((copy / "config.yaml").read_text())
    summary = json.loads((copy / "summary.json").read_text())
    new = max(json.loads((p / "summary.json").read_text()).get("seed", 0) for p in sweep.iterdir() if p.is_dir()) + 7
    (copy / "config.yaml").write_text(yaml.safe_dump({**config, "seed": new}))
    (copy / "summary.json").write_text(json.dumps({**summary, "seed": new}))
    assert main([str(sweep), "--out", str(tmp_path / "b")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and f"({copy}) holds the same record as row" in err[0] and f"({gn})" in err[0]
