"""A sweep's job refused because another run holds its folder (issue 59): listed in the sweep
summary as ``refused`` with the reason, not as a job "killed or crashed" before its summary."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from normbench.cli.sweep import collect
from normbench.records.refusals import note_path, note_refused, refusal
from normbench.records.rundir import RunDirLock
from tests.conftest import run_cli_inprocess
from tests.faults import fault

REASON = "the run directory S/0 is in use by another normbench run (pid 1); wait for it to end"


def job_folder(sweep: Path, name: str, overrides: list[str]) -> Path:
    """A job folder as Hydra leaves it before the job runs: its overrides, no summary."""
    (sweep / name / ".hydra").mkdir(parents=True)
    (sweep / name / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return sweep / name


def test_a_refused_job_is_listed_refused_with_its_reason(tmp_path: Path) -> None:
    held = job_folder(tmp_path, "0", ["seed=0"])
    silent = job_folder(tmp_path, "1", ["seed=1"])
    note_refused(held, REASON)
    rows = {r["job"]: r for r in collect(tmp_path)}
    assert (rows["0"]["status"], rows["0"]["error"]) == ("refused", REASON)
    assert rows["1"]["status"] == "failed" and "killed or crashed" in rows["1"]["error"]  # no note: as before
    assert note_path(held) == tmp_path / ".normbench-refused" / "0.json" and not list(held.glob("*.json"))
    assert refusal(silent) is None


def test_a_later_summary_of_the_job_supersedes_the_refusal(tmp_path: Path) -> None:
    job = job_folder(tmp_path, "0", ["seed=0"])
    note_refused(job, REASON)
    (job / "summary.json").write_text(json.dumps({"status": "finished"}))
    later = time.time() + 5
    os.utime(job / "summary.json", (later, later))
    assert refusal(job) is None
    assert collect(tmp_path)[0]["status"] == "finished"


@pytest.mark.slow  # a sweep of two one-step jobs in process: ~6 s
@fault("a sweep's job whose folder another run holds (issue 59)",
       "listed 'refused' with the reason in the sweep summary (not "
       "'killed or crashed'), nothing written into the other run's folder; the sweep goes on", "result")  # fmt: skip
def test_a_sweep_job_whose_folder_another_run_holds_is_refused(tmp_path, monkeypatch, capsys) -> None:
    sweep = tmp_path / "sweep"
    lock = RunDirLock(sweep / "0")  # another run holds job 0's folder
    lock.acquire()
    try:
        monkeypatch.chdir(tmp_path)
        code, out, err = run_cli_inprocess(monkeypatch, capsys,
            "-m", "experiment=quickstart", "dataset.num_train=64", "dataset.num_test=32", "batch_size=16",
            "hardware.num_threads=1", "logger=local", "max_steps=1", "seed=0,1", f"hydra.sweep.dir={sweep}",
        )  # fmt: skip
    finally:
        lock.release()
    assert code == 1 and "(1 refused)" in err, err[-2000:]
    with open(sweep / "sweep_summary.csv") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    assert rows["0"]["status"] == "refused"
    assert f"{sweep / '0'} is in use by another normbench run" in rows["0"]["error"]
    assert rows["1"]["status"] == "finished"
    assert not (sweep / "0" / "summary.json").exists()  # nothing written into the other run's folder
