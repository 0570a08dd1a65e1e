"""BatchNorm and saturating activations, from a `bn_saturation` sweep (sigmoid VGG with and
without BN): the fraction of saturated pre-activations per norm position and the gradient norms
per layer, from the ``saturation`` diagnostic.

Two panels: the fraction of |pre-activation| > threshold (mean over norm positions) against the
step, and each layer's gradient norm at the last call against its depth (log axis), medians over
seeds with the min–max shaded. The claims are in ``normbench/rules/bn_saturation.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from normbench.analysis.claims import measure
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run
from normbench.analysis.stats import median_over_steps

SATURATED = re.compile(r"^saturation/(.+)/saturated$")
GRAD_NORM = re.compile(r"^saturation/(.+)/grad_norm$")


def _keys(run: Run, pattern: re.Pattern[str]) -> list[str]:
    """The run's keys matching ``pattern``, in the order the diagnostic logged them (the model's)."""
    ordered = dict.fromkeys(k for row in run.history for k in row)  # first-logged order: the model's
    return [k for k in ordered if pattern.match(k) and k.split("/")[1] not in ("first_layer", "layer_mean")]


def layer_mean_series(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(steps, mean over norm positions of the saturated fraction) at each diagnostic call: from
    the per-layer keys of a local run, or the ``layer_mean`` headline W&B computed from them."""
    headline = run.series("saturation/layer_mean/saturated")
    if len(headline[0]):
        return headline
    series = [run.series(k) for k in _keys(run, SATURATED)]
    if not series:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    steps = series[0][0]
    return steps, np.mean(np.stack([v for _, v in series if len(v) == len(steps)]), axis=0)


@measure("saturated_fraction")
def saturated_fraction(run: Run) -> float:
    """Median over the diagnostic's calls of the mean over norm positions of the saturated fraction."""
    return median_over_steps(layer_mean_series(run)[1])


@measure("grad_norm_ratio")
def grad_norm_ratio(run: Run, first: str, last: str) -> float:
    """Median over the diagnostic's calls of ‖∂L/∂θ_first‖ / ‖∂L/∂θ_last‖ (per-layer keys: a local
    run's ``metrics.jsonl``; W&B keeps them in its ``saturation/layers`` tables, not as scalars)."""
    (s1, a), (s2, b) = run.series(f"saturation/{first}/grad_norm"), run.series(f"saturation/{last}/grad_norm")
    if len(a) == 0 or len(a) != len(b) or not np.array_equal(s1, s2):
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return median_over_steps(a / b)


def arm(run: Run) -> str:
    return "BN" if run.get("norm.name") == "bn" else "standard"


def bn_saturation(runs: Sequence[Run]) -> list[FigureResult]:
    fig, axes = new_figure(1, 2, "Sigmoid VGG: saturated pre-activations and gradient norms, with and without BN")
    res = FigureResult("bn_saturation", fig)
    for label in ("standard", "BN"):
        group = sorted((r for r in runs if arm(r) == label), key=lambda r: r.seed)
        color = NORM_COLORS["bn" if label == "BN" else "none"]
        series = [layer_mean_series(r) for r in group if len(layer_mean_series(r)[0])]
        if series:
            seed_curve(axes[0, 0], res.rows, "saturated", label, series, color, marker="o")
        depth = []
        for r in group:  # the last call's gradient norm per layer, against the layer's depth
            values = [r.series(k)[1] for k in _keys(r, GRAD_NORM)]
            values = [v[-1] for v in values if len(v)]
            if values:
                depth.append((np.arange(len(values), dtype=np.float64), np.asarray(values)))
        if depth:
            seed_curve(axes[0, 1], res.rows, "grad_norm_last_call", label, depth, color, marker=".")
    finish_axes(axes[0, 0], "step", "fraction |z| > threshold", "saturated pre-activations (mean over layers)")
    axes[0, 1].set_yscale("log")
    finish_axes(axes[0, 1], "layer (model order)", "‖∂L/∂θ‖₂", "gradient norm per layer, last call")
    return [res]
