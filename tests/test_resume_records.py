"""A run's records across resumes (issue 15.6): ``metrics.jsonl`` is only appended to or cut back
to the checkpoint's offset, also past a segment that ran without the local sink; a refused job
leaves Hydra's records of the run as they were; wall time adds up over segments; a run that left
no checkpoint is started over with its records kept in ``restarts/``; a requeued SLURM job
resumes only from a verified checkpoint."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from normbench.resume.checkpoint import CheckpointConfig, list_checkpoints
from normbench.resume.checkpointer import Checkpointer
from tests.conftest import needs_slurm_extra, run_cli
from tests.faults import fault
from tests.test_reliability import SMALL, metrics, popen_cli, wait_for
from tests.test_validate import run_cli_inprocess


def newest_step(run_dir: Path) -> int:
    return list_checkpoints(run_dir)[0][0]


def stop_when(run_dir: Path, args: tuple[str, ...], ready: Any) -> None:
    """`SMALL` + ``args`` in ``run_dir``, sent SIGTERM once ``ready()``; it stops with exit 143."""
    proc = popen_cli(*SMALL, *args, f"hydra.run.dir={run_dir}")
    end = time.monotonic() + 300
    while not ready():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < end
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-3000:]


@pytest.fixture(scope="module")
def segments(tmp_path_factory, reference) -> dict[str, Any]:
    """The reference run in three segments: (1) local files and W&B, stopped by SIGTERM;
    (2) resumed with neither sink, stopped again; (3) resumed with both, to the end."""
    run_dir = tmp_path_factory.mktemp("segments") / "run"
    first = run_dir / "checkpoints" / "step-00000003.pt.sha256"
    stop_when(run_dir, (), first.exists)
    s1 = newest_step(run_dir)
    seg1 = json.loads((run_dir / "summary.json").read_text())
    w1 = torch.load(list_checkpoints(run_dir)[0][1], weights_only=True).get("wall_time_s")
    quiet = ("resume=true", "logger.local=false", "logger.wandb=false")
    stop_when(run_dir, quiet, lambda: newest_step(run_dir) > s1)
    s2 = newest_step(run_dir)
    w2 = torch.load(list_checkpoints(run_dir)[0][1], weights_only=True).get("wall_time_s")
    t0 = time.monotonic()
    last = run_cli(*SMALL, "resume=true", f"hydra.run.dir={run_dir}")
    t3 = time.monotonic() - t0
    assert last.returncode == 0, last.stderr[-3000:]
    return {"reference": reference, "run": run_dir, "s1": s1, "s2": s2, "seg1": seg1, "w1": w1, "w2": w2, "t3": t3}


@pytest.mark.e2e
@fault("resume with logger.local=false in between", "metrics.jsonl cut back to the offset, never rewritten", "kept")
def test_a_segment_without_local_files_loses_no_earlier_rows(segments) -> None:
    s1, s2 = segments["s1"], segments["s2"]
    assert 3 <= s1 < s2 < 16
    expected = [row for row in metrics(segments["reference"]) if row["step"] <= s1 or row["step"] > s2]
    assert metrics(segments["run"]) == expected  # segment 1's rows kept, segment 2's never logged, bit for bit
    summary = json.loads((segments["run"] / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 16
    assert summary["wandb_run_id"] == segments["seg1"]["wandb_run_id"]  # the same W&B run, past segment 2


@pytest.mark.e2e
@fault("a run resumed twice", "wall_time_s adds up every segment's time", "result")
def test_wall_time_adds_up_over_segments(segments) -> None:
    w1, w2 = segments["w1"], segments["w2"]
    assert w1 is not None and w2 is not None, "the checkpoints hold no wall time"
    assert 0 < w1 < w2  # segment 2 added its time to segment 1's
    total = json.loads((segments["run"] / "summary.json").read_text())["wall_time_s"]
    assert w2 < total < w2 + segments["t3"]  # and segment 3 its own (less than its process took)


@pytest.mark.e2e
def test_the_training_clock_adds_up_over_segments_and_never_runs_back(segments) -> None:
    """``train_time_s`` (checkpoints, summary) and ``perf/train_s`` (every row): training-step time
    only, carried over each resume: below the wall time, non-decreasing along the rows."""
    run_dir = segments["run"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 0 < summary["train_time_s"] < summary["wall_time_s"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    clock = [(r["step"], r["perf/train_s"]) for r in rows]
    assert len(clock) == len(rows)  # on every row
    assert all(b >= a for (_, a), (_, b) in zip(clock, clock[1:]))
    after_resume = [t for step, t in clock if step > segments["s2"]]
    before = [t for step, t in clock if step <= segments["s1"]]
    assert after_resume and before and min(after_resume) > max(before)  # segment 3 started from the checkpoint's clock
    assert summary["train_time_s"] == pytest.approx(clock[-1][1], rel=0.5)


@fault("a resumed sweep with another norm", "refused before any job; the jobs' records kept", "kept")
def test_a_refused_resume_of_a_sweep_keeps_the_runs_records(tmp_path, monkeypatch, capsys) -> None:
    sweep = tmp_path / "sweep"
    base = ("-m", *SMALL, "max_steps=2", "logger=local", f"hydra.sweep.dir={sweep}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)
    assert code == 0, stderr
    job = sweep / "0"
    before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base, "norm=gn", "resume=true")
    assert code == 2  # the sweep is refused before any job: its job 0 would be another run
    assert stderr.count("normbench: error: resume=true: job 0 in") == 1 and "norm=gn" in stderr
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before
    assert "norm=gn" not in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
    with open(sweep / "sweep_summary.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["status"] == "finished" and "norm=gn" not in row["overrides"]


@pytest.mark.e2e
@fault("a run killed before its first checkpoint, started again", "starts over; old records in restarts/1", "kept")
def test_a_run_that_left_no_checkpoint_starts_over_and_keeps_its_records(tmp_path, reference) -> None:
    run_dir = tmp_path / "run"
    args = (*SMALL, "checkpoint.every_n_steps=0", f"hydra.run.dir={run_dir}")  # the first checkpoint: step 8
    proc = popen_cli(*args)
    wait_for(run_dir / "metrics.jsonl", proc)
    while b"train/batch_loss" not in (run_dir / "metrics.jsonl").read_bytes():
        assert proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not list_checkpoints(run_dir)
    killed = (run_dir / "metrics.jsonl").read_bytes()
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"starting over, its records moved to {run_dir / 'restarts' / '1'}" in again.stderr
    assert (run_dir / "restarts" / "1" / "metrics.jsonl").read_bytes() == killed
    assert metrics(run_dir) == metrics(reference)  # a whole run, as if the first had not been


def test_a_result_is_never_started_over(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    base = (*SMALL, "max_steps=2", "logger=local", "checkpoint.enabled=false", f"hydra.run.dir={out}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)
    assert code == 0, stderr
    summary = (out / "summary.json").read_bytes()
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)  # no checkpoint, but a finished run
    assert code == 2 and "already holds a run" in stderr
    assert (out / "summary.json").read_bytes() == summary and not (out / "restarts").exists()


# ---------------------------------------------------------------------------------------------
# A requeued SLURM job


def test_a_requeued_job_resumes_only_from_a_verified_checkpoint(tmp_path) -> None:
    from hydra_plugins.normbench_launcher.launcher import requeue_overrides

    overrides = ["norm=gn", "resume=false", "seed=1"]
    assert requeue_overrides(overrides, None) == overrides  # Hydra had not set the job up
    assert requeue_overrides(overrides, tmp_path) == overrides  # preempted before its first checkpoint
    path = Checkpointer(tmp_path, CheckpointConfig()).write({"format": 1, "step": 3, "config": {}})
    data = bytearray(path.read_bytes())
    data[-10] ^= 1
    path.write_bytes(bytes(data))
    assert requeue_overrides(overrides, tmp_path) == overrides  # one that fails its checksum does not count
    Checkpointer(tmp_path, CheckpointConfig()).write({"format": 1, "step": 6, "config": {}})
    assert requeue_overrides(overrides, tmp_path) == ["norm=gn", "seed=1", "resume=true"]


@pytest.mark.e2e
@pytest.mark.slow
@needs_slurm_extra
@fault("a SLURM job preempted before its first checkpoint", "requeued to start over; it finishes", "result")
def test_a_job_preempted_before_its_first_checkpoint_starts_over(tmp_path, reference) -> None:
    sweep = tmp_path / "sweep"
    args = ("-m", *SMALL, "checkpoint.every_n_steps=0", "hydra/launcher=submitit_local_resume")
    proc = popen_cli(*args, f"hydra.sweep.dir={sweep}")
    wait_for(sweep / "0" / "metrics.jsonl", proc)
    while b"train/batch_loss" not in (sweep / "0" / "metrics.jsonl").read_bytes():
        time.sleep(0.01)
    job_pids = subprocess.run(
        ["pgrep", "-f", f"submitit.core._submit {sweep}"], capture_output=True, text=True
    ).stdout.split()
    assert len(job_pids) == 1
    os.kill(int(job_pids[0]), signal.SIGUSR2)
    assert proc.wait(timeout=600) == 0, proc.communicate()[1][-3000:]
    assert "Requeued job" in (sweep / "0" / "cli.log").read_text()
    assert metrics(sweep / "0") == metrics(reference)
    assert json.loads((sweep / "0" / "restarts" / "1" / "summary.json").read_text())["status"] == "interrupted"
    with open(sweep / "sweep_summary.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["status"] == "finished" and "resume=true" not in row["overrides"]
