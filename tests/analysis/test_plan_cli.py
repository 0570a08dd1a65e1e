"""``normbench-plan``: the rules' effects and the pilot's per_run.csv in, seeds per arm out — the
numbers checked against the power formula's known case (sd 1, effect 1: n = 17 per arm at α 0.05)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from normbench.analysis import rules_schema
from normbench.analysis.per_run import read_per_run, write_per_run
from normbench.analysis.plan_cli import main, sweep_minutes

RULES: dict[str, Any] = {
    "preset": "toy", "paper_title": "Toy 2026", "alpha": 0.05, "family": "holm", "min_seeds": 5,
    "scale": {"full": {"kind": "paper", "note": ""}, "cpu": {"kind": "reduced", "note": ""}},
    "pilot": {"seeds": [100, 101, 102]},
    "claims": [{
        "id": "bn_higher", "figure": "toy", "claim": "BN higher", "paper": "Toy 2026, Table 1",
        "measure": {"name": "final", "key": "val/acc"},
        "a": {"label": "BN", "select": {"norm.name": "bn"}}, "b": {"label": "none", "select": {"norm.name": "none"}},
        "relation": "greater", "better": "higher", "test": "welch",
        "effect": {"value": 1.0, "source": "Toy 2026, Table 1"},
    }],
}  # fmt: skip


def use_rules(monkeypatch: pytest.MonkeyPatch, rules: dict[str, Any], digest: str = "toyhash") -> dict[str, Any]:
    """``rules`` as every preset's rules, current under ``digest`` (whatever the hash helper is named)."""
    monkeypatch.setattr(rules_schema, "load_rules_data", lambda preset, *_, **__: rules)
    for name in ("rules_hash", "current_hash"):
        if callable(getattr(rules_schema, name, None)):
            monkeypatch.setattr(rules_schema, name, lambda preset: digest)
    return rules


@pytest.fixture
def toy_rules(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return use_rules(monkeypatch, dict(RULES))


def pilot_csv(path: Path, wall_s: float = 60.0) -> Path:
    """Three pilot seeds per arm whose values have a sample sd of exactly 1 in each arm."""
    rows = [{"source": f"runs/{norm}{seed}", "seed": seed, "status": "finished", "commit": "c", "rules_hash": "old",
             "norm.name": norm, "claim:bn_higher": base + (seed - 101), "final:wall_time_s": wall_s}
            for norm, base in (("bn", 10.0), ("none", 0.0)) for seed in (100, 101, 102)]  # fmt: skip
    return write_per_run(rows, path)


def test_plan_reads_effect_and_pilot_spread(toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "per_run.csv"))]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| bn_higher"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "17" in cells  # n per arm for sd 1, effect 1, two-sided α 0.05, 80 % power (the textbook 17)
    # the whole sweep: 2 settings × 17 seeds = 34 runs × 60 s / 2 cores = 17 min
    assert "34 runs" in out and "≈ 17 min, fits the 45 min budget" in out
    assert "measured under rules old (now toyhash)" in out


def test_plan_without_an_effect_is_one_line(toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    toy_rules["claims"] = [{k: v for k, v in RULES["claims"][0].items() if k != "effect"}]
    assert main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "per_run.csv"))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bn_higher: effect=None" in err


def test_sweep_minutes_counts_settings_over_seeds() -> None:
    rows = [{"seed": s} for s in (100, 101, 102) for _ in range(4)]  # 4 settings, 3 seeds
    assert sweep_minutes(rows, 10, 120.0) == (40, 40.0)


def test_a_full_scale_only_claim_leaves_the_cpu_plan_and_its_family(
    toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A second claim marked full-scale only is not planned on the CPU variant and does not halve
    the first one's α: its n stays the textbook 17 (α 0.05, not 0.025)."""
    second = {**RULES["claims"][0], "id": "bn_higher_early", "full_scale_only": {"needs_n": 211, "why": "too noisy"}}
    toy_rules["claims"] = [RULES["claims"][0], second]
    rows = read_per_run(pilot_csv(tmp_path / "one.csv"))
    pilot = write_per_run([{**r, "claim:bn_higher_early": r["claim:bn_higher"]} for r in rows], tmp_path / "two.csv")
    assert main(["toy_cpu", "--pilot", str(pilot)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| bn_higher |"))
    assert "17" in [c.strip() for c in row.strip("|").split("|")]
    assert not any(line.startswith("| bn_higher_early") for line in out.splitlines())
    assert "bn_higher_early: full-scale only (needs n ≈ 211)" in out
