"""The leaderboard under rules (issue 43, item 7): each norm against its cell's reference, two-sided
(relation ``differs``), Holm within each cell, verdicts in the shared vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

import normbench.analysis.judging.claims as claims_module
from normbench.analysis.judging.claims import judge_rows
from normbench.analysis.judging.rules_schema import load_rules, parse_rules
from normbench.analysis.judging.stats import DIFFERENT, INCONCLUSIVE, holm
from normbench.base.errors import ConfigError

SEEDS = (0, 1, 2, 3, 4)


def rules_data(claims: list[dict]) -> dict:
    return {"preset": "toy", "min_seeds": 5, "scale": {"full": {"kind": "paper"}, "cpu": {"kind": "reduced"}},
            "claims": claims}  # fmt: skip


def differs(cid: str, cell: str, norm: str, reference: str) -> dict:
    return {"id": cid, "figure": "leaderboard", "claim": f"{norm} differs from {reference}", "measure": "final",
            "a": {"label": norm, "select": {"norm.name": norm, "cell": cell}},
            "b": {"label": reference, "select": {"norm.name": reference, "cell": cell}},
            "relation": "differs", "better": "higher", "test": "welch", "cell": cell,
            "effect": {"value": 0.01, "smallest": "one point of accuracy"}}  # fmt: skip


def rows_of(values: dict[tuple[str, str], list[float]], claim_of: dict[tuple[str, str], list[str]]) -> list[dict]:
    """One per-run row per (cell, norm) and seed: the value in the column of every claim it is an arm of."""
    rows = []
    for (cell, norm), vs in values.items():
        for seed, v in zip(SEEDS, vs, strict=True):
            row = {"source": f"{cell}/{norm}/{seed}", "seed": seed, "status": "finished", "commit": "c",
                   "rules_hash": "h", "norm.name": norm, "cell": cell}  # fmt: skip
            row.update({f"claim:{cid}": v for cid in claim_of[(cell, norm)]})
            rows.append(row)
    return rows


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch):
    """Two cells, images (gn, ln against bn) and text (rms against ln)."""
    claims = [differs("gn_vs_bn", "images", "gn", "bn"), differs("ln_vs_bn", "images", "ln", "bn"),
              differs("rms_vs_ln", "text", "rms", "ln")]  # fmt: skip
    rules = parse_rules(rules_data(claims), "toy_cpu", "h")
    monkeypatch.setattr(claims_module, "load_rules", lambda preset: rules)
    claim_of = {("images", "gn"): ["gn_vs_bn"], ("images", "ln"): ["ln_vs_bn"],
                ("images", "bn"): ["gn_vs_bn", "ln_vs_bn"], ("text", "rms"): ["rms_vs_ln"],
                ("text", "ln"): ["rms_vs_ln"]}  # fmt: skip
    return rules, claim_of


def test_a_difference_either_way_is_different_and_none_is_inconclusive(toy) -> None:
    _, claim_of = toy
    spread = [-0.002, -0.001, 0.0, 0.001, 0.002]
    values = {("images", "bn"): [0.50 + e for e in spread], ("images", "gn"): [0.45 + e for e in spread],
              ("images", "ln"): [0.50 + e for e in spread[::-1]], ("text", "ln"): [20 + e for e in spread],
              ("text", "rms"): [21 + e for e in spread]}  # fmt: skip
    verdicts = {c.id: c.verdict for c in judge_rows("toy_cpu", rows_of(values, claim_of))}
    assert verdicts == {"gn_vs_bn": DIFFERENT, "ln_vs_bn": INCONCLUSIVE, "rms_vs_ln": DIFFERENT}


def test_holm_runs_within_each_cell(toy) -> None:
    """rms vs ln alone in its cell keeps its raw p; the images cell's two p-values are adjusted
    together — not the three of the preset as one family."""
    _, claim_of = toy
    rng = np.random.default_rng(0)
    values = {key: list(base + rng.normal(0, 0.01, 5))
              for key, base in {("images", "bn"): 0.5, ("images", "gn"): 0.49, ("images", "ln"): 0.5,
                                ("text", "ln"): 0.5, ("text", "rms"): 0.485}.items()}  # fmt: skip
    judged = {c.id: c for c in judge_rows("toy_cpu", rows_of(values, claim_of))}
    p = {cid: sps.ttest_ind(values[(cell, a)], values[(cell, b)], equal_var=False).pvalue
         for cid, cell, a, b in (("gn_vs_bn", "images", "gn", "bn"), ("ln_vs_bn", "images", "ln", "bn"),
                                 ("rms_vs_ln", "text", "rms", "ln"))}  # fmt: skip
    assert judged["rms_vs_ln"].p_holm == pytest.approx(p["rms_vs_ln"])
    images = holm([p["gn_vs_bn"], p["ln_vs_bn"]])
    assert [judged["gn_vs_bn"].p_holm, judged["ln_vs_bn"].p_holm] == pytest.approx(images)
    assert judged["rms_vs_ln"].p_holm != pytest.approx(holm(list(p.values()))[2])


def test_a_bad_cell_is_one_line() -> None:
    bad = differs("x", "images", "gn", "bn") | {"cell": ""}
    with pytest.raises(ConfigError, match="cell must be a non-empty text"):
        parse_rules(rules_data([bad]), "toy_cpu", "h")


@pytest.mark.parametrize("preset", ["leaderboard", "leaderboard_cpu"])
def test_the_leaderboard_rules_set_every_norm_against_its_cells_reference(preset: str) -> None:
    rules = load_rules(preset)
    assert rules is not None and rules.claims and rules.checks and rules.pilot_seeds
    for rule in rules.claims:
        assert rule.relation == "differs" and rule.cell and rule.effect is not None
        assert rule.b.select["norm.name"] == ("bn" if rule.cell.startswith("images") else "ln"), rule.id


def leaderboard_sweep(
    root: Path, seeds: tuple[int, ...] = SEEDS, preset: str = "leaderboard_cpu", depth: int = 8, lift: float = 0.0
) -> Path:
    """An images cell of ``preset`` as its runs record it (a ResNet: resnet20 at ``depth``, the preset in
    each summary), ``seeds``: bn 0.50 ± 0.004, gn 0.45 (far below), ln 0.50 (the same), rms 0.52 and
    one seed only (too few to judge), each ``lift`` higher; no translation run."""
    import json

    import yaml

    from normbench.rules import rules_hash
    from tests.analysis.leaderboard.test_leaderboard import write_job

    spread = (-0.004, -0.002, 0.0, 0.002, 0.004)
    job = 0
    arms = (("bn", 0.50, seeds), ("gn", 0.45, seeds), ("ln", 0.50, seeds), ("rms", 0.52, seeds[:1]))
    for norm, base, arm_seeds in arms:
        for seed in arm_seeds:
            score = lift + base + spread[(seed + (norm == "ln")) % 5]
            d = write_job(root, str(job), norm=norm, seed=seed, score=score)
            config = yaml.safe_load((d / "config.yaml").read_text())
            config["model"]["depth"] = depth
            (d / "config.yaml").write_text(yaml.safe_dump(config))
            summary = json.loads((d / "summary.json").read_text())
            rules = {"preset": preset, "hash": rules_hash(preset)}  # as a run records them (run_provenance)
            (d / "summary.json").write_text(json.dumps({**summary, "rules": rules}))
            job += 1
    return root


def test_the_leaderboard_table_takes_its_rules_verdicts(tmp_path: Path) -> None:
    """The full leaderboard's ResNet20 cell (bn above the 85 % its check asks)."""
    import csv

    from normbench.analysis.leaderboard.leaderboard_report import main

    out = tmp_path / "out"
    sweep = leaderboard_sweep(tmp_path / "sweep", preset="leaderboard", depth=20, lift=0.4)
    assert main([str(sweep), "--out", str(out)]) == 0
    with open(out / "leaderboard.csv") as f:
        rows = {r["norm"]: r for r in csv.DictReader(f) if r["n"] not in ("", "0")}
    verdict = {n: r["verdict"] for n, r in rows.items()}
    assert verdict == {"bn": "reference", "gn": DIFFERENT, "ln": INCONCLUSIVE, "rms": "not judged"}
    assert "5 seeds per arm" in rows["rms"]["reason"]
    with open(out / "claims.csv") as f:
        claims = {r["id"]: r for r in csv.DictReader(f)}
    gn = claims["resnet20_gn"]
    assert gn["verdict"] == DIFFERENT and float(gn["estimate"]) == pytest.approx(-0.05)
    assert claims["resnet20_bn_trains"]["verdict"] == "passed"  # every bn run above 85 %
    assert claims["iwslt_ln_trains"]["verdict"] == "failed"  # no translation run: the check selects none …
    assert claims["iwslt_rms"]["verdict"] == "not judged"  # … and gates its own cell only
    assert claims["iwslt_rms"]["reason"] == "not_run"  # its arms ran no run (issue 56: the first reason)
    assert (out / "forest.png").is_file() and (out / "per_run.csv").is_file()


def test_the_cpu_leaderboards_images_claims_are_judged_where_their_arms_ran(tmp_path: Path) -> None:
    """leaderboard_cpu's ResNet8 cell (issue 56): the pilot asked n ≈ 28-96 per arm for one point
    (full_scale_only), but the arms ran at 5 seeds, so each norm is judged against bn: gn 5 points
    below (different), ln level (inconclusive), rms one seed (not judged: too few seeds)."""
    import csv

    from normbench.analysis.leaderboard.leaderboard_report import main

    out = tmp_path / "out"
    assert main([str(leaderboard_sweep(tmp_path / "sweep")), "--out", str(out)]) == 0
    with open(out / "leaderboard.csv") as f:
        rows = {r["norm"]: r for r in csv.DictReader(f) if r["n"] not in ("", "0")}
    assert {n: r["verdict"] for n, r in rows.items()} == {
        "bn": "reference", "gn": DIFFERENT, "ln": INCONCLUSIVE, "rms": "not judged"}  # fmt: skip
    with open(out / "claims.csv") as f:
        claims = {r["id"]: r for r in csv.DictReader(f)}
    assert claims["resnet8_bn_trains"]["verdict"] == "passed"


def test_the_leaderboard_pilot_is_read_with_pilot_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The leaderboard's pilot runs (the rules' pilot seeds): refused as confirmatory runs (one line,
    exit 2, nothing written); with ``--pilot`` judged for planning, and ``normbench-plan`` reads the
    ``per_run.csv`` it writes."""
    from normbench.analysis.judging.plan_cli import main as plan
    from normbench.analysis.leaderboard.leaderboard_report import main

    pilot = tuple(load_rules("leaderboard_cpu").pilot_seeds)
    sweep = leaderboard_sweep(tmp_path / "sweep", pilot)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # (a warning: no git record)
    assert len(errors) == 1 and "pilot seeds" in errors[0] and not out.exists()
    assert main([str(sweep), "--out", str(out), "--pilot"]) == 0
    assert (out / "per_run.csv").is_file() and (out / "claims.csv").is_file()
    capsys.readouterr()
    plan(["leaderboard_cpu", "--pilot", str(out / "per_run.csv"), "--seconds-per-run", "60"])
    table = capsys.readouterr().out  # the images cell's claims: full-scale only since the real pilot
    assert "leaderboard_cpu: 10 pilot runs, seeds [100, 101, 102]" in table
    assert "resnet8_gn: full-scale only (needs n ≈ 31)" in table
