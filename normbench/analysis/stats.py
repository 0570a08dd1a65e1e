"""Pure aggregation over seeds and steps: medians with min–max spread, and claim verdicts.

NaN values are left out of every statistic; ``n`` says how many values a number rests on. A run
that diverged is not left out: the claims give it the worst value of its measure (±inf, see
`normbench.analysis.claims.per_seed`), so it counts in its arm's median and range, and
``diverged`` says how many runs did.

Verdicts (rules fixed in this code before any run they judge):

- **holds**: the seed medians are ordered as claimed and the seeds' min–max ranges are apart;
- **mixed**: the medians are ordered as claimed, the ranges overlap;
- **not reproduced at this scale**: the medians are not ordered as claimed, and the run is far
  shorter or smaller than the paper's (each preset's `Scale` says by how much);
- **contradicted**: the medians are not ordered as claimed in a setup that matches the paper's at
  an adequate scale.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

HOLDS = "holds"
MIXED = "mixed"
"""The medians are ordered as claimed, but the seeds' min–max ranges overlap."""
NOT_REPRODUCED = "not reproduced at this scale"
CONTRADICTED = "contradicted"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Spread:
    """Median, min and max of a set of values (e.g. one number per seed)."""

    median: float
    lo: float
    hi: float
    n: int
    diverged: int = 0
    """How many of the n values stand for a run that diverged (±inf: the worst value)."""

    def fmt(self, digits: int = 4) -> str:
        def num(v: float) -> str:
            return "diverged" if math.isinf(v) else f"{v:.{digits}g}"

        if self.n == 0:
            return "n/a"
        text = num(self.median) if self.n == 1 else f"{num(self.median)} [{num(self.lo)}, {num(self.hi)}]"
        return text + (f" ({self.diverged} of {self.n} diverged)" if self.diverged else "")


def spread(values: Iterable[float], diverged: int = 0) -> Spread:
    """Median and min–max of ``values``, NaN left out (±inf kept: a diverged run's worst value)."""
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return Spread(math.nan, math.nan, math.nan, 0, diverged)
    return Spread(float(np.median(v)), float(v.min()), float(v.max()), int(v.size), diverged)


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


def verdict_less(a: Spread, b: Spread, scale_adequate: bool) -> str:
    """Verdict on the claim "a < b": `HOLDS` when the medians are ordered so and the min–max
    ranges do not overlap (a.hi < b.lo), `MIXED` when only the medians are; otherwise
    `CONTRADICTED` where the scale is adequate, `NOT_REPRODUCED` where it is not."""
    if a.n == 0 or b.n == 0:
        return NOT_MEASURED
    if not a.median < b.median:
        return CONTRADICTED if scale_adequate else NOT_REPRODUCED
    return HOLDS if a.hi < b.lo else MIXED


def verdict_true(ordered: bool, scale_adequate: bool) -> str:
    """Verdict on a claim judged by one comparison of medians (no ranges): `HOLDS` or, when it
    fails, `CONTRADICTED` / `NOT_REPRODUCED` by scale."""
    if ordered:
        return HOLDS
    return CONTRADICTED if scale_adequate else NOT_REPRODUCED


def fraction_less(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(k, m): at k of the m positions where both are finite, a < b."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    return int((a[both] < b[both]).sum()), int(both.sum())
