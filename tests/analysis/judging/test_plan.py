"""The pilot-based plan (normbench.analysis.judging.plan) on pilots whose spread is known exactly: n is
sized from the upper 80 % confidence limit of each arm's sd (scipy's χ² quantile, by hand here),
pooled over the tables of earlier attempts, and each claim states what the seeds it runs detect at
the family's Holm level."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from normbench.analysis.judging.plan import ClaimPlanInput, PlanInput, plan_claims, plan_table
from normbench.analysis.judging.power import n_for_power, n_for_tost


def upper(sd: float, df: int) -> float:
    """The upper one-sided 80 % confidence limit of σ from a sample sd on df degrees of freedom."""
    return sd * math.sqrt(df / sps.chi2.ppf(0.2, df))


def pilot(sd: float, mean: float = 0.0, n: int = 6, seed: int = 0) -> list[float]:
    """n values whose sample mean and sample sd (ddof 1) are exactly ``mean`` and ``sd``."""
    z = np.random.default_rng(seed).normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(mean + sd * z)


def test_sd_one_effect_one_gives_the_textbook_n_at_the_point_sd_and_more_at_its_upper_limit() -> None:
    claim = ClaimPlanInput("x", "greater", "welch", effect=1.0)
    values = {"x": (pilot(1.0, 1.0), pilot(1.0, seed=1))}
    (point,) = plan_claims(PlanInput((claim,)), values, "cpu", 60.0, sd_level=None)
    assert (point.sd_a, point.sd_b) == pytest.approx((1.0, 1.0), rel=1e-12)
    assert point.alpha == 0.05 and point.n == 17 and point.power >= 0.8
    assert point.runs == 34 and point.cpu_min == pytest.approx(34 * 60 / 2 / 60) and point.fits
    # the detectable difference at 5 seeds: (t_{.975} + t_{.8})·sqrt(2/5) on 8 df
    assert point.detectable == pytest.approx((sps.t.ppf(0.975, 8) + sps.t.ppf(0.8, 8)) * math.sqrt(2 / 5), rel=1e-9)
    (row,) = plan_claims(PlanInput((claim,)), values, "cpu", 60.0)  # six seeds per arm: 5 df
    u = upper(1.0, 5)
    assert (row.sd_upper_a, row.sd_upper_b) == pytest.approx((u, u), rel=1e-9) and row.df == (5, 5)
    assert row.n == n_for_power(1.0, u, u, 0.05) and row.n > 17 and row.power >= 0.8
    assert row.detectable == pytest.approx((sps.t.ppf(0.975, 8) + sps.t.ppf(0.8, 8)) * u * math.sqrt(2 / 5), rel=1e-9)
    (tight,) = plan_claims(PlanInput((claim,)), values, "cpu", 60.0, budget_min=10)
    assert not tight.fits and tight.n_run == 10  # 10 min × 60 s × 2 cores / (60 s × 2 runs per seed)


def test_holm_family_plans_at_alpha_over_m_and_the_plan_holds_in_simulation() -> None:
    """Four claims in one family: each at α/4; at the planned n, Welch at α/4 rejects ≥ 80 % of
    4000 simulated experiments whose sds are the pilot's upper limits; the detectable difference at
    the n run is (t_{1−α/8} + t_{.8})·SE on the Welch–Satterthwaite df, by hand."""
    claims = tuple(ClaimPlanInput(f"c{i}", "less", "welch", effect=-0.5) for i in range(4))
    values = {c.id: (pilot(0.3, seed=2), pilot(0.6, seed=3)) for c in claims}
    rows = plan_claims(PlanInput(claims), values, "cpu", 30.0)
    sa, sb = upper(0.3, 5), upper(0.6, 5)
    n = n_for_power(0.5, sa, sb, 0.0125)
    assert all(r.alpha == pytest.approx(0.0125) and r.n == n == r.n_run for r in rows)
    assert n > n_for_power(0.5, sa, sb, 0.05)
    rng = np.random.default_rng(43)
    a, b = rng.normal(0.5, sa, (4000, n)), rng.normal(0.0, sb, (4000, n))
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    t, df = (a.mean(axis=1) - b.mean(axis=1)) / np.sqrt(va + vb), (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))
    assert float((2 * sps.t.sf(np.abs(t), df) < 0.0125).mean()) >= 0.8 - 4 * math.sqrt(0.16 / 4000)
    se2 = (sa**2 + sb**2) / n
    nu = se2**2 / (((sa**2 / n) ** 2 + (sb**2 / n) ** 2) / (n - 1))
    by_hand = (sps.t.ppf(1 - 0.0125 / 2, nu) + sps.t.ppf(0.8, nu)) * math.sqrt(se2)
    assert rows[0].detectable_run == pytest.approx(by_hand, rel=1e-9) and rows[0].detectable_run <= 0.5


def test_tables_of_earlier_attempts_pool_per_arm_with_their_degrees_of_freedom() -> None:
    """Two tables of one arm (3 and 6 seeds, means 100 apart): the sd is pooled around each table's
    own mean on 2 + 5 df, and n is sized from its upper limit on 7 df."""
    claim = ClaimPlanInput("x", "greater", "welch", effect=1.0)
    a1, a2, b1, b2 = pilot(1.0, 100.0, n=3, seed=9), pilot(2.0, n=6, seed=10), pilot(1.0, n=3, seed=11), pilot(
        1.0, n=6, seed=12)  # fmt: skip
    (row,) = plan_claims(PlanInput((claim,)), {"x": ([a1, a2], [b1, b2])}, "cpu", 60.0)
    pooled_a = math.sqrt((2 * 1.0 + 5 * 4.0) / 7)
    assert row.sd_a == pytest.approx(pooled_a, rel=1e-12) and row.sd_b == pytest.approx(1.0, rel=1e-12)
    assert row.df == (7, 7) and row.pilot_n == (9, 9)
    assert row.n == n_for_power(1.0, upper(pooled_a, 7), upper(1.0, 7), 0.05)


def test_a_pilot_with_fewer_than_three_seeds_per_arm_is_refused() -> None:
    claim = ClaimPlanInput("x", "greater", "welch", effect=1.0)
    with pytest.raises(ValueError) as err:
        plan_claims(PlanInput((claim,)), {"x": ([1.0, 2.0, 3.0], [1.0, float("inf"), 2.0])}, "cpu", 60)
    assert str(err.value).startswith("too few pilot seeds: claim x has 3 and 2 finite values")


def test_paired_claims_plan_on_the_differences_and_need_one_run_per_seed() -> None:
    b = pilot(2.0, seed=4)
    diff = pilot(0.4, seed=5)
    a = [x + d for x, d in zip(b, diff, strict=True)]
    (row,) = plan_claims(PlanInput((ClaimPlanInput("p", "greater", "paired", effect=0.3),)), {"p": (a, b)}, "cpu", 60)
    assert row.sd_a == pytest.approx(0.4, rel=1e-12) and math.isnan(row.sd_b) and row.df == (5, 5)
    assert row.n == n_for_power(0.3, upper(0.4, 5), None, 0.05, test="paired") and row.runs == row.n


def test_ratio_claims_plan_on_the_logs() -> None:
    a, b = np.exp(pilot(0.05, 0.1, seed=6)), np.exp(pilot(0.08, seed=7))
    claim = ClaimPlanInput("r", "less", "welch_log", effect=1 / 1.1, ratio=True)
    (row,) = plan_claims(PlanInput((claim,)), {"r": (list(a), list(b))}, "cpu", 60)
    assert (row.sd_a, row.sd_b) == pytest.approx((0.05, 0.08), rel=1e-9) and row.target == pytest.approx(1.1)
    assert row.n == n_for_power(1.1, upper(0.05, 5), upper(0.08, 5), 0.05, test="welch_log")
    assert row.detectable > 1


def test_equivalence_plans_tost_and_says_when_min_seeds_cannot_pass() -> None:
    claims = (ClaimPlanInput("e", "equivalent", "welch", margin=0.5), ClaimPlanInput("f", "equivalent", "welch",
              margin=3.0))  # fmt: skip
    values = {"e": (pilot(1.0), pilot(1.0, seed=8)), "f": (pilot(1.0), pilot(1.0, seed=8))}
    e, f = plan_claims(PlanInput(claims, min_seeds=5), values, "cpu", 60, budget_min=1000)
    u = upper(1.0, 5)
    assert e.n == n_for_tost(0.5, u, u, 0.025) and e.power >= 0.8 and e.planned
    t = sps.t.ppf(1 - 0.025, 8)
    assert e.tost_room == pytest.approx(0.5 - t * u * math.sqrt(2 / 5), rel=1e-9) and e.tost_room < 0
    assert f.tost_room == pytest.approx(3.0 - t * u * math.sqrt(2 / 5), rel=1e-9) and f.tost_room > 0


def test_an_equivalence_whose_tost_cannot_pass_within_the_budget_is_not_planned() -> None:
    """Margin 1.2 on sds whose upper limits are 1.46 needs n ≈ 33; the 45-min budget at 120 s a run
    affords 22 seeds per arm. The plan says so and gives the n it needs; the power it states at 22
    seeds, a true difference of 0, is what 4000 simulated TOSTs (Welch, α/2 for the family of two)
    pass."""
    claims = (ClaimPlanInput("e", "equivalent", "welch", margin=1.2), ClaimPlanInput("g", "greater", "welch",
              effect=5.0))  # fmt: skip
    values = {"e": (pilot(1.0), pilot(1.0, seed=8)), "g": (pilot(1.0), pilot(1.0, seed=8))}
    e, g = plan_claims(PlanInput(claims), values, "cpu", 120)
    assert not e.planned and g.planned and e.n is not None and e.n > 22 and e.n_run == 22 and e.power_run < 0.8
    assert e.note == f"equivalence not planned: TOST at n = 22 has power {e.power_run:.2g} at a true difference of " \
        f"0; it needs n = {e.n} per arm"  # fmt: skip
    u, n = upper(1.0, 5), 22
    rng = np.random.default_rng(5)
    a, b = rng.normal(0.0, u, (4000, n)), rng.normal(0.0, u, (4000, n))
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    se, df = np.sqrt(va + vb), (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))
    d, crit = a.mean(axis=1) - b.mean(axis=1), sps.t.ppf(1 - 0.025, df)
    simulated = float(((d - crit * se > -1.2) & (d + crit * se < 1.2)).mean())
    assert e.power_run == pytest.approx(simulated, abs=4 * math.sqrt(max(simulated * (1 - simulated), 0.01) / 4000))


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
    assert "upper 80% limit" in table[0] and "detectable at n run (Holm α)" in table[0]


@pytest.mark.parametrize(
    "claim, values, name",
    [(ClaimPlanInput("x", "bigger", "welch", effect=1.0), {"x": ([1, 2], [1, 2])}, "relation='bigger'"),
     (ClaimPlanInput("x", "greater", "welch"), {"x": ([1, 2], [1, 2])}, "effect=None"),
     (ClaimPlanInput("x", "equivalent", "welch_log", margin=0.9), {"x": ([1, 2], [1, 2])}, "margin=0.9"),
     (ClaimPlanInput("x", "greater", "welch", effect=1.0), {"y": ([1, 2], [1, 2])}, "claim(s) x"),
     (ClaimPlanInput("x", "greater", "paired", effect=1.0), {"x": ([1, 2, 3], [1, 2])}, "3 and 2"),
     (ClaimPlanInput("x", "greater", "welch", effect=1.0), {"x": ([1, 2, 4], [1, 2, 4])}, "seconds_per_run=0")],
)  # fmt: skip
def test_bad_plan_inputs_raise_one_line_errors(claim: ClaimPlanInput, values: dict, name: str) -> None:
    with pytest.raises(ValueError) as err:
        plan_claims(PlanInput((claim,)), values, "cpu", 0 if "seconds" in name else 60)
    assert name in str(err.value) and "valid" in str(err.value) and "\n" not in str(err.value)
