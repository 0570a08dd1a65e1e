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


@measure("final_error")
def final_error(run: Run, key: str) -> float:
    """One minus the run's final ``key`` (an accuracy in [0, 1] → an error): setup checks bound it
    from above ("the positive control reaches an accuracy of at least 1 − bound")."""
    return 1.0 - run.final(key)


@measure("median_logged_gap")
def median_logged_gap(run: Run, key: str, minus: str) -> float:
    """`median_logged` of ``key`` minus that of ``minus`` in the same run (e.g. short sentences'
    token scale minus long ones')."""
    return median_logged(run, key) - median_logged(run, minus)


@measure("inverse_median_logged")
def inverse_median_logged(run: Run, key: str) -> float:
    """1 / `median_logged` of ``key``: a check that a value is above 1/bound, with ``below``."""
    return 1.0 / median_logged(run, key)
