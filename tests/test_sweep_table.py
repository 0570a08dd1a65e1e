"""The sweep summary's terminal table (`normbench.cli.sweep.terminal_table`), issue 59: a continued
sweep's jobs run now record ``resume=True`` and those kept do not; ``swept`` shows the settings
that differ, never how a job ran."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from normbench.cli.sweep import collect, terminal_table
from tests.faults import fault

COMMON = ["experiment=quickstart", "logger=local"]


def job(sweep: Path, name: str, overrides: list[str]) -> None:
    (sweep / name / ".hydra").mkdir(parents=True)
    (sweep / name / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (sweep / name / "summary.json").write_text(json.dumps({"status": "finished", "val/acc": 0.5}))


@fault("a continued sweep (resume=true; issue 59)", "its table's swept column shows the settings, not resume=True",
       "result")  # fmt: skip
def test_a_continued_sweeps_table_shows_no_resume_as_swept(tmp_path: Path) -> None:
    job(tmp_path, "0", [*COMMON, "seed=0"])  # kept: ran before the sweep was continued
    job(tmp_path, "1", [*COMMON, "seed=1", "resume=True"])  # run again by the continued sweep
    job(tmp_path, "2", [*COMMON, "seed=2", "hardware.num_threads=2"])
    rows = collect(tmp_path)
    shown, columns = terminal_table(rows)
    assert [r["swept"] for r in shown] == ["seed=0", "seed=1", "seed=2"]
    assert "swept" in columns and "resume=True" in rows[1]["overrides"]  # the CSV keeps the overrides whole


def test_a_setting_swept_beside_resume_is_shown(tmp_path: Path) -> None:
    job(tmp_path, "0", [*COMMON, "norm=bn", "resume=True"])
    job(tmp_path, "1", [*COMMON, "norm=gn", "resume=True"])
    shown, _ = terminal_table(collect(tmp_path))
    assert [r["swept"] for r in shown] == ["norm=bn", "norm=gn"]
