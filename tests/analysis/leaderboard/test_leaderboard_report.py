"""``normbench-leaderboard`` on runs of which none finished (issue 59): one line, exit 2, nothing
written (it wrote its table and an empty figure, then exited 1 with a message for preset authors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.analysis.leaderboard.leaderboard_report import main
from tests.analysis.leaderboard.test_leaderboard import write_job
from tests.faults import fault


@fault("normbench-leaderboard on runs of which none finished (issue 59)",
       "one line counting how they ended, exit 2, nothing "
       "written", "one-line")  # fmt: skip
@pytest.mark.parametrize("diverged", [False, True])
def test_no_finished_run_is_one_line_and_writes_nothing(tmp_path: Path, capsys, diverged: bool) -> None:
    root = tmp_path / "sweep"
    for seed in range(3):
        write_job(root, str(seed), norm="bn", seed=seed, error="RuntimeError: boom")
    write_job(root, "3", norm="ln", seed=0, status="diverged" if diverged else "failed")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main([str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    ended = "1 diverged, 3 failed" if diverged else "4 failed"
    assert len(err) == 1, err
    assert err[0].startswith(f"normbench-leaderboard: error: no run of {root} finished ({ended})"), err
    assert "nothing was written" in err[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no leaderboard/ folder


def test_one_finished_run_is_enough(tmp_path: Path, capsys) -> None:
    root = tmp_path / "sweep"
    write_job(root, "0", norm="bn", seed=0, error="RuntimeError: boom")
    write_job(root, "1", norm="bn", seed=1, score=0.5)
    main([str(root), "--out", str(tmp_path / "out")])  # the figure's own checks may still object: not this test's
    assert "no run of" not in capsys.readouterr().err
    assert (tmp_path / "out" / "leaderboard.csv").is_file()
