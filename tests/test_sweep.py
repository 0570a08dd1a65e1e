"""A sweep as one unit (issue 24): one writer per sweep directory, a summary of every job whatever
stopped the sweep, an exit status that says whether every job ended with a result, and
``resume=true`` continuing an interrupted sweep to its end."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
from pathlib import Path

import pytest

from normbench.cli import sweep
from tests.faults import fault
from tests.test_reliability import SMALL, metrics, popen_cli, wait_for
from tests.test_validate import run_cli_inprocess

SWEEP = (*SMALL, "logger=local", "max_steps=4")


def rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "sweep_summary.csv") as f:
        return list(csv.DictReader(f))


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_the_planned_jobs_are_hydras_product_in_hydras_order() -> None:
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {"_target_": sweep.BASIC_SWEEPER, "params": {"norm": "bn,ln", "seed": "range(2)"}},
                "overrides": {"task": ["lr=0.1", "epochs=1,2"]},
            }
        }
    )
    assert sweep.planned_jobs(config) == [
        ["norm=bn", "seed=0", "lr=0.1", "epochs=1"],
        ["norm=bn", "seed=0", "lr=0.1", "epochs=2"],
        ["norm=bn", "seed=1", "lr=0.1", "epochs=1"],
        ["norm=bn", "seed=1", "lr=0.1", "epochs=2"],
        ["norm=ln", "seed=0", "lr=0.1", "epochs=1"],
        ["norm=ln", "seed=0", "lr=0.1", "epochs=2"],
        ["norm=ln", "seed=1", "lr=0.1", "epochs=1"],
        ["norm=ln", "seed=1", "lr=0.1", "epochs=2"],
    ]
    config.hydra.sweeper._target_ = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    assert sweep.planned_jobs(config) is None  # trials are not known in advance


@fault("a second sweep into a sweep directory in use", "one line naming the holder; the first untouched", "one-line")
def test_a_second_sweep_into_a_directory_in_use_is_refused(tmp_path, monkeypatch, capsys) -> None:
    sweep_dir = tmp_path / "sweep"
    holder = sweep.SweepLock(sweep_dir)  # another sweep's lock (flock: a second descriptor conflicts)
    holder.acquire()
    try:
        before = files(sweep_dir)
        code, _, stderr = run_cli_inprocess(
            monkeypatch, capsys, "-m", *SWEEP, "seed=0,1", f"hydra.sweep.dir={sweep_dir}"
        )
    finally:
        holder.release()
    assert code == 2
    assert error_lines(stderr) == [
        f"normbench: error: the sweep directory {sweep_dir} is in use by another normbench sweep (pid {os.getpid()}); "
        "wait for it to end, or pass another hydra.sweep.dir"
    ]
    assert files(sweep_dir) == {k: v for k, v in before.items() if k != sweep.SWEEP_LOCK_NAME}
    assert not list(sweep_dir.iterdir())  # no multirun.yaml, no job folder


@fault("a job of a sweep that crashes (not a config error)", "failed with its one line; the rest run; exit 1", "result")
def test_a_crashing_job_fails_alone_and_the_summary_lists_every_job(tmp_path, monkeypatch, capsys) -> None:
    import normbench.run.loop.train

    real_run = normbench.run.loop.train.run

    def crash_on_seed_1(cfg, run_dir=None):
        if cfg.seed == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore lines")
        return real_run(cfg, run_dir)

    monkeypatch.setattr(normbench.run.loop.train, "run", crash_on_seed_1)
    sweep_dir = tmp_path / "sweep"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *SWEEP, "seed=0,1,2", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 1
    table = rows(sweep_dir)
    assert [r["status"] for r in table] == ["finished", "failed", "finished"]
    assert table[1]["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert {r["ran"] for r in table} == {"this sweep"}
    assert "Traceback" not in stderr and "more lines" in (sweep_dir / "1" / "traceback.txt").read_text()
    assert error_lines(stderr) == [
        "normbench: error: job 1 of the sweep failed: RuntimeError: CUDA error: an illegal memory access "
        "was encountered",
        f"normbench: error: 1 of 3 jobs of the sweep did not end with a result (1 failed); see "
        f"{sweep_dir / 'sweep_summary.csv'}; the same command with resume=true continues the sweep",
    ]


@fault("a sweep into a directory that holds an earlier sweep", "one line: resume=true or another folder; kept", "kept")
def test_a_sweep_into_an_earlier_sweeps_directory_is_refused_and_keeps_it(tmp_path, monkeypatch, capsys) -> None:
    sweep_dir = tmp_path / "sweep"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, "-m", *SWEEP, "lr=0.05,-1", f"hydra.sweep.dir={sweep_dir}")
    assert code == 1, stderr  # one job failed (a bad value)
    before = files(sweep_dir)
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *SWEEP, "lr=0.05,-1", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 2
    assert error_lines(stderr) == [
        f"normbench: error: hydra.sweep.dir={sweep_dir} holds an earlier sweep (2 jobs: 1 finished, 1 failed); "
        "continue it with the same command and resume=true, or pass another hydra.sweep.dir"
    ]
    assert "finished" not in stdout  # the earlier jobs' table is not shown as this invocation's
    assert files(sweep_dir) == before


@fault("resume=true of a sweep with other jobs", "one line naming the job and both overrides; kept", "one-line")
def test_a_resumed_sweep_must_be_the_same_sweep(tmp_path, monkeypatch, capsys) -> None:
    sweep_dir = tmp_path / "sweep"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, "-m", *SWEEP, "seed=0", f"hydra.sweep.dir={sweep_dir}")
    assert code == 0, stderr
    before = files(sweep_dir)
    code, _, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *SWEEP, "seed=0", "norm=gn", "resume=true", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 2
    (line,) = error_lines(stderr)
    assert line.startswith(f"normbench: error: resume=true: job 0 in {sweep_dir} ran [") and "norm=gn" in line
    assert files(sweep_dir) == before
    code, _, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *SWEEP, "seed=0", "resume=true", f"hydra.sweep.dir={tmp_path / 'absent'}"
    )
    assert code == 2 and "does not exist" in stderr and not (tmp_path / "absent").exists()


@fault("a non-finite evaluation (weights or running statistics gone bad)", "diverged, never a score", "result")
def test_a_non_finite_evaluation_is_a_divergence_not_a_score(tmp_path, monkeypatch, capsys) -> None:
    import normbench.run.loop.train

    monkeypatch.setattr(
        normbench.run.loop.train, "evaluate", lambda run, epoch: {"val/loss": math.nan, "val/acc": 0.109}
    )
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *SWEEP, f"hydra.run.dir={out}")
    assert code == 0, stderr  # a diverging run is a result
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_in"] == "evaluation"
    assert summary["diverged_step"] == summary["step"] == 4
    assert "val/acc" not in summary  # never reported as the run's score
    from normbench.config import objective

    assert objective(None, "vgg", {**summary, "val/acc": 0.109}) is None


def test_non_finite_names_the_bad_metrics() -> None:
    from normbench.divergence import non_finite

    assert non_finite({"val/loss": math.nan, "val/acc": 0.1, "val/ppl": math.inf, "ok": True, "s": "x"}) == [
        "val/loss",
        "val/ppl",
    ]
    assert non_finite({"val/loss": 2.3, "val/bleu": 0.0}) == []


@pytest.mark.e2e
@fault(
    "SIGTERM in the middle of a sweep, then the same command with resume=true",
    "summary lists interrupted and not started; resume keeps, resumes, starts; bit-exact",
    "bit-exact",
)
def test_an_interrupted_sweep_is_continued_to_its_end_by_resume(tmp_path) -> None:
    sweep_dir, reference_dir = tmp_path / "sweep", tmp_path / "reference"
    args = ("-m", *SMALL, "logger=local", "seed=0,1,2", f"hydra.sweep.dir={sweep_dir}")
    proc = popen_cli(*args)
    wait_for(sweep_dir / "1" / "checkpoints" / "step-00000003.pt", proc, timeout=900)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    table = rows(sweep_dir)
    assert [(r["job"], r["status"]) for r in table] == [("0", "finished"), ("1", "interrupted"), ("2", "not started")]
    assert table[2]["overrides"].endswith("seed=2")
    kept = (sweep_dir / "0" / "summary.json").read_bytes()

    reference = popen_cli(*SMALL, "logger=local", "seed=1", f"hydra.run.dir={reference_dir}")
    again = popen_cli(*args, "resume=true")
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    assert reference.wait(timeout=600) == 0
    table = rows(sweep_dir)
    assert [r["status"] for r in table] == ["finished"] * 3
    assert [r["ran"] for r in table] == ["earlier", "this sweep", "this sweep"]
    assert (sweep_dir / "0" / "summary.json").read_bytes() == kept  # not rerun
    assert metrics(sweep_dir / "1") == metrics(reference_dir)  # resumed from its checkpoint, bit for bit
    assert json.loads((sweep_dir / "2" / "summary.json").read_text())["step"] == 16
    assert (sweep_dir / "multirun.1.yaml").is_file()  # the first invocation's multirun.yaml kept


@pytest.mark.parametrize("status", ["finished", "diverged", "interrupted", "failed", None])
def test_job_action_keeps_results_and_resumes_checkpoints(tmp_path, status) -> None:
    if status is not None:
        (tmp_path / "summary.json").write_text(json.dumps({"status": status}))
    expected = "keep" if status in ("finished", "diverged") else "start"
    assert sweep.job_action(tmp_path) == expected
