"""normbench-figures refuses evidence that a red team bent (issue 59, items 5, 6, 8 and 9): a table
judged as the other variant of its preset, a confirmatory table that reuses an earlier attempt's
seeds (``--per-run`` as ``--runs``), a finished run whose measure is NaN (``--runs`` writes no
table its own ``--per-run`` reader refuses), and a run without metrics is named, not dropped
silently. Each case: the tampered input refused (or named), the clean one accepted."""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from normbench.analysis.figures import figures_cli
from normbench.analysis.judging.per_run import read_per_run
from normbench.analysis.judging.rules_judging import SeedBlock
from tests.analysis.figures.test_bn_claims import _saturation_rows
from tests.conftest import REPO
from tests.test_figures import write_run

FOLDER = REPO / "results" / "bn_saturation_cpu"
SEEDS = (0, 1, 2, 3, 4)


def saturation_runs(root: Path, nan_source: int | None = None, empty: int | None = None) -> Path:
    """bn_saturation's two arms x 5 seeds, steps 0, 25, 50 (both arms learn: val/acc 0.3 and 0.5);
    job ``nan_source``: every saturation value NaN; job ``empty``: its metrics.jsonl empty."""
    job = 0
    for norm, saturated, first, acc in (("none", [0.5, 0.6, 0.7], 1e-4, 0.3), ("bn", [0.05, 0.1, 0.15], 0.1, 0.5)):
        for seed in SEEDS:
            grads = {"features.0.linear": first, "features.1.linear": 0.5, "classifier": 1.0}
            level = [math.nan] * 3 if job == nan_source else [s + 0.01 * seed for s in saturated]
            rows = _saturation_rows(level, grads, seed)
            rows[-1].update({"val/acc": acc + 0.01 * seed, "val/loss": 1.5})
            d = write_run(root, job, {"norm": {"name": norm}, "seed": seed, "max_steps": 50}, rows, {"step": 50})
            if job == empty:  # a run that logged nothing (its summary names no step)
                (d / "metrics.jsonl").write_text("")
                (d / "summary.json").write_text(json.dumps({"status": "finished"}))
            job += 1
    return root


def said(capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> tuple[str, str]:
    got = capsys.readouterr()
    return got.out, got.err + caplog.text


def test_a_cpu_table_judged_as_the_full_preset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Item 5: bn_saturation_cpu's committed table (2,000 steps, conf/experiment/bn_saturation_cpu.yaml)
    judged as bn_saturation (50,000 steps) is refused in one line naming the variant that ran it."""
    table = tmp_path / "per_run.csv"
    shutil.copy(FOLDER / "per_run.csv", table)
    cpu = yaml.safe_load((REPO / "conf/experiment/bn_saturation_cpu.yaml").read_text())["max_steps"]
    full = yaml.safe_load((REPO / "conf/experiment/bn_saturation.yaml").read_text())["max_steps"]
    assert {r["final:step"] for r in read_per_run(table)} == {cpu} and cpu != full
    assert figures_cli.main(["bn_saturation", "--per-run", str(table), "--out", str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"final:step {cpu}" in err[0] and "judge the table as bn_saturation_cpu" in err[0]
    assert not (tmp_path / "full" / "claims.csv").exists()
    assert figures_cli.main(["bn_saturation_cpu", "--per-run", str(table), "--out", str(tmp_path / "cpu")]) == 0
    assert (tmp_path / "cpu" / "claims.csv").read_text() == (FOLDER / "claims.csv").read_text()


def test_run_length_reads_the_preset_and_what_it_builds_on() -> None:
    """``max_steps`` where the preset sets it, else ``epochs`` (the variant's own file first, then its
    defaults'): read back here with yaml from each file."""
    conf = REPO / "conf" / "experiment"
    assert figures_cli.run_length("bn_saturation_cpu") == ("final:step", 2000)
    epochs = yaml.safe_load((conf / "bn_dropout_cpu.yaml").read_text())["epochs"]
    assert figures_cli.run_length("bn_dropout_cpu") == ("final:epoch", epochs)
    recipe = yaml.safe_load((conf / "recipes" / "translation_cpu.yaml").read_text())["epochs"]
    assert "epochs" not in yaml.safe_load((conf / "ln_axes_cpu.yaml").read_text())
    assert figures_cli.run_length("ln_axes_cpu") == ("final:epoch", recipe)  # from its recipe
    assert figures_cli.run_length("no_such_preset") is None


def test_seeds_of_another_variants_block_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 5, where the rules tell the variants' seed blocks apart: a full-scale table holding seeds
    of the cpu block only (rules with a cpu block alone) is refused; a cpu table is not."""
    rules = SimpleNamespace(seeds={"cpu": SeedBlock(1500, 1600)})
    monkeypatch.setattr(figures_cli, "load_rules", lambda preset: rules)
    rows = [{"seed": s, "status": "finished"} for s in (1500, 1501)]
    with pytest.raises(figures_cli.ConfigError, match=r"seeds \[1500, 1501\] are in the rules' cpu seed block"):
        figures_cli.check_table_scale("gn_groups", rows, "t.csv")
    figures_cli.check_table_scale("gn_groups_cpu", rows, "t.csv")
    # a pilot (--pilot) holds no confirmatory seed at all (the second red team: confirmatory runs read
    # as a pilot judged nothing); its own seeds, outside every block, pass
    with pytest.raises(figures_cli.ConfigError, match=r"seeds \[1500, 1501\] are in the rules' cpu confirmatory"):
        figures_cli.check_table_scale("gn_groups", rows, "t.csv", pilot=True)
    figures_cli.check_table_scale("gn_groups", [{"seed": 100, "status": "finished"}], "t.csv", pilot=True)


def test_per_run_refuses_a_confirmatory_table_that_reuses_seeds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Item 6: ``--per-run`` reads the earlier attempts of its ``--out`` folder as ``--runs`` does: an
    attempt on record with the table's seeds (1500-1504) refuses it; without it, the table passes."""
    out = tmp_path / "bn_saturation_cpu"
    out.mkdir()
    for name in ("per_run.csv", "HISTORY.md"):
        shutil.copy(FOLDER / name, out / name)
    args = ["bn_saturation_cpu", "--per-run", str(out / "per_run.csv"), "--out", str(out)]
    assert figures_cli.main(args) == 0
    capsys.readouterr()
    with open(out / "HISTORY.md", "a") as f:
        f.write("\n## Attempt 5 — rules 36a8aca641140174, run at abcdef1 (2026-12-07 00:00:00)\n\n"
                "- run: commit abcdef1, started 2026-12-07 00:00:00 UTC\n"
                "- runs (runs.csv): 10 runs, seeds 1500-1504\n")  # fmt: skip
    (out / "claims.csv").unlink()
    assert figures_cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[1500, 1501, 1502, 1503, 1504] were used by an earlier attempt" in err[0]
    assert not (out / "claims.csv").exists()


def test_runs_refuse_a_finished_run_whose_measure_is_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 8: a finished run whose saturation series is all NaN: refused in one line naming the run
    and the measure, and no per_run.csv written (its own --per-run reader would refuse it); the
    clean runs write a table that --per-run reads back."""
    runs = saturation_runs(tmp_path / "clean")
    out = tmp_path / "out"
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(out)]) in (0, 1)
    assert len(read_per_run(out / "per_run.csv", "bn_saturation_cpu")) == 10
    said(capsys, caplog)
    bent, bad = saturation_runs(tmp_path / "bent", nan_source=6), tmp_path / "bad"
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(bent), "--out", str(bad)]) == 2
    err = [line for line in said(capsys, caplog)[1].splitlines() if "error:" in line]
    assert (
        len(err) == 1
        and "claim:bn_fewer_saturated of " in err[0]
        and f"{bent / '6'} (status finished) is nan" in err[0]
    )
    assert not (bad / "per_run.csv").exists()


def test_a_run_without_metrics_is_named_and_the_count_says_how_many_were_used(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 9: a run whose metrics.jsonl is empty is left out in a warning naming it; the clean sweep
    warns of none and counts 10. Since the second red team the claims are then not judged (its arm
    is short of the seed: one line naming it, no table written), where they were judged on 9."""
    caplog.set_level(logging.WARNING)
    runs = saturation_runs(tmp_path / "clean")
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(tmp_path / "a")]) in (0, 1)
    out, err = said(capsys, caplog)
    assert "[figures] 10 runs, " in out and "hold no metrics" not in err
    caplog.clear()
    bent = saturation_runs(tmp_path / "bent", empty=3)
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(bent), "--out", str(tmp_path / "b")]) == 2
    out, err = said(capsys, caplog)
    assert "1 of 10 runs hold no metrics" in err and str(bent / "3") in err
    assert "has seeds [3] that arm 'standard' lacks" in err
    assert not (tmp_path / "b" / "per_run.csv").exists()
    assert json.loads((bent / "3" / "summary.json").read_text())["status"] == "finished"


def test_runs_of_the_other_variant_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Item 5 through ``--runs``: runs that recorded preset bn_saturation_cpu (the same rules hash as
    bn_saturation) judged as bn_saturation: one line naming the preset that ran them, nothing written."""
    from normbench.rules import rules_hash

    runs = saturation_runs(tmp_path / "runs")
    assert rules_hash("bn_saturation") == rules_hash("bn_saturation_cpu")  # the hash cannot tell them apart
    for job in (p for p in runs.iterdir() if p.is_dir()):
        summary = json.loads((job / "summary.json").read_text())
        rules = {"preset": "bn_saturation_cpu", "hash": rules_hash("bn_saturation_cpu")}
        (job / "summary.json").write_text(json.dumps({**summary, "rules": rules}))
    assert figures_cli.main(["bn_saturation", "--runs", str(runs), "--out", str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a run of 'bn_saturation_cpu', not of 'bn_saturation'" in err[0]
    assert not (tmp_path / "full").exists()
    assert figures_cli.main(["bn_saturation_cpu", "--runs", str(runs), "--out", str(tmp_path / "cpu")]) in (0, 1)
