"""End to end through the real entry point: files written, W&B offline runs, sweeps, errors."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import CIFAR_SUBSET, TINY_RUN, run_cli, run_cli_inprocess

EPOCH_KEYS = {"train/loss", "train/acc", "val/loss", "val/acc", "perf/samples_per_s", "epoch"}


def test_tiny_run_writes_metrics_summary_and_wandb(tmp_path) -> None:
    out = tmp_path / "run"
    r = run_cli(*TINY_RUN, f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("step" in row and "epoch" in row for row in rows)
    keys = set().union(*rows)
    assert EPOCH_KEYS | {"lr", "train/batch_loss"} <= keys
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 8
    assert {"git_commit", "torch", "device", "wall_time_s", "val/acc"} <= set(summary)
    wandb_files = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(wandb_files) == 1 and summary["wandb_run_id"] in wandb_files[0].name
    assert (out / "config.yaml").read_text().count("name: bn") == 1


def test_multirun_gives_distinct_wandb_runs_and_a_sweep_summary(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    r = run_cli("-m", *TINY_RUN, "max_steps=2", "norm=bn,gn", f"hydra.sweep.dir={sweep}")  # its jobs: the tiny run's
    assert r.returncode == 0, r.stderr[-3000:]
    ids = {json.loads((sweep / str(i) / "summary.json").read_text())["wandb_run_id"] for i in range(2)}
    assert len(ids) == 2
    rows = list(csv.DictReader((sweep / "sweep_summary.csv").read_text().splitlines()))
    assert [row["overrides"].split()[-1] for row in rows] == ["norm=bn", "norm=gn"]
    assert all(row["status"] == "finished" and float(row["val/acc"]) >= 0 for row in rows)
    assert "norm=gn" in r.stdout  # the table printed to the terminal


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("norm=batchnorm", "normbench: error: norm=batchnorm is not an option of norm; valid choices: bn,"),
        ("model=resnet99", "normbench: error: model=resnet99 is not an option of model; valid choices: "),
        ("dataset=imagenet", "normbench: error: dataset=imagenet is not an option of dataset; valid choices: "),
    ],
)
def test_unknown_choice_fails_listing_valid_ones(tmp_path, override: str, needle: str, monkeypatch, capsys) -> None:
    code, out, err = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, override, f"hydra.run.dir={tmp_path / 'run'}")
    assert code != 0
    assert needle in err + out


def test_missing_cifar_offline_is_one_clear_line_and_leaves_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    r = run_cli("dataset=cifar10", f"dataset.root={tmp_path / 'absent'}", "epochs=1", f"hydra.run.dir={out}")
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.startswith("normbench: error:")]
    assert len(lines) == 1 and "dataset=synthetic_images" in lines[0] and str(tmp_path / "absent") in lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists() or not list(out.rglob("*.wandb"))
    assert not (out / "summary.json").exists()


@pytest.mark.e2e
@pytest.mark.skipif(not (CIFAR_SUBSET / "cifar-10-batches-py").is_dir(), reason="shared CIFAR-10 subset absent")
def test_one_epoch_on_real_cifar_subset_beats_chance(tmp_path) -> None:
    out = tmp_path / "run"
    r = run_cli(
        "dataset=cifar10",
        f"dataset.root={CIFAR_SUBSET}",
        "dataset.verify_checksums=false",
        "epochs=1",
        "batch_size=128",
        "lr=0.1",
        "logger.progress_bar=false",
        "schedule.name=constant",
        f"hydra.run.dir={out}",
        timeout=1200,  # 51 s on an idle 2-core machine, 392 s on a loaded one; 600 s was hit once
    )
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["val/acc"] > 0.2  # chance is 0.1 on 2,000 balanced test images


def test_version_names_normbench_its_commit_and_torch(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``normbench --version``: normbench's version and the checkout's commit (not Hydra's alone); runs nothing."""
    import re
    import subprocess
    import sys

    import torch

    import normbench
    from normbench.cli.main import cli

    monkeypatch.setattr(sys, "argv", ["normbench", "--version"])
    assert cli() is None
    out = capsys.readouterr().out.strip()
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert re.fullmatch(rf"normbench {re.escape(normbench.__version__)} \(commit [0-9a-f]{{12}}(\+dirty)?, "
                        rf"torch {re.escape(torch.__version__)}, Hydra 1\.3\.\d+\)", out), out  # fmt: skip
    assert head.startswith(out.split("commit ")[1][:12])


@pytest.mark.parametrize("args", [["-m", "seed=0,1", "--cfg", "hydra"], ["--multirun", "--info"], ["-c", "job", "-m"]])
def test_multirun_with_cfg_or_info_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                               args: list[str]) -> None:
    """Hydra's 'Only one of --run, --multirun, --cfg …' ValueError traceback becomes one line, exit 2."""
    import sys

    from normbench.cli.main import cli

    monkeypatch.setattr(sys, "argv", ["normbench", "experiment=quickstart", *args])
    with pytest.raises(SystemExit) as e:
        cli()
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "cannot be combined with -m/--multirun" in err[0], err
