"""Does BatchNorm allow larger learning rates? From a `bn_lr_range` sweep (norm x learning rate):
the final validation accuracy against the learning rate per norm, diverged runs marked.

One panel: per norm, the median over seeds of the final ``val/acc`` at each learning rate (log
axis) with the seeds' min–max; a diverged run counts with accuracy 0 here (the claims give it the
worst value and switch to ranks), and the number of diverged seeds is written beside each point.
The claims are in ``normbench/rules/bn_lr_range.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run

VAL_ACC = "val/acc"


def final_acc(run: Run) -> float:
    """The final validation accuracy; 0 for a diverged run (it never finished)."""
    return 0.0 if run.status == "diverged" else run.final(VAL_ACC)


def bn_lr_range(runs: Sequence[Run]) -> list[FigureResult]:
    title = "Final accuracy against the learning rate, per norm\n(a diverged run: 0; their count beside)"
    fig, axes = new_figure(1, 1, title)
    res = FigureResult("bn_lr_range", fig)
    ax = axes[0, 0]
    for norm in sorted({str(r.get("norm.name")) for r in runs}):
        mine = [r for r in runs if r.get("norm.name") == norm]
        by_seed: dict[int, list[Run]] = {}
        for r in mine:
            by_seed.setdefault(r.seed, []).append(r)
        series = []
        for group in by_seed.values():
            group = sorted(group, key=lambda r: float(r.get("lr")))
            series.append((np.asarray([float(r.get("lr")) for r in group]), np.asarray([final_acc(r) for r in group])))
        color = NORM_COLORS.get(norm, "tab:gray")
        xs, med, _, _ = seed_curve(ax, res.rows, "final_val_acc", norm, series, color, marker="o")
        for x, m in zip(xs, med):
            diverged = sum(1 for r in mine if float(r.get("lr")) == x and r.status == "diverged")
            if diverged:
                ax.annotate(f"{diverged}×div", (x, m), fontsize=7, color=color)
    ax.set_xscale("log")
    finish_axes(ax, "learning rate", "final validation accuracy")
    return [res]
