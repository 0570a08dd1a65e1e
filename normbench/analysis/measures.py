"""Measures that several presets' rules use: a function of one run, registered by name."""

from __future__ import annotations

import math

from normbench.analysis.claims import measure
from normbench.analysis.runs import Run
from normbench.analysis.stats import median_over_steps


@measure("final")
def final(run: Run, key: str) -> float:
    """The run's final value of ``key`` (its summary's, else the last logged one)."""
    return run.final(key)


@measure("median_logged")
def median_logged(run: Run, key: str) -> float:
    """The median of every finite value of ``key`` the run logged (e.g. over epochs)."""
    return median_over_steps(run.series(key)[1])


@measure("logged_at_fraction")
def logged_at_fraction(run: Run, key: str, fraction: float) -> float:
    """The value of ``key`` logged at the first step at or after ``fraction`` × the run's last step
    (0.25: the first evaluation a quarter into training); NaN where none was logged there."""
    steps, values = run.series(key)
    target = fraction * run.final_step
    later = [v for s, v in zip(steps, values, strict=True) if s >= target - 1e-9]
    return float(later[0]) if later else math.nan
