"""`normbench.analysis.figures.train_clock`: curves on the training clock, against values worked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from normbench.analysis.figures.train_clock import on_clock, on_grid, running_mean
from normbench.analysis.judging.stats import DIFFERENT, EQUIVALENT, NOT_JUDGED, OPPOSITE, SUPPORTED
from normbench.analysis.loading.runs import load_local_runs
from normbench.analysis.wording.figure_names import arm_name
from tests.test_figures import SEEDS, build, claim_row, claims, read_csv, write_run

STEPS = range(0, 101, 10)
SECONDS_PER_STEP = {"ln": 1.25, "rms": 1.0}  # rms's steps are faster; the loss per step is the same


def _runs(root: Path) -> None:
    job = 0
    for norm, per_step in SECONDS_PER_STEP.items():
        for seed in SEEDS:
            rows = [{"step": s, "epoch": s / 100, "train/batch_loss": 5.0 - 0.02 * s, "perf/train_s": per_step * s}
                    for s in STEPS]  # fmt: skip
            rows.append({"step": 100, "epoch": 1, "val/loss": 3.5 + 0.01 * seed, "perf/train_s": per_step * 100})
            cfg = {"norm": {"name": norm}, "hardware": {"compile": False}, "seed": seed}
            write_run(root, job, cfg, rows, {"test/bleu": 20.0})
            job += 1


def test_running_mean_and_grid_by_hand() -> None:
    assert running_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist() == [1.0, 2.0, 4.0, 6.0]
    a = (np.array([0.0, 10.0]), np.array([1.0, 3.0]))
    b = (np.array([0.0, 4.0]), np.array([0.0, 4.0]))
    (_, y), (_, z) = on_grid([a, b], np.array([0.0, 5.0, 10.0]))
    assert y.tolist() == [1.0, 2.0, 3.0]
    assert z[:1].tolist() == [0.0] and all(math.isnan(v) for v in z[1:])  # never past the series' own end


def test_loss_on_the_clock_is_the_loss_at_the_step_trained_by_then(tmp_path: Path) -> None:
    _runs(tmp_path / "runs")
    run = next(r for r in load_local_runs([tmp_path / "runs"]) if r.get("norm.name") == "ln")
    t, v = on_clock(run, "train/batch_loss")
    assert t.tolist() == [1.25 * s for s in STEPS] and v.tolist() == [5.0 - 0.02 * s for s in STEPS]
    out = tmp_path / "out"
    build("rmsnorm_speed", tmp_path / "runs", out, check=False)  # only the clock logged: the other panels empty
    rows = read_csv(out / "rmsnorm_time.csv")
    at = {(r["panel"], r["series"], float(r["x"])): float(r["median"]) for r in rows}
    # at 50 s of training: rms has trained 50 steps, ln 40; the running mean of 5 logs at step s
    # (logged every 10) is the loss at step s − 20 on a linear curve
    grid = sorted({x for (panel, _, x) in at if panel == "train_loss_by_time"})
    t50 = min(grid, key=lambda x: abs(x - 50.0))
    for norm, per_step in SECONDS_PER_STEP.items():
        want = 5.0 - 0.02 * (t50 / per_step - 20)
        assert at[("train_loss_by_time", f"{arm_name(norm)} (eager)", t50)] == pytest.approx(want, abs=1e-9)
    # the series as the papers name the arms (figure_names.arm_name: rms → RMSNorm, ln → LN)
    by_step = at[("train_loss_by_step", "RMSNorm (eager)", 100.0)]
    assert by_step == pytest.approx(at[("train_loss_by_step", "LN (eager)", 100.0)])  # equal steps: equal losses
    assert at[("val_loss_by_time", "RMSNorm (eager)", 100.0)] == pytest.approx(3.52)  # the seeds' median
    assert at[("val_loss_by_time", "LN (eager)", 125.0)] == pytest.approx(3.52)


@pytest.mark.slow
def test_rmsnorm_time_claims_at_equal_time_and_equal_steps(tmp_path: Path) -> None:
    """rms's steps take 1.0 s, ln's 1.25 s, prms's 1.5 s; rms and ln lose the same per step, prms
    0.3 more. T = 0.9 × 100 s (rms, the shortest clock): rms at step 90, ln at step 72, prms at 60."""
    per_step, worse = {"ln": 1.25, "rms": 1.0, "prms": 1.5}, {"ln": 0.0, "rms": 0.0, "prms": 0.3}
    job = 0
    for norm in per_step:
        for seed in SEEDS:
            rows = [{"step": s, "train/batch_loss": 5.0 - 0.02 * s + worse[norm] + 0.01 * seed,
                     "perf/train_s": per_step[norm] * s} for s in STEPS]  # fmt: skip
            cfg = {"norm": {"name": norm}, "hardware": {"compile": False}, "seed": seed, "max_steps": 100}
            write_run(tmp_path / "runs", job, cfg, rows, {"test/bleu": 20.0})  # above the learning bound (BLEU 10)
            job += 1
    out = tmp_path / "out"
    # the clock claims are the full preset's (full_scale_only); the runs log no validation loss: its panel empty
    build("rmsnorm_time", tmp_path / "runs", out, check=False)
    verdicts = claims(out)
    assert verdicts["rms_lower_loss_equal_time_eager"] == SUPPORTED
    assert verdicts["rms_loss_equal_steps_eager"] == EQUIVALENT
    assert verdicts["prms_lower_loss_equal_time_eager"] == OPPOSITE
    assert verdicts["prms_loss_equal_steps_eager"] == DIFFERENT
    assert verdicts["rms_lower_loss_equal_time_compiled"] == NOT_JUDGED  # no compiled runs here: n = 0
    cpu = tmp_path / "cpu"
    # CPU scale: the clock claims are judged where their arms ran too (full_scale_only withholds no verdict:
    # issue 56), on the same runs with the same numbers as the full preset's
    build("rmsnorm_time_cpu", tmp_path / "runs", cpu, check=False)
    assert claims(cpu)["rms_lower_loss_equal_time_eager"] == SUPPORTED
    assert (
        claim_row(cpu, "rms_lower_loss_equal_time_eager")["estimate"]
        == claim_row(out, "rms_lower_loss_equal_time_eager")["estimate"]
    )
    assert claims(cpu)["rms_loss_equal_steps_eager"] == EQUIVALENT
    # the running mean of 9 logs (every 10 steps) on a line is the loss 40 steps back: rms at step 90
    # 5 − 0.02·50 = 4.0; ln at step 72, between 4.3 (step 70: the mean of 8 logs) and 4.2 (step 80)
    row = claim_row(out, "rms_lower_loss_equal_time_eager")
    assert float(row["estimate"]) == pytest.approx(4.0 - (4.3 - 0.2 * 0.1), abs=1e-9)
    assert float(claim_row(out, "rms_loss_equal_steps_eager")["estimate"]) == pytest.approx(0.0, abs=1e-12)
