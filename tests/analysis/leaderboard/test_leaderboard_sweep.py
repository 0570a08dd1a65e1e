"""The leaderboard end to end: a 3-norm x 1-seed x 6-step sweep through ``python -m normbench -m``
on the synthetic quickstart data, then ``normbench-leaderboard`` over its sweep folder; every
number in the table is checked against the job folders' own files, the norms that ran and no
other have a row (issue 60), and "What ran" gives PowerNorm's warm-up as the runner planned it (10 % of 6 steps: 1)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.analysis.leaderboard.leaderboard import NO_RULES
from normbench.norms import list_norms
from normbench.norms.registry import NORMS
from tests.conftest import REPO, cli_env, run_cli

PROBE = "{every_n_steps:100,start_step:5,num_points:2}"
SWEEP = (
    "experiment=quickstart",
    "dataset.num_train=256",
    "dataset.num_test=64",
    "batch_size=32",
    "max_steps=6",
    "logger.progress_bar=false",
    "logger.wandb=false",
    "diagnostics=off",
    "+diagnostics.bn_stats={every_n_steps:1}",
    f"+diagnostics.landscape={PROBE}",
    f"+diagnostics.beta_smoothness={PROBE}",
    "+diagnostics.grad_variance={every_n_steps:100,start_step:5,num_batches:2}",
    "norm=bn,gn,pn",
)


def last_logged(job: Path, key: str) -> float:
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    return [r[key] for r in rows if key in r][-1]


@pytest.mark.e2e
def test_sweep_then_leaderboard(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    r = run_cli("-m", *SWEEP, f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "board"
    lb = subprocess.run(
        [sys.executable, "-m", "normbench.analysis.leaderboard.leaderboard_report", str(sweep), "--out", str(out)],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert lb.returncode == 0, lb.stderr[-3000:]
    with open(out / "leaderboard.csv") as f:
        rows = {row["norm"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"bn", "gn", "pn"} < set(list_norms())  # the norms that ran, no row for one never run
    assert all(row["normalizes_over"] == NORMS.get(n).normalizes_over("NCHW") for n, row in rows.items())
    by_norm = {}
    for d in (p for p in sweep.iterdir() if p.name.isdigit()):
        assert json.loads((d / "summary.json").read_text())["status"] == "finished"
        overrides = (d / ".hydra" / "overrides.yaml").read_text()
        by_norm[next(n for n in ("bn", "gn", "pn") if f"norm={n}" in overrides)] = d
    assert set(by_norm) == {"bn", "gn", "pn"}
    speed = {n: last_logged(d, "perf/samples_per_s") for n, d in by_norm.items()}  # one epoch: its median
    for norm, job in by_norm.items():
        row, summary = rows[norm], json.loads((job / "summary.json").read_text())
        assert (row["model"], row["dataset"], row["n"], row["seeds"]) == ("resnet20", "synthetic_images", "1", "0")
        assert float(row["mean"]) == pytest.approx(summary["val/acc"])
        assert float(row["train_loss"]) == pytest.approx(summary["train/loss"])
        assert float(row["relative_throughput"]) == pytest.approx(speed[norm] / speed["bn"])
        # the probes ran at step 5 of 6 only: before the last 10 %, so their last value is used
        assert float(row["loss_range"]) == pytest.approx(last_logged(job, "landscape/loss_range"))
        assert float(row["beta"]) == pytest.approx(last_logged(job, "beta_smoothness/beta"))
        assert float(row["grad_var"]) == pytest.approx(last_logged(job, "grad_variance/total"))
    assert float(rows["bn"]["bn_var_dist"]) == pytest.approx(
        last_logged(by_norm["bn"], "bn_stats/first_layer/var_dist")
    )
    assert rows["gn"]["bn_var_dist"] == ""  # GN keeps no running statistics
    assert {rows[n]["verdict"] for n in by_norm} == {NO_RULES}  # quickstart has no leaderboard rules
    text = (out / "leaderboard.md").read_text()
    assert "| resnet20 on synthetic_images | batch 32 |" in text and "| 6 steps |" in text
    assert "| pn: warmup_iters 1 |" in text
    assert (out / "leaderboard.png").stat().st_size > 0 and "## resnet20 on synthetic_images" in lb.stdout
