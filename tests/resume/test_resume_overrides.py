"""``normbench resume=true hydra.run.dir=R`` alone resumes a run started with overrides (issue 60):
the run's recorded overrides come first, the command line's win, and a setting that cannot change a
result (threads) may differ."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from normbench.base.errors import ConfigError
from normbench.cli.recorded import override_key, recorded_overrides, with_recorded_overrides
from tests.faults import fault
from tests.test_edges import LOCAL, handlers_kept, send_after_checkpoint  # noqa: F401
from tests.test_validate import run_cli_inprocess


def _record(run_dir: Path, overrides: list[str], trained: list[str] | None = None) -> None:
    (run_dir / ".hydra" / "trained").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if trained is not None:
        (run_dir / ".hydra" / "trained" / "overrides.yaml").write_text(yaml.safe_dump(trained))


def test_override_keys() -> None:
    assert [override_key(a) for a in ("norm=gn", "+diagnostics.x.y=1", "~logger", "++a.b=2")] == [
        "norm", "diagnostics.x.y", "logger", "a.b"]  # fmt: skip


def test_recorded_overrides_come_first_and_the_command_line_wins(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _record(run_dir, ["experiment=quickstart", "norm=gn", "hardware.num_threads=1", "resume=false",
                      "logger=local", "logger.local=false", "checkpoint.every_n_steps=3"])  # fmt: skip
    args, taken = with_recorded_overrides(["resume=true", f"hydra.run.dir={run_dir}", "hardware.num_threads=2"])
    assert taken == ["experiment=quickstart", "norm=gn"]  # how a segment ran (logger, checkpoints) is not taken
    assert args == ["experiment=quickstart", "norm=gn", "resume=true", f"hydra.run.dir={run_dir}",
                    "hardware.num_threads=2"]  # fmt: skip


def test_the_accepted_runs_copy_is_read_first(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _record(run_dir, ["norm=bn"], trained=["norm=gn"])  # a refused job's Hydra rewrote overrides.yaml
    assert recorded_overrides(run_dir) == ["norm=gn"]


@pytest.mark.parametrize(
    "args",
    [["norm=gn"], ["resume=false", "hydra.run.dir=R"], ["-m", "resume=true", "hydra.run.dir=R"], ["resume=true"]],
    ids=["no-resume", "resume-false", "sweep", "no-run-dir"],
)
def test_nothing_is_added_outside_a_single_runs_resume(tmp_path: Path, args: list[str]) -> None:
    run_dir = tmp_path / "R"
    _record(run_dir, ["norm=gn"])
    args = [a.replace("=R", f"={run_dir}") for a in args]
    assert with_recorded_overrides(args) == (args, [])


def test_a_damaged_record_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _record(run_dir, [])
    (run_dir / ".hydra" / "overrides.yaml").write_text("{not: [a list")
    with pytest.raises(ConfigError) as e:
        with_recorded_overrides(["resume=true", f"hydra.run.dir={run_dir}"])
    assert "\n" not in str(e.value) and "overrides.yaml cannot be read" in str(e.value)


@pytest.mark.slow
def test_resume_alone_continues_a_run_started_with_overrides(tmp_path, monkeypatch, capsys, handlers_kept) -> None:  # noqa: F811
    """Started with overrides and stopped; resumed with only resume=true, its folder and another thread count."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 cores for a second thread count")
    run_dir = tmp_path / "run"
    with monkeypatch.context() as m:
        send_after_checkpoint(m, signal.SIGTERM, 3)
        code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, "norm=gn", f"hydra.run.dir={run_dir}")
    assert code == 128 + signal.SIGTERM, stderr
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, "resume=true", f"hydra.run.dir={run_dir}",
                                             "hardware.num_threads=2")  # fmt: skip
    assert code == 0, stderr
    assert "resuming with the run's recorded overrides: experiment=quickstart" in stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 8
    assert [s["num_threads"] for s in summary["segments"]] == [1, 2]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["norm"]["name"] == "gn"


@fault("resume=true of a run that ended, finished or diverged (issue 59)",
       "one line saying its results stand, exit 0; nothing added to its folder (no segment, no second W&B "
       "run)",
       "kept")  # fmt: skip
@pytest.mark.parametrize("status", ["finished", "diverged"])
def test_resuming_a_run_that_ended_does_nothing(tmp_path, monkeypatch, capsys, status: str) -> None:
    """Issue 59: resume=true of a finished run added a segment and a second W&B run and doubled wall_time_s."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    summary = {"status": status, "step": 62, "wall_time_s": 20.0, "segments": [{"from_step": 0}]}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, "resume=true", f"hydra.run.dir={run_dir}")
    assert code == 0 and stderr == ""
    assert stdout.strip() == (f"[normbench] {run_dir} holds a run that {status} at step 62: nothing to resume "
                              "(its results stand; start a new run in another hydra.run.dir)")  # fmt: skip
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before  # no segment, no .hydra/, no W&B run
