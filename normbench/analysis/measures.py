"""Measures that several presets' rules use: a function of one run, registered by name."""

from __future__ import annotations

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
