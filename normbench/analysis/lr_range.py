"""Does BatchNorm allow larger learning rates? From a `bn_lr_range` sweep (norm x learning rate):
the final validation accuracy against the learning rate per norm, diverged runs marked.

One panel: per norm, the median over seeds of the final ``val/acc`` at each learning rate (log
axis) with the seeds' min–max; a diverged run counts with accuracy 0 here (the claims give it the
worst value and switch to ranks), and the number of diverged seeds is written beside each point.
The claims are in ``normbench/rules/bn_lr_range.yaml``; their measures read a run's whole
learning-rate grid (`lr_grid`: the runs of its setting and seed that differ in ``lr`` alone), so an
arm names one anchor lr and each seed gives one value: its best accuracy over the grid
(`best_over_lr`), the largest lr at which it trained (`largest_trained_lr`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from normbench.analysis.claims import measure
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, experiment_key

VAL_ACC = "val/acc"


def final_acc(run: Run) -> float:
    """The final validation accuracy; 0 for a diverged run (it never finished)."""
    return 0.0 if run.status == "diverged" else run.final(VAL_ACC)


def lr_grid(run: Run, all_runs: Sequence[Run]) -> list[Run]:
    """The runs of ``all_runs`` of ``run``'s seed whose config differs from ``run``'s in ``lr`` alone
    (``run`` among them), by increasing lr: one seed's learning-rate grid of one setting."""

    def setting(r: Run) -> dict:
        return {k: v for k, v in experiment_key(r).items() if k != "lr"}

    mine = [r for r in all_runs if r.seed == run.seed and setting(r) == setting(run)]
    return sorted(mine or [run], key=lambda r: float(r.get("lr")))


@measure("best_over_lr")
def best_over_lr(run: Run, all_runs: Sequence[Run]) -> float:
    """The best final validation accuracy over ``run``'s learning-rate grid (`lr_grid`; a diverged
    run counts 0): the accuracy at the best lr, as Ioffe & Szegedy 2015 compare BN-x30 with
    Inception at its own best rate (Table 2 / Fig. 2)."""
    return max(final_acc(r) for r in lr_grid(run, all_runs))


@measure("largest_trained_lr")
def largest_trained_lr(run: Run, all_runs: Sequence[Run], trained_above: float) -> float:
    """log10 of the largest lr of ``run``'s grid (`lr_grid`) at which it trained: finished (not
    diverged) with a final validation accuracy above ``trained_above``; one decade below the grid's
    lowest lr when it trained at none (the grid cannot say how low). In decades, so a difference of
    0.7 is a 5x larger rate (Santurkar et al. 2018, Fig. 1: lr 0.5 against 0.1)."""
    grid = lr_grid(run, all_runs)
    trained = [float(r.get("lr")) for r in grid if r.status != "diverged" and final_acc(r) > trained_above]
    return math.log10(max(trained)) if trained else math.log10(float(grid[0].get("lr"))) - 1.0


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
