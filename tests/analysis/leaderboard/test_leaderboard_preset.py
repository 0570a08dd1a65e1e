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
