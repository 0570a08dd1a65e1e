"""The leaderboard's verdicts are the rules' (issue 59, red team items 11 and 12): a norm that is the
compared arm (``a``) of one claim and the reference (``b``) of another shows the claim that compares
it, never the last claim's wording; two claims that compare it and disagree both show, named; and
``--preset P`` on runs that recorded another preset's rules is refused in one line, as
``normbench-figures`` refuses them (`figures_cli.check_rules`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from normbench.analysis.judging.claims import Claim
from normbench.analysis.judging.stats import INCONCLUSIVE, NOT_JUDGED, SUPPORTED
from normbench.analysis.leaderboard.leaderboard import NO_RULES
from normbench.analysis.leaderboard.leaderboard_report import main
from normbench.analysis.leaderboard.leaderboard_verdicts import REFERENCE_VERDICT, row_verdict
from normbench.rules import rules_hash
from tests.test_figures import SEEDS, write_run

LAYERS = ("features.0.norm", "features.2.norm", "features.4.norm")


def saturation_sweep(root: Path, preset: str = "bn_saturation_cpu") -> Path:
    """bn_saturation_cpu's two arms as their runs record them (the preset's rules hash in each
    summary): BN 10 % of units saturated, the standard net 60 %; the standard net's first-layer
    gradient 1e-4 of its classifier's, BN's 0.1. Its two claims: BN is arm a of
    ``bn_fewer_saturated``, arm b of ``early_gradients_vanish_without_bn``; both supported."""
    job = 0
    for norm, saturated, first in (("none", 0.6, 1e-4), ("bn", 0.1, 0.1)):
        for seed in SEEDS:
            grads = {"features.0.linear": first, "features.1.linear": 0.5, "classifier": 1.0}
            rows = [{"step": step, **{f"saturation/{layer}/saturated": saturated + 0.01 * seed for layer in LAYERS},
                     **{f"saturation/{name}/grad_norm": g * (1 + 0.05 * seed) for name, g in grads.items()}}
                    for step in (0, 25, 50)]  # fmt: skip
            summary = {"val/acc": 0.3 + 0.01 * seed, "rules": {"preset": preset, "hash": rules_hash(preset)}}
            write_run(root, job, {"norm": {"name": norm}, "seed": seed}, rows, summary)
            job += 1
    return root


def verdicts(out: Path) -> dict[str, str]:
    with open(out / "leaderboard.csv") as f:
        return {r["norm"]: r["verdict"] for r in csv.DictReader(f) if r["n"] not in ("", "0")}


def test_a_norm_compared_in_one_claim_and_the_reference_in_another_shows_its_claim(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([str(saturation_sweep(tmp_path / "runs")), "--out", str(out)]) == 0
    with open(out / "claims.csv") as f:
        judged = {r["id"]: r["verdict"] for r in csv.DictReader(f)}
    assert judged["bn_fewer_saturated"] == SUPPORTED and judged["early_gradients_vanish_without_bn"] == SUPPORTED
    assert verdicts(out) == {"bn": SUPPORTED, "none": SUPPORTED}  # bn was 'reference': the last claim's wording


def claim(cid: str, verdict: str, note: str = "") -> Claim:
    return Claim(id=cid, claim="", paper="", figure="", verdict=verdict, note=note)


@pytest.mark.parametrize(
    "named, expected",
    [
        ([(claim("c1", SUPPORTED), True), (claim("c2", INCONCLUSIVE), False)], (SUPPORTED, "")),
        ([(claim("c2", INCONCLUSIVE), False), (claim("c1", SUPPORTED), True)], (SUPPORTED, "")),
        ([(claim("c1", SUPPORTED), True), (claim("c2", INCONCLUSIVE), True)],
         (f"{SUPPORTED} (c1); {INCONCLUSIVE} (c2)", "")),
        ([(claim("c1", SUPPORTED), True), (claim("c2", SUPPORTED), True)], (SUPPORTED, "")),
        ([(claim("c1", NOT_JUDGED, "too few seeds"), True)], (NOT_JUDGED, "too few seeds")),
        ([(claim("c1", SUPPORTED), False), (claim("c2", SUPPORTED), False)], (REFERENCE_VERDICT, "")),
        ([], (NO_RULES, "")),
    ],
)  # fmt: skip
def test_no_claims_verdict_overwrites_another(named: list[tuple[Claim, bool]], expected: tuple[str, str]) -> None:
    assert row_verdict(named) == expected


def test_runs_of_another_preset_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = saturation_sweep(tmp_path / "runs")
    out = tmp_path / "out"
    assert main([str(runs), "--out", str(out), "--preset", "bn_lr_range_cpu"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "is a run of preset 'bn_saturation_cpu', not of 'bn_lr_range_cpu'" in errors[0]
    assert not out.exists()
    assert main([str(runs), "--out", str(out), "--preset", "bn_saturation_cpu"]) == 0  # its own preset: judged


def test_runs_made_under_other_rules_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run that names the preset but recorded another preset's rules hash (its record edited)."""
    runs = saturation_sweep(tmp_path / "runs")
    for summary in runs.glob("*/summary.json"):
        record = json.loads(summary.read_text())
        record["rules"]["hash"] = rules_hash("bn_lr_range_cpu")
        summary.write_text(json.dumps(record))
    assert main([str(runs), "--out", str(tmp_path / "out"), "--preset", "bn_saturation_cpu"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and f"was made under rules {rules_hash('bn_lr_range_cpu')}" in errors[0]
