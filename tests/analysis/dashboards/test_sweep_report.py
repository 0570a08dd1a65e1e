"""Any sweep analysed without a preset (issue 60): a 3-norm x 2-seed sweep, then 3 seeds, through
`normbench.analysis.dashboards.sweep_report`, ``normbench-dashboard --runs`` and ``normbench-figures --runs``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats as sps
import yaml

from normbench.analysis.dashboards import sweep_report as sr
from normbench.analysis.loading.runs import load_local_runs

ACC = {"bn": (0.60, 0.64, 0.62), "ln": (0.50, 0.52, 0.57), "gn": (0.55, 0.56, 0.60)}


def write_run(root: Path, name: str, norm: str, seed: int, acc: float, status: str = "finished",
              lr: float = 0.1) -> None:  # fmt: skip
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    config: dict[str, Any] = {"norm": {"name": norm, "eps": 1e-5}, "model": {"name": "resnet20"}, "seed": seed,
                              "lr": lr, "dataset": {"name": "synthetic_images"},
                              "hardware": {"resolved": {"num_threads": seed + 1}}}  # fmt: skip
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"step": s, "epoch": 0, "train/loss": 2.0 - s * acc / 10, "val/acc": acc * s / 10} for s in range(2, 12, 2)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    step = 10 if status == "finished" else 4
    (d / "summary.json").write_text(json.dumps({"status": status, "step": step, "val/acc": acc, "train/loss": 1.0}))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """3 norms x 2 seeds, and one interrupted run of a third seed."""
    root = tmp_path / "multirun" / "10-00-00"
    job = 0
    for seed in (0, 1):
        for norm, accs in ACC.items():
            write_run(root, str(job), norm, seed, accs[seed])
            job += 1
    write_run(root, str(job), "bn", 2, 0.99, status="interrupted")
    return root


def test_the_swept_keys_are_read_from_the_runs(sweep: Path) -> None:
    runs = load_local_runs([sweep])
    assert sr.swept_keys(runs) == ["norm.name"]  # not seed, not the threads a run found
    keys, groups = sr.settings(runs)
    assert keys == ["norm.name"] and list(groups) == ["norm=BN", "norm=LN", "norm=GN"]
    assert [len(g) for g in groups.values()] == [2, 2, 2]  # bn's interrupted run is not read (one warning)


def test_two_seeds_give_means_and_no_interval(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = sr.finished_only(load_local_runs([sweep]))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{sweep / '6'}: not used" in err[0] and "interrupted" in err[0], err
    _, groups = sr.settings(runs)
    rows = {r["setting"]: r for r in sr.finals_table(groups, ["val/acc"])}
    bn = rows["norm=BN"]
    assert (bn["n"], bn["mean"]) == (2, pytest.approx(0.62)) and math.isnan(bn["lo"])  # the interrupted 0.99 left out
    assert bn["note"] == "too few seeds (n = 2; an interval needs 3)" and bn["metric"] == "validation accuracy"


def test_three_seeds_give_the_t_interval(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    for seed in range(3):
        for norm, accs in ACC.items():
            write_run(root, f"{norm}{seed}", norm, seed, accs[seed])
    _, groups = sr.settings(load_local_runs([root]))
    rows = {r["setting"]: r for r in sr.finals_table(groups, ["val/acc"])}
    v = np.array(ACC["ln"])
    lo, hi = sps.t.interval(0.95, 2, loc=v.mean(), scale=sps.sem(v))
    ln = rows["norm=LN"]
    assert ln["lo"] == pytest.approx(lo, rel=1e-10) and ln["hi"] == pytest.approx(hi, rel=1e-10)
    steps, mean, blo, bhi = sr.curve_band(groups["norm=LN"], "val/acc")
    assert list(steps) == [2, 4, 6, 8, 10] and mean[-1] == pytest.approx(v.mean())
    assert blo[-1] == pytest.approx(lo, rel=1e-10) and bhi[-1] == pytest.approx(hi, rel=1e-10)


def test_two_swept_keys_name_each_setting(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    for i, (norm, lr) in enumerate([("bn", 0.1), ("bn", 0.01), ("gn", 0.1), ("gn", 0.01)]):
        write_run(root, str(i), norm, 0, 0.5, lr=lr)
    keys, groups = sr.settings(load_local_runs([root]))
    assert keys == ["lr", "norm.name"] and list(groups)[:2] == ["lr=0.1, norm=BN", "lr=0.01, norm=BN"]


def test_figures_of_any_sweep(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = sr.sweep_figures(load_local_runs([sweep]), out)
    assert {p.name for p in written} == {"finals.csv", "curves.png", "finals.png"}
    with open(out / "finals.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and {r["metric"] for r in rows} == {"training loss", "validation accuracy"}


def test_the_dashboard_of_any_sweep(sweep: Path, tmp_path: Path) -> None:
    from normbench.analysis.dashboards.dashboard_cli import main

    assert main(["--entity", "e", "--project", "p", "--runs", str(sweep), "--out", str(tmp_path / "d")]) == 0
    data = json.loads((tmp_path / "d" / "sweep-10-00-00.json").read_text())
    (section,) = data["sections"]
    assert section["wandb_filter"] == "Group = 'sweep-10-00-00'"
    assert section["wandb_groupby"] == ["config.norm.name"]
    assert [p["y"] for p in section["panels"]][:2] == [["train/loss"], ["val/acc"]]


@pytest.mark.parametrize("preset", [None, "quickstart"])
def test_normbench_figures_draws_any_sweep(sweep: Path, tmp_path: Path, preset: str | None,
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """``normbench-figures [quickstart] --runs SWEEP``: no "unknown preset"; the interrupted run named."""
    from normbench.analysis.figures.figures_cli import main

    out = tmp_path / "figs"
    assert main([*([preset] if preset else []), "--runs", str(sweep), "--out", str(out)]) == 0
    assert (out / "curves.png").is_file() and (out / "finals.csv").is_file()
    assert "interrupted" in capsys.readouterr().err


def test_a_misspelt_preset_is_still_unknown(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from normbench.analysis.figures.figures_cli import main

    assert main(["santurkar_vg", "--runs", str(sweep)]) == 2
    assert "unknown preset 'santurkar_vg'" in capsys.readouterr().err
