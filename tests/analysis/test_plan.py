"""The pilot-based plan (normbench.analysis.plan) on pilots whose spread is known exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from normbench.analysis.plan import ClaimPlanInput, PlanInput, plan_claims, plan_table
from normbench.analysis.power import n_for_power, n_for_tost


def pilot(sd: float, mean: float = 0.0, n: int = 6, seed: int = 0) -> list[float]:
    """n values whose sample mean and sample sd (ddof 1) are exactly ``mean`` and ``sd``."""
    z = np.random.default_rng(seed).normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(mean + sd * z)


def test_sd_one_effect_one_gives_the_textbook_n_and_its_cost() -> None:
    claim = ClaimPlanInput("x", "greater", "welch", effect=1.0)
    (row,) = plan_claims(PlanInput((claim,)), {"x": (pilot(1.0, 1.0), pilot(1.0, seed=1))}, "cpu", 60.0)
    assert (row.sd_a, row.sd_b) == pytest.approx((1.0, 1.0), rel=1e-12)
    assert row.alpha == 0.05 and row.n == 17 and row.power >= 0.8
    assert row.runs == 34 and row.cpu_min == pytest.approx(34 * 60 / 2 / 60) and row.fits
    # the detectable difference at 5 seeds: (t_{.975} + t_{.8})·sqrt(2/5) on 8 df
    assert row.detectable == pytest.approx((sps.t.ppf(0.975, 8) + sps.t.ppf(0.8, 8)) * math.sqrt(2 / 5), rel=1e-9)
    (tight,) = plan_claims(PlanInput((claim,)), {"x": (pilot(1.0), pilot(1.0))}, "cpu", 60.0, budget_min=10)
    assert not tight.fits


def test_holm_family_plans_at_alpha_over_k_and_the_plan_holds_in_simulation() -> None:
    claims = tuple(ClaimPlanInput(f"c{i}", "less", "welch", effect=-0.5) for i in range(4))
    values = {c.id: (pilot(0.3, seed=2), pilot(0.6, seed=3)) for c in claims}
    rows = plan_claims(PlanInput(claims), values, "cpu", 30.0)
    n = n_for_power(0.5, 0.3, 0.6, 0.0125)
    assert all(r.alpha == pytest.approx(0.0125) and r.n == n for r in rows) and n > n_for_power(0.5, 0.3, 0.6, 0.05)
    # 4000 simulated experiments at the planned n, true difference 0.5: Welch at 0.0125 rejects ≥ 80 %
    rng = np.random.default_rng(43)
    a, b = rng.normal(0.5, 0.3, (4000, n)), rng.normal(0.0, 0.6, (4000, n))
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    t, df = (a.mean(axis=1) - b.mean(axis=1)) / np.sqrt(va + vb), (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))
    assert float((2 * sps.t.sf(np.abs(t), df) < 0.0125).mean()) >= 0.8 - 4 * math.sqrt(0.16 / 4000)


def test_paired_claims_plan_on_the_differences_and_need_one_run_per_seed() -> None:
    b = pilot(2.0, seed=4)
    diff = pilot(0.4, seed=5)
    a = [x + d for x, d in zip(b, diff, strict=True)]
    (row,) = plan_claims(PlanInput((ClaimPlanInput("p", "greater", "paired", effect=0.3),)), {"p": (a, b)}, "cpu", 60)
    assert row.sd_a == pytest.approx(0.4, rel=1e-12) and math.isnan(row.sd_b)
    assert row.n == n_for_power(0.3, 0.4, None, 0.05, test="paired") and row.runs == row.n


def test_ratio_claims_plan_on_the_logs() -> None:
    a, b = np.exp(pilot(0.05, 0.1, seed=6)), np.exp(pilot(0.08, seed=7))
    claim = ClaimPlanInput("r", "less", "welch_log", effect=1 / 1.1, ratio=True)
    (row,) = plan_claims(PlanInput((claim,)), {"r": (list(a), list(b))}, "cpu", 60)
    assert (row.sd_a, row.sd_b) == pytest.approx((0.05, 0.08), rel=1e-9) and row.target == pytest.approx(1.1)
    assert row.n == n_for_power(1.1, 0.05, 0.08, 0.05, test="welch_log")
    assert row.detectable > 1


def test_equivalence_plans_tost_and_says_when_min_seeds_cannot_pass() -> None:
    claims = (ClaimPlanInput("e", "equivalent", "welch", margin=0.5), ClaimPlanInput("f", "equivalent", "welch",
              margin=3.0))  # fmt: skip
    values = {"e": (pilot(1.0), pilot(1.0, seed=8)), "f": (pilot(1.0), pilot(1.0, seed=8))}
    e, f = plan_claims(PlanInput(claims, min_seeds=5), values, "cpu", 60)
    assert e.n == n_for_tost(0.5, 1.0, 1.0, 0.025) and e.power >= 0.8
    t = sps.t.ppf(1 - 0.025, 8)
    assert e.tost_room == pytest.approx(0.5 - t * math.sqrt(2 / 5), rel=1e-9) and e.tost_room < 0
    assert f.tost_room == pytest.approx(3.0 - t * math.sqrt(2 / 5), rel=1e-9) and f.tost_room > 0


def test_a_plan_out_of_reach_or_without_spread_says_so() -> None:
    claims = (ClaimPlanInput("tiny", "greater", "welch", effect=0.001), ClaimPlanInput("flat", "greater", "welch",
              effect=1.0), ClaimPlanInput("one_flat", "less", "welch", effect=-0.05))  # fmt: skip
    values = {"tiny": (pilot(1.0), pilot(1.0)), "flat": ([1.0] * 3, [2.0] * 3), "one_flat": ([0.01, 0.012, 0.011],
              [0.0] * 3)}  # fmt: skip
    rows = plan_claims(PlanInput(claims), values, "cpu", 60, n_max=100)
    assert rows[0].n is None and not rows[0].fits and rows[0].note == "n > 100"
    assert rows[1].n is None and rows[1].note == "pilot: no spread"
    # one arm constant (a share that is 0 in every run): sized on the other arm's spread
    assert rows[2].n == 2 and rows[2].sd_b == 0.0 and rows[2].power >= 0.8
    table = plan_table(rows).splitlines()
    assert len(table) == 2 + 3 and table[2].startswith("| tiny | welch |") and "| — |" in table[2]


@pytest.mark.parametrize(
    "claim, values, name",
    [(ClaimPlanInput("x", "bigger", "welch", effect=1.0), {"x": ([1, 2], [1, 2])}, "relation='bigger'"),
     (ClaimPlanInput("x", "greater", "welch"), {"x": ([1, 2], [1, 2])}, "effect=None"),
     (ClaimPlanInput("x", "equivalent", "welch_log", margin=0.9), {"x": ([1, 2], [1, 2])}, "margin=0.9"),
     (ClaimPlanInput("x", "greater", "welch", effect=1.0), {"y": ([1, 2], [1, 2])}, "claim(s) x"),
     (ClaimPlanInput("x", "greater", "paired", effect=1.0), {"x": ([1, 2, 3], [1, 2])}, "3 and 2")],
)  # fmt: skip
def test_bad_plan_inputs_raise_one_line_errors(claim: ClaimPlanInput, values: dict, name: str) -> None:
    with pytest.raises(ValueError) as err:
        plan_claims(PlanInput((claim,)), values, "cpu", 60)
    assert name in str(err.value) and "valid" in str(err.value) and "\n" not in str(err.value)
