"""``per_run.csv`` (issue 43, item 6): one row per run with every value the claims and checks are
judged on; it reads back exactly, and ``claims.csv`` / ``claims.md`` rebuilt from it alone are
byte-identical to those judged from the runs — also for every committed results folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from normbench.analysis.figures.figures_cli import main
from normbench.analysis.findings.verify import verify_folder
from normbench.analysis.judging.claims import claim_values
from normbench.analysis.judging.per_run import BASE_COLUMNS, SCOPE_KEYS, per_run_rows, read_per_run, write_per_run
from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.loading.provenance import results_root
from normbench.analysis.loading.runs import load_local_runs
from normbench.base.errors import ConfigError
from tests.analysis.figures.test_bn_claims import DROPOUT_ARMS
from tests.test_figures import SEEDS, read_csv, write_run

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FINAL = {"standard": (1.0, 0.5), "standard_dropout": (0.8, 0.55), "bn": (1.0, 0.7), "bn_dropout": (0.9, 0.72)}


def dropout_sweep(root: Path) -> Path:
    """bn_dropout_cpu's four arms x five seeds, made at one commit; the standard VGG with dropout
    diverges at seed 4 (it counts with the worst gap, +inf: lower is better)."""
    job = 0
    for arm, (norm, p) in DROPOUT_ARMS.items():
        for seed in SEEDS:
            train, val = FINAL[arm]
            rows = [{"step": 70, "epoch": 10, "val/acc": val / 2, "train_eval/acc": train / 2},
                    {"step": 210, "epoch": 30, "val/acc": val + 0.01 * seed, "train_eval/acc": train}]  # fmt: skip
            summary = {"git": {"commit": COMMIT, "dirty_files": []}, "step": 210, "test/bleu": 0.1 + seed / 3}
            config = {"norm": {"name": norm}, "model": {"name": "vgg11", "dropout": p}, "seed": seed}
            d = write_run(root, job, config, rows, summary)
            if arm == "standard_dropout" and seed == 4:
                (d / "summary.json").write_text(json.dumps({**summary, "status": "diverged"}))
            job += 1
    return root


def test_per_run_rows_hold_every_measure_once_per_run(tmp_path: Path) -> None:
    runs = load_local_runs([dropout_sweep(tmp_path / "runs")])
    rows = per_run_rows("bn_dropout_cpu", runs)
    rules = load_rules("bn_dropout_cpu")
    assert rules is not None  # the setup check and the learning bounds (issue 56) are check columns alike
    checks = [f"check:{c.id}" for c in getattr(rules, "measured_checks", rules.checks) if "cpu" in c.variants]
    assert "check:fits_training_images" in checks
    assert list(rows[0]) == [*BASE_COLUMNS, "model.dropout", "norm.name", "claim:dropout_narrows_gap",
                             "claim:bn_narrows_gap", "claim:bn_higher_test_acc", *checks,
                             "final:step", "final:test/bleu", *(f"scope:{k}" for k in SCOPE_KEYS)]  # fmt: skip
    assert (rows[0]["scope:model.name"], rows[0]["scope:dataset.name"]) == ("vgg11", "cifar10")  # as recorded
    by = {(r["norm.name"], r["model.dropout"], r["seed"]): r for r in rows}
    bn = by[("bn", 0.0, 2)]
    assert (bn["status"], bn["commit"], bn["final:step"]) == ("finished", COMMIT, 210)
    assert bn["claim:bn_narrows_gap"] == pytest.approx(1.0 - 0.72) and bn["claim:bn_higher_test_acc"] == 0.72
    assert bn["check:fits_training_images"] == pytest.approx(0.0) and bn["claim:dropout_narrows_gap"] is None
    dropout_bn = by[("bn", 0.3, 0)]  # in no arm and not the setup check's: no claim or setup-check value
    assert all(v is None for k, v in dropout_bn.items() if k.startswith("claim:") or k == "check:fits_training_images")
    diverged = by[("none", 0.3, 4)]
    assert diverged["status"] == "diverged" and diverged["claim:dropout_narrows_gap"] == math.inf
    values = claim_values("bn_dropout_cpu", rows)["dropout_narrows_gap"]
    assert values[0] == pytest.approx([0.25 - 0.01 * s for s in SEEDS[:4]] + [math.inf])  # as judged: seed order
    assert values[1] == pytest.approx([0.5 - 0.01 * s for s in SEEDS])


def test_per_run_csv_reads_back_exactly(tmp_path: Path) -> None:
    """Config values of every type, non-finite and long floats, empty cells (±inf in a measure of a
    diverged run only: issue 59, item 4)."""
    rows = [{"source": "runs/0", "seed": 0, "status": "finished", "commit": COMMIT, "rules_hash": "h",
             "flag": True, "name": "bn", "num_text": "1", "quoted": '"x, y"', "empty": "", "lr": 1e-05, "none": None,
             "claim:c": 0.1 + 0.2, "claim:d": 5e-324, "check:k": 0.5, "final:step": 210, "final:x": -math.inf},
            {"source": "runs/1", "seed": 1, "status": "diverged", "commit": COMMIT, "rules_hash": "h",
             "flag": False, "name": "true", "num_text": "null", "quoted": "", "empty": None, "lr": 3, "none": None,
             "claim:c": math.inf, "claim:d": -math.inf, "check:k": None, "final:step": -1, "final:x": 2.5}]  # fmt: skip
    path = write_per_run(rows, tmp_path / "per_run.csv")
    back = read_per_run(path)
    assert back == rows
    assert [[type(v) for v in r.values()] for r in back] == [[type(v) for v in r.values()] for r in rows]
    assert path.read_text().splitlines()[1].startswith(f'runs/0,0,finished,{COMMIT},h,true,bn,"""1"""')
    (tmp_path / "bad.csv").write_text("id,verdict\nx,supported\n")
    with pytest.raises(ConfigError, match="is not a per_run.csv"):
        read_per_run(tmp_path / "bad.csv")


def test_claims_rebuilt_from_per_run_csv_are_byte_identical(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs_dir, out, again = dropout_sweep(tmp_path / "runs"), tmp_path / "out", tmp_path / "again"
    assert main(["bn_dropout_cpu", "--runs", str(runs_dir), "--out", str(out)]) == 0
    assert (out / "bn_dropout.png").is_file() and (out / "per_run.csv").is_file()
    assert read_csv(out / "claims.csv")[0]["short"] == "Dropout narrows the train-test gap"  # the rules' short
    assert main(["bn_dropout_cpu", "--per-run", str(out / "per_run.csv"), "--out", str(again)]) == 0
    assert "no paper figures" in capsys.readouterr().out
    names = sorted(p.name for p in again.iterdir())  # PNGs only: conftest
    assert names == ["claims.csv", "claims.md", "forest.csv", "forest.png"]
    for name in ("claims.csv", "claims.md"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    verdicts = {r["id"]: r["verdict"] for r in read_csv(out / "claims.csv")}
    assert verdicts["bn_narrows_gap"] == "supported"
    assert verdicts["dropout_narrows_gap"] == "inconclusive"  # judged where its arms ran (issue 56)


def test_per_run_csv_of_other_rules_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = per_run_rows("bn_dropout_cpu", load_local_runs([dropout_sweep(tmp_path / "runs")]))
    write_per_run([{**r, "rules_hash": "0000000000000000"} for r in rows], tmp_path / "per_run.csv")
    assert main(["bn_dropout_cpu", "--per-run", str(tmp_path / "per_run.csv"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "measured under rules '0000000000000000'" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "o").exists()


def test_a_missing_per_run_csv_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["bn_dropout_cpu", "--per-run", str(tmp_path / "absent.csv"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "absent.csv" in err and "cannot be read" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "o").exists()


COMMITTED = sorted(p for p in results_root().iterdir() if (p / "per_run.csv").is_file())


@pytest.mark.skipif(not COMMITTED, reason="no results folder holds a per_run.csv yet")
@pytest.mark.parametrize("folder", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_claims_rebuild_from_their_per_run_csv(folder: Path) -> None:
    """Every committed claims.csv / claims.md is what the current code judges from its per_run.csv
    (`verify_folder`: one line per difference, numbers to a relative 1e-9)."""
    assert verify_folder(folder) == []


@pytest.mark.parametrize("preset, writer", [("santurkar_vgg_cpu", "santurkar_vgg"),
                                            ("powernorm_mt_cpu", "powernorm_mt")])
def test_the_table_keeps_what_a_title_names_so_that_a_redraw_names_it_too(preset: str, writer: str, tmp_path) -> None:
    """A figure's title names the runs' model, depth or layers, width and data set (`scope`); drawn
    from the committed per_run.csv it names the same, read from its ``scope:`` columns, which
    follow the measures (never selectors) and survive the table's round trip."""
    from normbench.analysis.figures.figure_record import table_runs
    from normbench.analysis.judging.evidence import selector_columns
    from normbench.analysis.judging.per_run import SCOPE, SCOPE_KEYS
    from normbench.analysis.wording.figure_names import scope
    from tests.analysis.figures.figure_runs import runs_for

    runs_for(writer)(tmp_path / "runs")
    runs = load_local_runs([tmp_path / "runs"])
    write_per_run(per_run_rows(preset, runs), tmp_path / "per_run.csv")
    rows = read_per_run(tmp_path / "per_run.csv", preset)
    columns = list(rows[0])
    assert columns[-len(SCOPE_KEYS) :] == [SCOPE + k for k in SCOPE_KEYS]
    assert not [c for c in selector_columns(columns) if c.startswith(SCOPE)]
    from_runs, from_table = scope(runs), scope(table_runs(tmp_path))
    assert from_table == from_runs
    assert any(name in from_runs for name in ("VGG", "Transformer"))
    assert any(data in from_runs for data in ("CIFAR-10", "translation"))
