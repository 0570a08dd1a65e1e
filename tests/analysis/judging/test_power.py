"""Power and sample size (normbench.analysis.judging.power) against simulated experiments and known formulas.

Each simulation draws 4000 experiments with a fixed seed and runs the very test `stats.compare`
runs (Welch's t with the sample df, the one-sample t on differences, TOST); the computed power must
lie within 4 binomial standard errors of the simulated rejection rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from normbench.analysis.judging.power import (
    alpha_for_family,
    detectable,
    n_for_power,
    n_for_tost,
    pooled_sd,
    power_diff,
    power_tost,
    rank_min_p,
    sd_upper,
)
from normbench.analysis.judging.stats import compare

SIMS = 4000


def tolerance(p: float) -> float:
    return 4 * math.sqrt(max(p * (1 - p), 0.01) / SIMS)


def welch_t(a: np.ndarray, b: np.ndarray, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Welch's t of (a − b − shift) per row and its Welch–Satterthwaite df (the sample's)."""
    n = a.shape[1]
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    t = (a.mean(axis=1) - b.mean(axis=1) - shift) / np.sqrt(va + vb)
    return t, (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))


def simulate(delta: float, sd_a: float, sd_b: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(delta, sd_a, (SIMS, n)), rng.normal(0.0, sd_b, (SIMS, n))


@pytest.mark.parametrize(
    "delta, sd_a, sd_b, n, alpha, sides",
    [(1.0, 1.0, 1.0, 10, 0.05, 2), (0.8, 0.5, 1.5, 12, 0.05, 2), (0.02, 0.01, 0.02, 6, 0.0125, 2),
     (0.7, 1.0, 1.0, 8, 0.05, 1), (0.0, 1.0, 2.0, 5, 0.05, 2)],
)  # fmt: skip
def test_welch_power_matches_simulated_welch_tests(delta, sd_a, sd_b, n, alpha, sides) -> None:
    a, b = simulate(delta, sd_a, sd_b, n, seed=n)
    t, df = welch_t(a, b)
    p = sps.t.sf(t, df) if sides == 1 else 2 * sps.t.sf(np.abs(t), df)
    simulated = float((p < alpha).mean())
    computed = power_diff(delta, sd_a, sd_b, n, alpha, sides)
    assert computed == pytest.approx(simulated, abs=tolerance(simulated))


def test_welch_power_agrees_with_stats_compare_on_a_few_hundred_experiments() -> None:
    """The simulation's vectorized Welch test is the test `compare` runs (same p per experiment)."""
    a, b = simulate(0.9, 1.0, 0.6, 7, seed=3)
    t, df = welch_t(a[:50], b[:50])
    ours = 2 * sps.t.sf(np.abs(t), df)
    theirs = [compare(x, y, "welch").p for x, y in zip(a[:50], b[:50], strict=True)]
    assert ours == pytest.approx(theirs, rel=1e-9)


def test_welch_log_power_is_welch_power_on_the_logs() -> None:
    rng = np.random.default_rng(7)
    n, ratio, sd = 6, 1.15, 0.08
    a, b = np.exp(rng.normal(math.log(ratio), sd, (SIMS, n))), np.exp(rng.normal(0.0, sd, (SIMS, n)))
    t, df = welch_t(np.log(a), np.log(b))
    simulated = float((2 * sps.t.sf(np.abs(t), df) < 0.05).mean())
    computed = power_diff(ratio, sd, sd, n, 0.05, test="welch_log")
    assert computed == pytest.approx(simulated, abs=tolerance(simulated))
    assert computed == pytest.approx(power_diff(math.log(ratio), sd, sd, n, 0.05), rel=1e-12)


def test_welch_power_with_one_constant_arm_matches_simulated_welch_tests() -> None:
    """An arm with no spread (a share that is 0 in every run): Welch's test rests on the other arm
    alone (df = n − 1); the power of scipy's Welch test on simulated data agrees, in either order."""
    n, delta, sd = 5, 0.4, 0.5
    a = np.random.default_rng(12).normal(delta, sd, (SIMS, n))
    b = np.zeros((SIMS, n))
    p = sps.ttest_ind(a, b, axis=1, equal_var=False).pvalue
    simulated = float((p < 0.05).mean())
    computed = power_diff(delta, sd, 0.0, n, 0.05)
    assert computed == pytest.approx(simulated, abs=tolerance(simulated))
    assert power_diff(-delta, 0.0, sd, n, 0.05) == pytest.approx(computed, rel=1e-12)


def test_paired_power_matches_simulated_one_sample_t_on_the_differences() -> None:
    rng = np.random.default_rng(11)
    n, delta, sd_diff = 8, 0.5, 0.6
    d = rng.normal(delta, sd_diff, (SIMS, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    simulated = float((2 * sps.t.sf(np.abs(t), n - 1) < 0.05).mean())
    computed = power_diff(delta, sd_diff, None, n, 0.05, test="paired")
    assert computed == pytest.approx(simulated, abs=tolerance(simulated))


@pytest.mark.parametrize(
    "margin, true_diff, sd_a, sd_b, n, alpha",
    [(1.0, 0.0, 1.0, 1.0, 15, 0.05), (0.5, 0.1, 0.4, 0.6, 10, 0.05), (1.0, 0.0, 1.0, 1.0, 6, 0.05),
     (0.3, -0.05, 0.2, 0.2, 8, 0.0125)],
)  # fmt: skip
def test_tost_power_matches_simulated_two_one_sided_tests(margin, true_diff, sd_a, sd_b, n, alpha) -> None:
    a, b = simulate(true_diff, sd_a, sd_b, n, seed=100 + n)
    t_low, df = welch_t(a, b, shift=-margin)
    t_high, _ = welch_t(a, b, shift=margin)
    p_eq = np.maximum(sps.t.sf(t_low, df), sps.t.cdf(t_high, df))
    simulated = float((p_eq < alpha).mean())
    computed = power_tost(margin, sd_a, sd_b, n, alpha, true_diff)
    assert computed == pytest.approx(simulated, abs=tolerance(simulated))


def test_n_for_power_approaches_the_normal_formula_from_above() -> None:
    """n = 2(z_{1−α/2} + z_{power})²σ²/δ² (known σ): the t-based n is at least that and tends to it."""
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    for delta, extra in ((1.0, 2), (0.5, 2), (0.2, 2), (0.1, 2)):
        normal = 2 * z**2 / delta**2
        n = n_for_power(delta, 1.0, 1.0, 0.05, n_max=5000)
        assert normal <= n <= math.ceil(normal) + extra
        assert power_diff(delta, 1.0, 1.0, n, 0.05) >= 0.8 > power_diff(delta, 1.0, 1.0, n - 1, 0.05)
    assert n_for_power(1.0, 1.0, 1.0, 0.05) == 17  # the textbook answer for d = 1 (e.g. Cohen 1988)
    assert n_for_power(0.5, 1.0, 1.0, 0.05) == 64  # and for d = 0.5


def test_n_for_power_verified_by_simulation_at_the_planned_n() -> None:
    n = n_for_power(1.0, 1.0, 1.0, 0.05)
    a, b = simulate(1.0, 1.0, 1.0, n, seed=17)
    t, df = welch_t(a, b)
    simulated = float((2 * sps.t.sf(np.abs(t), df) < 0.05).mean())
    assert simulated >= 0.8 - tolerance(0.8)


def test_n_for_tost_matches_the_normal_formula_for_large_n() -> None:
    """At true difference 0: n ≈ 2(z_{1−α} + z_{1−(1−power)/2})²σ²/m² (known σ), approached from above."""
    z = sps.norm.ppf(0.95) + sps.norm.ppf(0.9)
    for margin in (0.5, 0.2, 0.1):
        normal = 2 * z**2 / margin**2
        n = n_for_tost(margin, 1.0, 1.0, 0.05, n_max=10000)
        assert normal <= n <= math.ceil(normal * 1.04) + 2


def test_effect_zero_gives_power_alpha_and_power_grows_with_effect_and_n() -> None:
    for alpha in (0.05, 0.01):
        assert power_diff(0.0, 1.0, 2.0, 7, alpha) == pytest.approx(alpha, rel=1e-9)
    assert power_diff(0.0, 1.0, 2.0, 7, 0.05, sides=1) == pytest.approx(0.05, rel=1e-9)
    assert power_diff(0.5, 1, 1, 5, 0.05) < power_diff(1.0, 1, 1, 5, 0.05) < power_diff(1.0, 1, 1, 10, 0.05)
    assert power_diff(-1.0, 1, 1, 10, 0.05) == pytest.approx(power_diff(1.0, 1, 1, 10, 0.05), rel=1e-12)


def test_n_not_reachable_within_n_max_is_none() -> None:
    assert n_for_power(0.01, 1.0, 1.0, 0.05, n_max=50) is None
    assert n_for_tost(0.01, 1.0, 1.0, 0.05, n_max=50) is None


def test_rank_uses_welch_but_zero_where_the_exact_test_cannot_reach_alpha() -> None:
    """Two arms with no overlap give scipy's exact Mann–Whitney p = 2/C(2n, n), its smallest."""
    for n in (3, 4, 5):
        p = sps.mannwhitneyu(np.arange(n) + 10.0, np.arange(n), method="exact").pvalue
        assert rank_min_p(n) == pytest.approx(p, rel=1e-12)
    assert power_diff(5.0, 1, 1, 3, 0.05, test="rank") == 0.0  # 2/20 = 0.1 > 0.05
    assert power_diff(1.0, 1, 1, 10, 0.05, test="rank") == power_diff(1.0, 1, 1, 10, 0.05)
    assert n_for_power(5.0, 1, 1, 0.0125, test="rank") == 5  # 2/70 > 0.0125, 2/252 < 0.0125


def test_detectable_is_stats_compare_detectable() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1.0, 6), rng.normal(0, 0.5, 6)
    c = compare(a, b, "welch")
    assert detectable(a.std(ddof=1), b.std(ddof=1), 6, 0.05) == pytest.approx(c.detectable, rel=1e-12)
    # and the detectable difference is (close to) the effect with 80 % power
    d = detectable(1.0, 1.0, 10, 0.05)
    assert power_diff(d, 1.0, 1.0, 10, 0.05) == pytest.approx(0.8, abs=0.02)


def test_alpha_for_family_is_holms_first_step() -> None:
    assert alpha_for_family(0.05, 4) == pytest.approx(0.0125)
    assert alpha_for_family(0.05, 1) == 0.05


@pytest.mark.parametrize(
    "call, name",
    [(lambda: power_diff(1, 0, 0, 5, 0.05), "sd_a=0"), (lambda: power_diff(1, -1, 1, 5, 0.05), "sd_a=-1"),
     (lambda: power_diff(1, 1, 1, 1, 0.05), "n=1"),
     (lambda: power_diff(1, 1, 1, 5, 1.5), "alpha=1.5"), (lambda: power_diff(1, 1, 1, 5, 0.05, sides=3), "sides=3"),
     (lambda: power_diff(1, 1, 1, 5, 0.05, test="anova"), "test='anova'"),
     (lambda: power_diff(-1.1, 1, 1, 5, 0.05, test="welch_log"), "effect=-1.1"),
     (lambda: power_diff(1, 1, 1, 5, 0.05, test="paired"), "sd_b=1"),
     (lambda: power_tost(0, 1, 1, 5, 0.05), "margin=0"), (lambda: power_tost(0.9, 1, 1, 5, 0.05, test="welch_log"),
     "margin=0.9"), (lambda: n_for_power(1, 1, 1, 0.05, power=1.0), "power=1.0"),
     (lambda: alpha_for_family(0.05, 0), "k=0"), (lambda: power_diff(1, 1, float("nan"), 5, 0.05), "sd_b=nan")],
)  # fmt: skip
def test_bad_inputs_raise_one_line_errors_naming_the_value(call, name: str) -> None:
    with pytest.raises(ValueError) as err:
        call()
    message = str(err.value)
    assert name in message and "valid" in message and "\n" not in message


@pytest.mark.parametrize("k", [3, 5, 12])
def test_sd_upper_is_the_chi_square_limit_and_covers_sigma_80_percent_of_the_time(k: int) -> None:
    """s·sqrt((k−1)/χ²_{0.2,k−1}) by scipy's quantile; over 4000 simulated pilots of k seeds
    (σ = 2), the limit lies at or above σ in 80 % of them (within 4 binomial standard errors)."""
    assert sd_upper(1.5, k - 1) == pytest.approx(1.5 * math.sqrt((k - 1) / sps.chi2.ppf(0.2, k - 1)), rel=1e-12)
    s = np.random.default_rng(7 + k).normal(0.0, 2.0, (SIMS, k)).std(axis=1, ddof=1)
    covered = float(np.mean([sd_upper(float(v), k - 1) >= 2.0 for v in s]))
    assert covered == pytest.approx(0.8, abs=tolerance(0.8))
    assert sd_upper(1.0, 2) > 2 and sd_upper(1.0, 2, level=0.5) == pytest.approx(math.sqrt(2 / sps.chi2.ppf(0.5, 2)))


def test_pooled_sd_adds_the_degrees_of_freedom_and_ignores_a_shift_between_groups() -> None:
    g1, g2, g3 = [1.0, 2.0, 4.0], [10.0, 13.0, 11.0, 17.0], [5.0]
    by_hand = math.sqrt((2 * np.var(g1, ddof=1) + 3 * np.var(g2, ddof=1)) / 5)
    assert pooled_sd([g1, g2, g3]) == (pytest.approx(by_hand, rel=1e-12), 5)
    assert pooled_sd([g1, [x + 100 for x in g1]])[0] == pytest.approx(float(np.std(g1, ddof=1)), rel=1e-12)
    sd, df = pooled_sd([[1.0], []])
    assert math.isnan(sd) and df == 0


@pytest.mark.parametrize("call, name", [(lambda: sd_upper(-1.0, 2), "sd=-1.0"), (lambda: sd_upper(1.0, 0), "df=0"),
                                        (lambda: sd_upper(1.0, 2, level=1.0), "level=1.0")])  # fmt: skip
def test_sd_upper_refuses_bad_inputs_in_one_line(call, name: str) -> None:
    with pytest.raises(ValueError) as err:
        call()
    assert name in str(err.value) and "\n" not in str(err.value)
