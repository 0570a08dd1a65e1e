"""Pure aggregation over seeds and steps: medians with min–max spread, and claim verdicts.

Non-finite values (a diverged run's NaN loss) are left out of every statistic; ``n`` says how
many finite values a number rests on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

HOLDS = "holds"
MIXED = "mixed"
"""The medians are ordered as claimed, but the seeds' min–max ranges overlap."""
FAILS = "does not hold"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Spread:
    """Median, min and max of a set of values (e.g. one number per seed)."""

    median: float
    lo: float
    hi: float
    n: int

    def fmt(self, digits: int = 4) -> str:
        if self.n == 0:
            return "n/a"
        if self.n == 1:
            return f"{self.median:.{digits}g}"
        return f"{self.median:.{digits}g} [{self.lo:.{digits}g}, {self.hi:.{digits}g}]"


def spread(values: Iterable[float]) -> Spread:
    """Median and min–max of the finite ``values``."""
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Spread(math.nan, math.nan, math.nan, 0)
    return Spread(float(np.median(v)), float(v.min()), float(v.max()), int(v.size))


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


def verdict_less(a: Spread, b: Spread) -> str:
    """Verdict on the claim "a < b": `HOLDS` when the medians are ordered so and the min–max
    ranges do not overlap (a.hi < b.lo), `MIXED` when only the medians are, `FAILS` otherwise."""
    if a.n == 0 or b.n == 0:
        return NOT_MEASURED
    if not a.median < b.median:
        return FAILS
    return HOLDS if a.hi < b.lo else MIXED


def fraction_less(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(k, m): at k of the m positions where both are finite, a < b."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    return int((a[both] < b[both]).sum()), int(both.sum())
