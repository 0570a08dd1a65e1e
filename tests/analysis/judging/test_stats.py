"""The claim statistics against scipy and against cases whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from normbench.analysis.judging.stats import (
    DIFFERENT,
    EQUIVALENT,
    INCONCLUSIVE,
    OPPOSITE,
    SUPPORTED,
    compare,
    directional_verdict,
    equivalence_verdict,
    hodges_lehmann,
    holm,
    summarize_arm,
)

RNG = np.random.default_rng(20261201)
CASES = [(RNG.normal(mu, sd_a, n_a), RNG.normal(0.0, sd_b, n_b)) for mu, sd_a, sd_b, n_a, n_b in
         ((0.0, 1.0, 1.0, 5, 5), (1.5, 1.0, 3.0, 5, 7), (-0.4, 0.2, 0.1, 6, 5), (3.0, 2.0, 0.5, 8, 5))]  # fmt: skip


@pytest.mark.parametrize("a, b", CASES)
def test_welch_interval_and_p_match_scipy(a: np.ndarray, b: np.ndarray) -> None:
    c = compare(a, b, "welch")
    ref = sps.ttest_ind(a, b, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert c.estimate == pytest.approx(a.mean() - b.mean(), rel=1e-12)
    assert (c.lo, c.hi) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert c.p == pytest.approx(ref.pvalue, rel=1e-10)


@pytest.mark.parametrize("a, b", CASES)
def test_welch_log_is_welch_on_logs_as_a_ratio(a: np.ndarray, b: np.ndarray) -> None:
    pa, pb = np.exp(a), np.exp(b)
    c = compare(pa, pb, "welch_log")
    ci = sps.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert c.ratio and c.estimate == pytest.approx(math.exp(a.mean() - b.mean()), rel=1e-10)
    assert (c.lo, c.hi) == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-10)
    arm = summarize_arm(pa, "welch_log")
    assert arm.centre == pytest.approx(math.exp(a.mean()), rel=1e-12)  # the geometric mean


@pytest.mark.parametrize("a, b", CASES)
def test_tost_matches_two_one_sided_scipy_tests_and_the_90_percent_interval(a: np.ndarray, b: np.ndarray) -> None:
    margin = 1.0
    c = compare(a, b, "welch", margin=margin)
    lower = sps.ttest_ind(a + margin, b, equal_var=False, alternative="greater").pvalue  # H0: d <= -margin
    upper = sps.ttest_ind(a - margin, b, equal_var=False, alternative="less").pvalue  # H0: d >= margin
    assert c.p_eq == pytest.approx(max(lower, upper), rel=1e-10)
    ci90 = sps.ttest_ind(a, b, equal_var=False).confidence_interval(0.90)
    assert (c.p_eq < 0.05) == (-margin < ci90.low and ci90.high < margin)  # TOST = the 90 % interval inside
    beyond = min(sps.ttest_ind(a - margin, b, equal_var=False, alternative="greater").pvalue,
                 sps.ttest_ind(a + margin, b, equal_var=False, alternative="less").pvalue)  # fmt: skip
    assert c.p_diff == pytest.approx(min(1.0, 2 * beyond), rel=1e-10)
    assert (c.p_diff < 0.05) == (c.lo > margin or c.hi < -margin)  # different = the 95 % interval outside


def test_hodges_lehmann_interval_is_dual_to_the_exact_mann_whitney_test() -> None:
    """0 lies outside the exact interval exactly when scipy's exact two-sided p is at most alpha."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        a = rng.normal(rng.uniform(0, 2.5), 1, rng.integers(3, 9))
        b = rng.normal(0, 1, rng.integers(3, 9))
        est, lo, hi = hodges_lehmann(a, b)
        p = sps.mannwhitneyu(a, b, method="exact").pvalue
        assert (lo > 0 or hi < 0) == (p <= 0.05)
        assert est == pytest.approx(np.median(np.subtract.outer(a, b)))
        assert compare(a, b, "rank").p == pytest.approx(p, rel=1e-12)


def test_hodges_lehmann_known_answer() -> None:
    """a = b + 10 with n = m = 5: every pairwise difference a_i - b_j lies in [6, 14]; the shift is 10,
    and P(U <= 2) = 4/252 <= 0.025 < P(U <= 3) = 7/252, so k = 3: the 3rd smallest and largest of the 25."""
    b = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    a = b + 10
    est, lo, hi = hodges_lehmann(a, b)
    d = np.sort(np.subtract.outer(a, b).ravel())
    assert est == 10.0 and (lo, hi) == (d[2], d[-3]) == (7.0, 13.0)


def test_a_diverged_run_switches_to_ranks_and_counts_as_the_worst() -> None:
    good = [0.6, 0.61, 0.62, 0.63, 0.64]
    c = compare([-math.inf, -math.inf, 0.7, 0.71, 0.72], good, "welch")  # 2 of 5 diverged (higher is better)
    assert c.test == "rank" and c.effect_size == pytest.approx(15 / 25)  # 3 x 5 pairs won of 25
    assert directional_verdict(c.estimate, 0.0, True, c.p, 0.05) == INCONCLUSIVE
    all_diverged = compare([math.inf] * 5, [1.0, 2.0, 3.0, 4.0, 5.0], "welch_log")  # lower is better: all worst
    assert all_diverged.test == "rank" and all_diverged.effect_size == 1.0 and all_diverged.p < 0.05


def test_holm_matches_the_step_down_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04 among m = 3: 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert holm([0.04, 0.01, 0.03, math.nan]) == pytest.approx([0.06, 0.03, 0.06, math.nan], nan_ok=True)
    assert holm([0.5, 0.9]) == [1.0, 1.0]


@pytest.mark.parametrize(
    "estimate, greater, p, verdict",
    [(1.0, True, 0.01, SUPPORTED), (-1.0, True, 0.01, OPPOSITE), (1.0, False, 0.01, OPPOSITE),
     (1.0, True, 0.2, INCONCLUSIVE), (-1.0, False, 0.049, SUPPORTED)],
)  # fmt: skip
def test_directional_vocabulary_is_symmetric(estimate: float, greater: bool, p: float, verdict: str) -> None:
    assert directional_verdict(estimate, 0.0, greater, p, 0.05) == verdict


def test_equivalence_vocabulary() -> None:
    assert equivalence_verdict(0.01, 1.0, 0.05) == EQUIVALENT
    assert equivalence_verdict(1.0, 0.01, 0.05) == DIFFERENT
    assert equivalence_verdict(0.2, 0.2, 0.05) == INCONCLUSIVE


def test_more_noise_makes_equivalence_harder_not_easier() -> None:
    """The old rule passed "comparable" whenever ranges overlapped, so noise helped; TOST is the other way."""
    base = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    quiet, noisy = (
        compare(0.1 * base, 0.1 * base[::-1] + 0.05, "welch", 0.5),
        compare(base, base[::-1] + 0.05, "welch", 0.5),
    )
    assert quiet.p_eq < 0.05 <= noisy.p_eq


def test_detectable_difference_is_the_80_percent_power_formula() -> None:
    a, b = CASES[1]
    c = compare(a, b, "welch")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    assert c.detectable == pytest.approx((sps.t.ppf(0.975, df) + sps.t.ppf(0.8, df)) * math.sqrt(va + vb))
    g = (a.mean() - b.mean()) / math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1))
                                          / (a.size + b.size - 2)) * (1 - 3 / (4 * (a.size + b.size) - 9))  # fmt: skip
    assert c.effect_size == pytest.approx(g)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="valid choices"):
        compare([1, 2], [3, 4], "bootstrap")
    with pytest.raises(ValueError, match="at least 2"):
        compare([1], [3, 4], "welch")
    with pytest.raises(ValueError, match="positive"):
        compare([1, -2], [3, 4], "welch_log")


def test_arms_without_spread() -> None:
    same = compare([0.4] * 5, [0.4] * 5, "welch")
    assert (same.estimate, same.lo, same.hi, same.p, same.effect_size) == (0.0, 0.0, 0.0, 1.0, 0.0)
    apart = compare([0.5] * 5, [0.4] * 5, "welch")
    assert apart.p == 0.0 and apart.effect_size == math.inf
    assert directional_verdict(apart.estimate, 0.0, True, apart.p, 0.05) == SUPPORTED


def test_an_arm_prints_diverged_only_for_a_run_that_diverged() -> None:
    assert summarize_arm([3.0], "welch").fmt() == "3 [-inf, inf]"  # one value: an unbounded interval
    assert summarize_arm([1.0, 2.0, math.inf], "welch").fmt() == "2 [1, diverged], 1 diverged"


PAIRED = [
    (x + RNG.normal(shift, 0.3, x.size), x)
    for shift, x in ((0.0, RNG.normal(70, 5, 5)), (0.5, RNG.normal(60, 10, 6)), (-1.0, RNG.normal(0, 1, 8)))
]


@pytest.mark.parametrize("a, b", PAIRED)
def test_paired_interval_p_and_tost_match_scipy_ttest_rel(a: np.ndarray, b: np.ndarray) -> None:
    """Two evaluations of the same runs: the seeds' shared spread drops out of the paired test."""
    c = compare(a, b, "paired", margin=0.5)
    ref = sps.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert c.estimate == pytest.approx((a - b).mean(), rel=1e-12)
    assert (c.lo, c.hi) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert c.p == pytest.approx(ref.pvalue, rel=1e-10)
    d = a - b
    lower = sps.ttest_1samp(d, -0.5, alternative="greater").pvalue
    upper = sps.ttest_1samp(d, 0.5, alternative="less").pvalue
    assert c.p_eq == pytest.approx(max(lower, upper), rel=1e-10)
    assert c.effect_size == pytest.approx(d.mean() / d.std(ddof=1) * (1 - 3 / (4 * (d.size - 1) - 1)), rel=1e-12)
    t = sps.t.ppf(0.975, d.size - 1) + sps.t.ppf(0.8, d.size - 1)
    assert c.detectable == pytest.approx(t * d.std(ddof=1) / math.sqrt(d.size), rel=1e-10)
    # the unpaired test cannot see a 0.5 shift under a spread of 10 between seeds; the paired one can
    if d.mean() > 0.3 and b.std() > 5:
        assert compare(a, b, "welch").p > 0.5 and c.p < 0.05


def test_paired_needs_one_value_per_seed_in_each_arm() -> None:
    with pytest.raises(ValueError, match="one value of each arm per seed, got 3 and 4"):
        compare([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], "paired")
