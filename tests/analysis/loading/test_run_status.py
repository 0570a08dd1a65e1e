"""A run folder is evidence only when its run ended finished or diverged (issue 59, item 1, the
``status`` honoured for folders as for tables): a killed, interrupted or failed run's metrics stop
where it stopped, so `load_local_runs` sets it aside with a warning naming it and its status
(``unfinished=True``, the leaderboard's and the dashboard's reading, keeps it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normbench.analysis.loading.runs import load_local_runs
from normbench.base.errors import ConfigError
from tests.test_figures import write_run

ROWS = [{"step": 10, "val/acc": 0.5}, {"step": 20, "val/acc": 0.6}]


def sweep(root: Path, statuses: list[str | None]) -> Path:
    """One job per status (None: no summary.json, as a job killed with SIGKILL leaves it)."""
    for job, status in enumerate(statuses):
        d = write_run(root, job, {"norm": {"name": "bn"}, "seed": job}, ROWS, {"step": 20})
        if status is None:
            (d / "summary.json").unlink()
        else:
            (d / "summary.json").write_text(json.dumps({"status": status, "step": 20}))
    return root


@pytest.mark.parametrize("status", ["failed", "interrupted", "running", None])
def test_a_run_that_did_not_end_is_set_aside_with_a_warning(tmp_path: Path, capsys, status: str | None) -> None:
    root = sweep(tmp_path / "sweep", ["finished", "diverged", status])
    runs = load_local_runs([root])
    assert sorted(r.status for r in runs) == ["diverged", "finished"]
    err = capsys.readouterr().err
    shown = status or "failed"
    assert f"{root / '2'}: not used: status {shown}" in err and "resume it (resume=true) or rerun it" in err
    assert sorted(r.status for r in load_local_runs([root], unfinished=True)) == sorted(["finished", "diverged", shown])


def test_a_sweep_of_killed_runs_only_is_one_line(tmp_path: Path) -> None:
    root = sweep(tmp_path / "sweep", [None, "interrupted"])
    with pytest.raises(ConfigError) as err:
        load_local_runs([root])
    message = str(err.value)
    assert "\n" not in message and "no usable runs (2 found: status failed" in message
