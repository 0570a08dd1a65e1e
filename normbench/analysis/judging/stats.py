"""Pure statistics over seeds: bands for the figures, and the two-arm comparisons that judge claims.

Figures draw medians with the seeds' min–max (`stack`, `band`); claims are judged on an interval
for the *difference* between two arms' per-seed values (`compare`), with one of three tests, named
in each preset's rules (``normbench/rules/<preset>.yaml``) before its runs:

- ``welch``: difference of means, Welch's t-interval (Welch–Satterthwaite degrees of freedom);
  effect size Hedges' g (pooled standard deviation, small-sample corrected).
- ``welch_log``: the same on the logarithms of positive values: a *ratio* of geometric means and
  its interval (throughputs, distances, smoothness constants: quantities compared as multiples).
- ``paired``: the two arms are the same runs measured two ways (e.g. one evaluation with each of
  two estimates on the same weights), paired by seed: the mean of the per-seed differences with
  its one-sample t-interval (n − 1 degrees of freedom), as ``scipy.stats.ttest_rel``; effect size
  d_z (the mean difference over the differences' standard deviation, small-sample corrected).
- ``rank``: Mann–Whitney: the Hodges–Lehmann shift (median of all pairwise differences) with its
  exact distribution-free interval, two-sided exact p; effect size the probability of
  superiority P(a > b) + ½·P(a = b). Used, whatever the rule names, when a run diverged (it counts
  with the worst value of its measure, ±inf, which only ranks can carry).

Every p-value comes from one-sided tests of a shifted null (`_p_greater`), so the directional and
the equivalence tests use one code path:

- directional ("a > b"): two-sided p for d = 0;
- equivalence within ±margin (two one-sided tests, TOST): p_eq = max(p(d > −m), p(d < m)), the
  (1 − 2α) interval inside the margin; and the complementary "different": p_diff =
  2·min(p(d > m), p(d < −m)), the (1 − α) interval wholly outside it. The two nulls partition the
  line (|d| ≥ m and |d| ≤ m), so testing both at α keeps the error at α (the partitioning principle).

The family of claims a preset judges is controlled by Holm's step-down (`holm`). ``detectable``:
the smallest difference the seeds could detect with 80 % power at two-sided α, (t_{1−α/2} +
t_{0.8})·SE on Welch's degrees of freedom (``paired``: n − 1; for ``rank`` too, from the finite values).

Issue 56: ``detectable_difference`` at any level (a family's α/m), ``p_min_effect`` (the one-sided
test that the difference is smaller than the effect of interest) and ``benjamini_hochberg`` (q-values
across presets). NaN values are left out; ``n`` says how many values a number rests on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
POWER = 0.8
TESTS = ("welch", "welch_log", "paired", "rank")

# Verdicts: directional claims, equivalence claims, and claims the rules do not let us judge.
SUPPORTED, OPPOSITE, INCONCLUSIVE = "supported", "opposite", "inconclusive"
EQUIVALENT, DIFFERENT = "equivalent", "different"
NOT_JUDGED = "not judged"
VERDICTS = (SUPPORTED, OPPOSITE, INCONCLUSIVE, EQUIVALENT, DIFFERENT, NOT_JUDGED)
MIN_SEEDS_FOR_INTERVAL = 3
"""Seeds a mean needs for its interval to be drawn (the leaderboard, a sweep's report); fewer: the mean alone."""


# ---------------------------------------------------------------------------------------------
# bands for the figures


def stack(series: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several (x, y) series on the union of their x: returns x (sorted) and a
    (n_series, len(x)) array, NaN where a series has no value at that x. A series that logs an
    x twice keeps its last value there."""
    xs = np.unique(np.concatenate([np.asarray(s[0], dtype=np.float64) for s in series])) if series else np.zeros(0)
    out = np.full((len(series), len(xs)), np.nan)
    for i, (x, y) in enumerate(series):
        idx = np.searchsorted(xs, np.asarray(x, dtype=np.float64))
        out[i, idx] = y
    return xs, out


def band(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Column-wise median, min, max and count of finite values of a (n_series, n_x) array."""
    finite = np.isfinite(matrix)
    n = finite.sum(axis=0)
    masked = np.where(finite, matrix, np.nan)
    med, lo, hi = (np.full(matrix.shape[1], np.nan) for _ in range(3))
    ok = n > 0
    if ok.any():
        med[ok] = np.nanmedian(masked[:, ok], axis=0)
        lo[ok] = np.nanmin(masked[:, ok], axis=0)
        hi[ok] = np.nanmax(masked[:, ok], axis=0)
    return med, lo, hi, n


def median_over_steps(values: np.ndarray) -> float:
    """The median of the finite values of one run's series (NaN when none is finite)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else math.nan


def _clean(values: Iterable[float]) -> np.ndarray:
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    return v[~np.isnan(v)]


# ---------------------------------------------------------------------------------------------
# one arm


@dataclass(frozen=True)
class ArmSummary:
    """One arm's per-seed values: the mean and its (1 − α) t-interval (``welch_log``: the geometric
    mean, the interval of the log mean); for ``rank`` (or when a run diverged) the median and the
    seeds' min–max instead. ``n`` values, of which ``diverged`` are ±inf."""

    centre: float
    lo: float
    hi: float
    n: int
    diverged: int = 0

    def fmt(self, digits: int = 4) -> str:
        if self.n == 0:
            return "n/a"
        infinite = "diverged" if self.diverged else None  # else an unbounded interval (one value): ±inf
        text = ", ".join(_num(v, digits, infinite) for v in (self.lo, self.hi))
        text = f"{_num(self.centre, digits, infinite)} [{text}]"
        return text + (f", {self.diverged} diverged" if self.diverged else "")


def _num(v: float, digits: int = 4, infinite: str | None = None) -> str:
    """``v`` to ``digits`` significant digits; NaN: n/a; ±inf: ``infinite``, else ``inf`` / ``-inf``."""
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return infinite or ("inf" if v > 0 else "-inf")
    return f"{v:.{digits}g}"


def t_interval(v: np.ndarray, alpha: float = ALPHA) -> tuple[float, float, float]:
    """mean ± t_{1−α/2, n−1}·s/√n (s with ddof 1); one value: (−inf, inf)."""
    mean = float(v.mean())
    if v.size < 2:
        return mean, -math.inf, math.inf
    half = float(sps.t.ppf(1 - alpha / 2, v.size - 1)) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, mean - half, mean + half


def summarize_arm(values: Iterable[float], test: str, alpha: float = ALPHA) -> ArmSummary:
    v = _clean(values)
    diverged = int(np.isinf(v).sum())
    if v.size == 0:
        return ArmSummary(math.nan, math.nan, math.nan, 0)
    if test == "rank" or diverged:
        return ArmSummary(float(np.median(v)), float(v.min()), float(v.max()), int(v.size), diverged)
    if test == "welch_log":
        m, lo, hi = t_interval(np.log(v), alpha)
        return ArmSummary(math.exp(m), math.exp(lo), math.exp(hi), int(v.size), diverged)
    return ArmSummary(*t_interval(v, alpha), int(v.size), diverged)


# ---------------------------------------------------------------------------------------------
# two arms


@dataclass(frozen=True)
class Comparison:
    """a against b. ``estimate``: mean(a) − mean(b) (``welch``), the ratio of geometric means
    (``welch_log``) or the Hodges–Lehmann shift (``rank``; on the logs, as a ratio, when the rule
    was ``welch_log``), with its (1 − α) interval. ``test``: the test used."""

    test: str
    estimate: float
    lo: float
    hi: float
    p: float
    """Two-sided p-value of "no difference"."""
    effect_size: float
    """Hedges' g (``welch``, ``welch_log``: on the logs) or P(a > b) + ½·P(a = b) (``rank``)."""
    detectable: float
    """Smallest difference (``welch_log``: ratio) detectable with 80 % power at two-sided α."""
    p_eq: float = math.nan
    """TOST p-value of "equivalent within the margin" (NaN without a margin)."""
    p_diff: float = math.nan
    """p-value of "different by more than the margin" (NaN without a margin)."""
    ratio: bool = False
    """Compared on the logarithms (rule ``welch_log``): estimate, interval and detectable are ratios."""


def _welch_parts(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(difference of means, its standard error, Welch–Satterthwaite degrees of freedom)."""
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if se > 0 else float(a.size + b.size - 2)
    return float(a.mean() - b.mean()), se, df


def _paired_parts(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(mean of the differences a_i − b_i, its standard error, n − 1)."""
    d = a - b
    return float(d.mean()), float(d.std(ddof=1)) / math.sqrt(d.size), float(d.size - 1)


def _t_parts(a: np.ndarray, b: np.ndarray, test: str) -> tuple[float, float, float]:
    return _paired_parts(a, b) if test == "paired" else _welch_parts(a, b)


def _p_greater(a: np.ndarray, b: np.ndarray, test: str, shift: float) -> float:
    """One-sided p-value of H0: d ≤ shift against d > shift (d: the test's location difference)."""
    if test == "rank":
        return float(sps.mannwhitneyu(a - shift, b, alternative="greater", method=_mwu_method(a - shift, b)).pvalue)
    d, se, df = _t_parts(a, b, test)
    if se == 0:
        return 0.0 if d > shift else 1.0
    return float(sps.t.sf((d - shift) / se, df))


def _mwu_method(a: np.ndarray, b: np.ndarray) -> str:
    """Exact p-values without ties; a permutation distribution (all splits, or 20,000) with them."""
    both = np.concatenate([a, b])
    return "exact" if np.unique(both).size == both.size else sps.PermutationMethod(n_resamples=20000, rng=0)


def _pairwise_differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np.subtract.outer(a, b).ravel()
    return np.where(np.isnan(d), 0.0, d)  # inf − inf: two runs that both diverged, a tie


def _u_distribution(m: int, n: int) -> np.ndarray:
    """P(U = u), u = 0..m·n, for the Mann–Whitney U of samples of sizes m and n without ties."""
    # f[i][j][u]: the number of arrangements of i a's and j b's with u pairs (a > b)
    f = [[np.zeros(1, dtype=np.float64) for _ in range(n + 1)] for _ in range(m + 1)]
    for i in range(m + 1):
        for j in range(n + 1):
            if i == 0 or j == 0:
                f[i][j] = np.zeros(i * j + 1)
                f[i][j][0] = 1.0
                continue
            out = np.zeros(i * j + 1)
            last_a = f[i - 1][j]  # the largest value is an a: it beats all j b's
            out[j : j + last_a.size] += last_a
            last_b = f[i][j - 1]
            out[: last_b.size] += last_b
            f[i][j] = out
    counts = f[m][n]
    return counts / counts.sum()


def hodges_lehmann(a: np.ndarray, b: np.ndarray, alpha: float = ALPHA) -> tuple[float, float, float]:
    """The Hodges–Lehmann shift median(a_i − b_j) and its exact (1 − α) interval
    [d_(k), d_(mn+1−k)], k the largest with P(U ≤ k − 1) ≤ α/2 (Lehmann 1975, §2.6)."""
    d = np.sort(_pairwise_differences(a, b))
    cdf = np.cumsum(_u_distribution(a.size, b.size))
    k = int(np.searchsorted(cdf, alpha / 2 * (1 + 1e-12), side="right"))  # P(U <= k-1) <= alpha/2
    estimate = float(np.median(d))
    if k < 1:
        return estimate, -math.inf, math.inf
    return estimate, float(d[k - 1]), float(d[d.size - k])


def compare(
    a_values: Iterable[float], b_values: Iterable[float], test: str, margin: float | None = None, alpha: float = ALPHA
) -> Comparison:
    """Compare arm a with arm b by ``test`` (`TESTS`); ``margin`` (``welch_log``: a ratio > 1)
    adds the equivalence p-values. Any ±inf value (a diverged run) switches to ``rank``."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; valid choices: {', '.join(TESTS)}")
    a, b = _clean(a_values), _clean(b_values)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"a comparison needs at least 2 values per arm, got {a.size} and {b.size}")
    if test == "paired" and a.size != b.size:
        raise ValueError(f"a paired comparison needs one value of each arm per seed, got {a.size} and {b.size}")
    ratio = test == "welch_log"
    if ratio:
        a, b = _log(a), _log(b)
        margin = None if margin is None else math.log(margin)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        test = "rank"
    if test == "rank":
        estimate, lo, hi = hodges_lehmann(a, b, alpha)
        u = sps.mannwhitneyu(a, b, method=_mwu_method(a, b)).statistic
        effect = float(u) / (a.size * b.size)
    else:
        estimate, se, df = _t_parts(a, b, test)
        half = float(sps.t.ppf(1 - alpha / 2, df)) * se
        lo, hi = estimate - half, estimate + half
        if test == "paired":  # d_z: the differences' own spread, Hedges' correction on n − 1
            pooled, correction = float((a - b).std(ddof=1)), 1 - 3 / (4 * df - 1)
        else:
            pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
            correction = 1 - 3 / (4 * (a.size + b.size) - 9)
        if pooled > 0:
            effect = estimate / pooled * correction
        else:  # no spread in either arm: any difference is infinitely many standard deviations
            effect = 0.0 if estimate == 0 else math.copysign(math.inf, estimate)
    detectable = _detectable(a, b, test, alpha)
    p = min(1.0, 2 * min(_p_greater(a, b, test, 0.0), _p_greater(b, a, test, 0.0)))
    p_eq = p_diff = math.nan
    if margin is not None:
        p_eq = max(_p_greater(a, b, test, -margin), _p_greater(b, a, test, -margin))
        p_diff = min(1.0, 2 * min(_p_greater(a, b, test, margin), _p_greater(b, a, test, margin)))
    if ratio:
        estimate, lo, hi, detectable = math.exp(estimate), math.exp(lo), math.exp(hi), math.exp(detectable)
    return Comparison(test, estimate, lo, hi, p, effect, detectable, p_eq, p_diff, ratio)


def _detectable(a: np.ndarray, b: np.ndarray, test: str, alpha: float) -> float:
    """(t_{1−α/2,ν} + t_{0.8,ν})·SE from the finite values (on the scale compared: logs for a ratio)."""
    fa, fb = a[np.isfinite(a)], b[np.isfinite(b)]
    if fa.size < 2 or fb.size < 2:
        return math.nan
    _, se, df = _t_parts(fa, fb, test) if fa.size == fb.size else _welch_parts(fa, fb)
    return (float(sps.t.ppf(1 - alpha / 2, df)) + float(sps.t.ppf(POWER, df))) * se


def _prepared(a_values: Iterable[float], b_values: Iterable[float], test: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Both arms as `compare` tests them: NaN dropped, logs for ``welch_log``, ``rank`` when a value is ±inf."""
    a, b = _clean(a_values), _clean(b_values)
    if test == "welch_log":
        a, b = _log(a), _log(b)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        test = "rank"
    return a, b, test


def detectable_difference(a_values: Iterable[float], b_values: Iterable[float], test: str, alpha: float) -> float:
    """`Comparison.detectable` at level ``alpha`` (e.g. a family's α/m): the difference
    (``welch_log``: ratio) detectable with 80 % power at two-sided ``alpha`` from these arms' spreads."""
    a, b, used = _prepared(a_values, b_values, test)
    d = _detectable(a, b, "welch" if used == "rank" else test, alpha)
    return math.exp(d) if test == "welch_log" else d


def p_min_effect(
    a_values: Iterable[float], b_values: Iterable[float], test: str, effect: float, relation: str
) -> float:
    """The minimum-effect test: the one-sided p of H0 "the difference is at least the effect of
    interest E" against "it is smaller" (Murphy & Myors' minimum-effect test, turned round: a
    non-significant result that still excludes E). ``greater`` (E > 0): H0 d ≥ E; ``less``
    (E < 0): H0 d ≤ E; ``differs``: H0 |d| ≥ |E|, both one-sided tests (TOST within ±|E|). For
    ``welch_log`` E is a ratio, tested on the logs; with a diverged run: Mann–Whitney."""
    a, b, used = _prepared(a_values, b_values, test)
    e = math.log(effect) if test == "welch_log" else float(effect)
    below = _p_greater(b, a, used, -abs(e))  # H0 d ≥ |E| against d < |E|
    above = _p_greater(a, b, used, -abs(e))  # H0 d ≤ −|E| against d > −|E|
    return max(below, above) if relation == "differs" else below if relation == "greater" else above


def _log(v: np.ndarray) -> np.ndarray:
    """Logarithms of positive values; ±inf (a diverged run's worst value) stays ±inf."""
    finite = v[np.isfinite(v)]
    if (finite <= 0).any():
        raise ValueError("welch_log compares positive values; use welch or rank")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isneginf(v), -np.inf, np.log(np.where(np.isneginf(v), 1.0, v)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN entries are left out of the family and stay NaN)."""
    idx = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: p_values[i])
    m = len(order)
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (q-values), as ``scipy.stats.false_discovery_control``:
    q_(i) = min over j ≥ i of m·p_(j)/j (sorted p), capped at 1; NaN entries are left out of the
    family and stay NaN. A verdict is kept at false-discovery rate q when its q-value is ≤ q."""
    idx = sorted((i for i, p in enumerate(p_values) if not math.isnan(p)), key=lambda i: p_values[i])
    m, out, running = len(idx), [math.nan] * len(p_values), 1.0
    for rank in range(m, 0, -1):
        i = idx[rank - 1]
        running = min(running, m * p_values[i] / rank)
        out[i] = running
    return out


def directional_verdict(estimate: float, null: float, claimed_greater: bool, p_adjusted: float, alpha: float) -> str:
    """`SUPPORTED` / `OPPOSITE` when the (adjusted) p-value is below α, by the side the estimate
    lies on (``null``: 0 for a difference, 1 for a ratio); `INCONCLUSIVE` otherwise."""
    if math.isnan(p_adjusted) or p_adjusted >= alpha:
        return INCONCLUSIVE
    return SUPPORTED if (estimate > null) == claimed_greater else OPPOSITE


def two_sided_verdict(p_adjusted: float, alpha: float) -> str:
    """A claim with no side (relation ``differs``): `DIFFERENT` when the (adjusted) two-sided
    p-value is below α, whichever side the estimate lies on; `INCONCLUSIVE` otherwise."""
    return INCONCLUSIVE if math.isnan(p_adjusted) or p_adjusted >= alpha else DIFFERENT


def equivalence_verdict(p_eq_adjusted: float, p_diff_adjusted: float, alpha: float) -> str:
    if p_eq_adjusted < alpha:
        return EQUIVALENT
    if p_diff_adjusted < alpha:
        return DIFFERENT
    return INCONCLUSIVE
