"""Power and sample size for the claim tests of `normbench.analysis.judging.stats`, planned before the runs.

Every function is pure and takes per-arm population standard deviations (in practice: a pilot's
sample standard deviations), the number of seeds ``n`` per arm and the level α at which the claim
is judged. Notation: σ_a, σ_b the arms' standard deviations, n seeds per arm,

    SE = sqrt(σ_a²/n + σ_b²/n),   ν = (σ_a²/n + σ_b²/n)² / ((σ_a²/n)²/(n−1) + (σ_b²/n)²/(n−1))

(the Welch–Satterthwaite degrees of freedom, with the population variances in place of the
sample ones). Per test (`stats.TESTS`):

- ``welch``: the statistic D/SÊ follows a noncentral t with ν degrees of freedom and noncentrality
  δ/SE for a true difference δ, so two-sided power = P(T > t_{1−α/2,ν}) + P(T < −t_{1−α/2,ν}),
  T ~ nct(ν, δ/SE) (one-sided: P(T > t_{1−α,ν}), δ counted in the claimed direction).
- ``welch_log``: the same on the logarithms: the effect is a ratio r (δ = ln r), σ_a, σ_b are the
  standard deviations of the logs.
- ``paired``: a one-sample t on the per-seed differences: σ_a is the differences' standard
  deviation (``sd_b`` must be None), SE = σ_a/√n, ν = n − 1.
- ``rank``: the Welch computation above, an approximation: under normal data Mann–Whitney has
  asymptotic relative efficiency 3/π ≈ 0.955 against t, so the true n is about 5 % larger. One
  exact limit is kept: with n per arm the exact two-sided p can never fall below 2/C(2n, n)
  (one-sided 1/C(2n, n)); where that exceeds α the power is 0.

Equivalence (TOST, ``power_tost``): both one-sided tests at α must reject, i.e.
D − t·SÊ > −m and D + t·SÊ < m with t = t_{1−α,ν}. Writing SÊ = SE·sqrt(X/ν), X ~ χ²_ν (exact
for ``paired``, the Satterthwaite approximation for Welch), and D ~ N(δ, SE²) independent of X,

    power = E_X[ max(0, Φ((m − δ − t·SÊ)/SE) − Φ((−m − δ + t·SÊ)/SE)) ],

integrated numerically over X (Owen's formulation; no normal approximation of the t): 96-point
Gauss–Legendre over the χ² quantile of X.

The spreads the plan sizes from (`sd_upper`, `pooled_sd`): a pilot's sample SD s on ν degrees of
freedom underestimates σ as often as not, and with ν = 2 by a factor up to ~2. The plan uses the
upper one-sided confidence limit at level L (80 %), from (ν s²/σ²) ~ χ²_ν:

    σ_L = s·sqrt(ν / χ²_{1−L, ν})     (χ²_{q, ν}: the q quantile; 1 − L = 0.2)

and pools several attempts of one recipe per arm as s_p² = Σ ν_i s_i² / Σ ν_i on ν = Σ ν_i
(each attempt around its own mean, so a shift between attempts does not inflate the spread).

A family judged with Holm's step-down is planned at Holm's first step, α/k (`alpha_for_family`):
the smallest p-value must beat α/k, so this is the conservative bound for every claim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral

import numpy as np
from scipy import stats as sps

TESTS = ("welch", "welch_log", "paired", "rank")
POWER = 0.8
SD_LEVEL = 0.8
"""The one-sided confidence level of the SD the plan sizes from (`sd_upper`)."""
N_MAX = 1000
_GAUSS = np.polynomial.legendre.leggauss(96)


def _check(name: str, value: float, ok: bool, valid: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid; valid: {valid}")


def _check_common(sd_a: float, sd_b: float | None, n: int, alpha: float, test: str) -> None:
    _check("test", test, test in TESTS, ", ".join(TESTS))
    _check("alpha", alpha, isinstance(alpha, (int, float)) and 0 < alpha < 1, "0 < alpha < 1")
    _check("n", n, isinstance(n, Integral) and n >= 2, "an integer >= 2 (seeds per arm)")
    if test == "paired":
        _check("sd_a", sd_a, isinstance(sd_a, (int, float)) and math.isfinite(sd_a) and sd_a > 0, "a finite sd > 0")
        _check("sd_b", sd_b, sd_b is None, "None for a paired test (sd_a is the differences' sd)")
        return
    # one arm may be constant (sd 0: e.g. a share that is 0 in every run); Welch's SE and df then come
    # from the other arm alone (df = n - 1), as for a one-sample t test
    for name, sd in (("sd_a", sd_a), ("sd_b", sd_b)):
        ok = isinstance(sd, (int, float)) and math.isfinite(sd) and sd >= 0
        _check(name, sd, ok, "a finite sd >= 0")
    _check("sd_a", sd_a, sd_a > 0 or sd_b > 0, "an sd > 0 in at least one arm (both arms constant: nothing to size)")


def _location(value: float, test: str, name: str) -> float:
    """The effect (or margin) on the scale the test works on: ln of a ratio for ``welch_log``."""
    if test == "welch_log":
        _check(name, value, isinstance(value, (int, float)) and math.isfinite(value) and value > 0, "a ratio > 0")
        return math.log(value)
    _check(name, value, isinstance(value, (int, float)) and math.isfinite(value), "a finite difference")
    return float(value)


def se_and_df(sd_a: float, sd_b: float | None, n: int, test: str = "welch") -> tuple[float, float]:
    """(SE of the difference, degrees of freedom) with n seeds per arm (module docstring)."""
    if test == "paired":
        return sd_a / math.sqrt(n), float(n - 1)
    va, vb = sd_a**2 / n, sd_b**2 / n
    return math.sqrt(va + vb), (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))


def rank_min_p(n: int, sides: int = 2) -> float:
    """The smallest p the exact Mann–Whitney test can give with n per arm and no ties."""
    return min(1.0, sides / math.comb(2 * n, n))


def power_diff(
    effect: float, sd_a: float, sd_b: float | None, n: int, alpha: float, sides: int = 2, test: str = "welch"
) -> float:
    """Power to detect a true difference ``effect`` (``welch_log``: a ratio) with ``n`` seeds per
    arm at level ``alpha``, ``sides`` 1 or 2 (one-sided: ``effect`` counted in the claimed direction)."""
    _check_common(sd_a, sd_b, n, alpha, test)
    _check("sides", sides, sides in (1, 2), "1 or 2")
    delta = _location(effect, test, "effect")
    if test == "rank" and rank_min_p(n, sides) > alpha:
        return 0.0
    se, df = se_and_df(sd_a, sd_b, n, test)
    ncp = delta / se
    crit = float(sps.t.ppf(1 - alpha / sides, df))
    power = float(sps.nct.sf(crit, df, ncp))
    if sides == 2:
        power += float(sps.nct.cdf(-crit, df, ncp))
    return min(1.0, power)


def power_tost(
    margin: float,
    sd_a: float,
    sd_b: float | None,
    n: int,
    alpha: float,
    true_diff: float | None = None,
    test: str = "welch",
) -> float:
    """Power of TOST (two one-sided tests at ``alpha``) to declare equivalence within ±``margin``
    (``welch_log``: a ratio > 1, equivalence within [1/m, m]) when the true difference is
    ``true_diff`` (default: none, 0 or ratio 1), by the integral in the module docstring."""
    _check_common(sd_a, sd_b, n, alpha, test)
    m = _location(margin, test, "margin")
    _check("margin", margin, m > 0, "a difference > 0 (welch_log: a ratio > 1)")
    delta = 0.0 if true_diff is None else _location(true_diff, test, "true_diff")
    if test == "rank" and rank_min_p(n, 1) > alpha:
        return 0.0
    se, df = se_and_df(sd_a, sd_b, n, test)
    crit = float(sps.t.ppf(1 - alpha, df))
    x_max = df * (m / (crit * se)) ** 2  # beyond it the interval t·SÊ is wider than the margin: no pass
    # integrate over the χ² quantile u = F(x) on [0, F(x_max)] (Gauss–Legendre): the integrand is
    # bounded and smooth there, and the nodes cover any ν
    top = float(sps.chi2.cdf(x_max, df))
    nodes, weights = _GAUSS
    x = sps.chi2.ppf(top * (nodes + 1) / 2, df)
    half = crit * se * np.sqrt(x / df)
    inside = sps.norm.cdf((m - delta - half) / se) - sps.norm.cdf((-m - delta + half) / se)
    value = float(np.sum(weights * np.clip(inside, 0.0, 1.0))) * top / 2
    return min(1.0, max(0.0, value))


def _smallest_n(power_at, target: float, n_max: int) -> int | None:
    """The smallest integer n in [2, n_max] with power_at(n) >= target (power increasing in n):
    doubling, then bisection. None when even n_max falls short."""
    _check("power", target, isinstance(target, (int, float)) and 0 < target < 1, "0 < power < 1")
    _check("n_max", n_max, isinstance(n_max, Integral) and n_max >= 2, "an integer >= 2")
    if power_at(2) >= target:
        return 2
    lo, hi = 2, 4  # power_at(lo) < target
    while hi < n_max and power_at(hi) < target:
        lo, hi = hi, min(2 * hi, n_max)
    if power_at(hi) < target:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power_at(mid) >= target else (mid, hi)
    return hi


def n_for_power(
    effect: float,
    sd_a: float,
    sd_b: float | None,
    alpha: float,
    sides: int = 2,
    test: str = "welch",
    power: float = POWER,
    n_max: int = N_MAX,
) -> int | None:
    """The smallest n per arm at which `power_diff` reaches ``power`` (None: not within ``n_max``)."""
    return _smallest_n(lambda n: power_diff(effect, sd_a, sd_b, n, alpha, sides, test), power, n_max)


def n_for_tost(
    margin: float,
    sd_a: float,
    sd_b: float | None,
    alpha: float,
    true_diff: float | None = None,
    test: str = "welch",
    power: float = POWER,
    n_max: int = N_MAX,
) -> int | None:
    """The smallest n per arm at which `power_tost` reaches ``power`` (None: not within ``n_max``)."""
    return _smallest_n(lambda n: power_tost(margin, sd_a, sd_b, n, alpha, true_diff, test), power, n_max)


def detectable(
    sd_a: float, sd_b: float | None, n: int, alpha: float, test: str = "welch", power: float = POWER
) -> float:
    """The smallest difference (``welch_log``: ratio) detectable with ``power`` at two-sided
    ``alpha``: (t_{1−α/2,ν} + t_{power,ν})·SE, the formula of `stats.compare`'s ``detectable``."""
    _check_common(sd_a, sd_b, n, alpha, test)
    se, df = se_and_df(sd_a, sd_b, n, test)
    d = (float(sps.t.ppf(1 - alpha / 2, df)) + float(sps.t.ppf(power, df))) * se
    return math.exp(d) if test == "welch_log" else d


def tost_room(margin: float, sd_a: float, sd_b: float | None, n: int, alpha: float, test: str = "welch") -> float:
    """m − t_{1−α,ν}·SE: how far the observed difference may lie from 0 and TOST still pass at n
    (with the planned SE). ≤ 0: TOST cannot pass even with an observed difference of exactly 0.
    ``welch_log``: margin and result are on the log scale (ln m − t·SE)."""
    _check_common(sd_a, sd_b, n, alpha, test)
    m = _location(margin, test, "margin")
    se, df = se_and_df(sd_a, sd_b, n, test)
    return m - float(sps.t.ppf(1 - alpha, df)) * se


def alpha_for_family(alpha: float, k: int) -> float:
    """The level to plan each of ``k`` Holm-controlled claims at: α/k (Holm's first step)."""
    _check("alpha", alpha, isinstance(alpha, (int, float)) and 0 < alpha < 1, "0 < alpha < 1")
    _check("k", k, isinstance(k, Integral) and k >= 1, "an integer >= 1 (judged claims in the family)")
    return alpha / k


def sd_upper(sd: float, df: int, level: float = SD_LEVEL) -> float:
    """The upper one-sided ``level`` confidence limit of σ from a sample SD ``sd`` on ``df``
    degrees of freedom: sd·sqrt(df / χ²_{1−level, df}) (module docstring)."""
    _check("sd", sd, isinstance(sd, (int, float)) and math.isfinite(sd) and sd >= 0, "a finite sd >= 0")
    _check("df", df, isinstance(df, Integral) and df >= 1, "an integer >= 1 (values - 1)")
    _check("level", level, isinstance(level, (int, float)) and 0 < level < 1, "0 < level < 1")
    return float(sd) * math.sqrt(df / float(sps.chi2.ppf(1 - level, df)))


def pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(s_p, ν): the SD pooled over ``groups`` (each around its own mean), s_p² = Σ ν_i s_i² / Σ ν_i,
    on ν = Σ ν_i, ν_i = k_i − 1; groups of one value add nothing. (NaN, 0) without a degree of freedom."""
    sums = [(len(g) - 1, float(np.var(np.asarray(g, dtype=np.float64), ddof=1))) for g in groups if len(g) >= 2]
    df = sum(k for k, _ in sums)
    return (math.sqrt(sum(k * v for k, v in sums) / df), df) if df else (math.nan, 0)
