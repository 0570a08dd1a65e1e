"""BatchNorm's test-time statistics, from a `bn_eval_stats` sweep: the EMA against the population
estimate ("precise BN"), each run evaluated with both on the same weights (``norm.eval_stats=both``).

Three panels, one series per arm (batch size, BN momentum): validation accuracy with the EMA
(solid) and with the population estimate (dashed) against the epoch (one point per evaluation;
epochs, not steps, so that batch-8 and batch-128 arms share an axis); the per-seed gain of the
population estimate at the end (population − EMA, bars: median with the seeds' min–max); and the
distance between the two estimates of the first BN layer's variance, (1/d)‖σ²_pop − σ²_EMA‖₂,
against the epoch (log axis). The claims are in
``normbench/rules/bn_eval_stats.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normbench.analysis.plot import FigureResult, bar_panel, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run

VAL_ACC, VAL_ACC_POP = "val/acc", "val/acc_population"
VAR_DIST = "eval_stats/first_layer/var_dist"
COLORS = ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown")


def by_epoch(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of every row that logged ``key`` and its epoch, in logging order."""
    rows = [(float(r["epoch"]), float(r[key])) for r in run.history if r.get(key) is not None and "epoch" in r]
    if not rows:
        return np.zeros(0), np.zeros(0)
    epochs, values = zip(*rows)
    return np.asarray(epochs), np.asarray(values)


def arm_label(run: Run) -> str:
    """``batch 128, momentum 0.1``: the two settings the arms vary."""
    return f"batch {int(run.get('batch_size'))}, momentum {float(run.get('norm.momentum')):g}"


def arms(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """The runs per arm, ordered by batch size (descending) then momentum (descending)."""
    order = sorted({(int(r.get("batch_size")), float(r.get("norm.momentum"))) for r in runs}, reverse=True)
    out = {f"batch {b}, momentum {m:g}": [] for b, m in order}
    for r in sorted(runs, key=lambda r: r.seed):
        out[arm_label(r)].append(r)
    return out


def bn_eval_stats(runs: Sequence[Run]) -> list[FigureResult]:
    fig, axes = new_figure(1, 3, "BatchNorm at test time: the running average (EMA) vs the population estimate")
    res = FigureResult("bn_eval_stats", fig)
    groups = arms(runs)
    colors = {label: COLORS[i % len(COLORS)] for i, label in enumerate(groups)}
    for label, group in groups.items():
        for key, kind, style in ((VAL_ACC, "EMA", "-"), (VAL_ACC_POP, "population", "--")):
            series = [by_epoch(r, key) for r in group if len(by_epoch(r, key)[0])]
            if series:
                seed_curve(axes[0, 0], res.rows, "val_acc", f"{label}: {kind}", series, colors[label], linestyle=style)
        dist = [by_epoch(r, VAR_DIST) for r in group if len(by_epoch(r, VAR_DIST)[0])]
        if dist:
            seed_curve(axes[0, 2], res.rows, "var_dist", label, dist, colors[label], marker="o")
    finish_axes(axes[0, 0], "epoch", "validation accuracy", "EMA (solid) and population (dashed)")
    gains = {label: [r.final(VAL_ACC_POP) - r.final(VAL_ACC) for r in group] for label, group in groups.items()}
    bar_panel(axes[0, 1], res.rows, "population_gain", gains, colors)
    axes[0, 1].axhline(0.0, color="black", linewidth=0.8)
    finish_axes(axes[0, 1], "arm", "accuracy: population − EMA", "final, per seed (same weights)", legend=False)
    axes[0, 2].set_yscale("log")
    finish_axes(axes[0, 2], "epoch", "(1/d)‖σ²_pop − σ²_EMA‖₂", "first BN layer: the two estimates apart")
    return [res]
