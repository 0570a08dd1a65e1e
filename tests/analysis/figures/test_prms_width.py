"""`prms_width`: pRMSNorm at d 512 beside RMSNorm and LN — its figure and equivalence claims on
synthetic runs whose answers are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.analysis.judging.stats import DIFFERENT, EQUIVALENT, INCONCLUSIVE
from tests.test_figures import SEEDS, build, claim_row, claims, read_csv, write_run

STEPS = range(0, 151, 10)
# final validation loss and BLEU per norm: rms = ln + 0.01 nats; prms 0.5 nats and 3 BLEU worse (every arm
# above the learning bound, test BLEU above 10: issue 56)
VAL_LOSS = {"ln": 4.00, "rms": 4.01, "prms": 4.50}
BLEU = {"ln": 15.0, "rms": 15.0, "prms": 12.0}


def _runs(root: Path, spread: float = 0.01) -> None:
    job = 0
    for norm in VAL_LOSS:
        for seed in SEEDS:
            rows = [{"step": s, "train/batch_loss": 8.0 - 0.02 * s + VAL_LOSS[norm] - 4.0} for s in STEPS]
            rows.append({"step": 150, "epoch": 1, "val/loss": VAL_LOSS[norm] + spread * (seed - 2)})
            cfg = {"norm": {"name": norm}, "hardware": {"compile": False}, "seed": seed, "max_steps": 150,
                   "model": {"name": "transformer_iwslt", "d_model": 512}}  # fmt: skip
            write_run(root, job, cfg, rows, {"test/bleu": BLEU[norm] + spread * 10 * (seed - 2)})
            job += 1


def test_prms_width_judges_equivalence_of_loss_and_bleu(tmp_path: Path) -> None:
    _runs(tmp_path / "runs")
    out = tmp_path / "out"
    build("prms_width_cpu", tmp_path / "runs", out)
    verdicts = claims(out)
    assert verdicts["rms_loss_equivalent_ln"] == EQUIVALENT  # 0.01 apart, margin 0.1
    assert verdicts["prms_loss_equivalent_ln"] == DIFFERENT  # 0.5 apart
    assert verdicts["prms_loss_equivalent_rms"] == DIFFERENT
    # the BLEU equivalences (the pilot asked n ≈ 12 and 18) are judged where their arms ran (issue 56)
    assert verdicts["prms_bleu_equivalent_ln"] == DIFFERENT
    assert float(claim_row(out, "prms_loss_equivalent_rms")["estimate"]) == pytest.approx(0.49)
    rows = read_csv(out / "prms_width.csv")
    bars = {(r["panel"], r["series"]): float(r["median"]) for r in rows if r["panel"] in ("val_loss", "bleu")}
    assert bars[("val_loss", "pRMSNorm")] == pytest.approx(4.50) and bars[("bleu", "LN")] == pytest.approx(15.0)
    curve = {(r["series"], float(r["x"])): float(r["median"]) for r in rows if r["panel"] == "train_loss"}
    # the running mean of 9 logs (every 10 steps) on a line: the loss 40 steps back
    assert curve[("LN", 150.0)] == pytest.approx(8.0 - 0.02 * 110)  # the arms as the paper names them


def test_prms_width_noisy_seeds_are_inconclusive(tmp_path: Path) -> None:
    """Seeds that scatter by ±0.4 nats cannot show a 0.01-nat difference to be within 0.1."""
    _runs(tmp_path / "runs", spread=0.2)
    out = tmp_path / "out"
    build("prms_width_cpu", tmp_path / "runs", out)
    assert claims(out)["rms_loss_equivalent_ln"] == INCONCLUSIVE
