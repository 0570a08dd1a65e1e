"""Shen, Yao, Gholami, Mahoney, Keutzer 2020, "PowerNorm: Rethinking Batch Normalization in
Transformers": Figure 2 (batch statistics against running statistics, CV vs NLP) from a
`powernorm_stats` sweep.

The paper plots, for the first BN layer, (1/d)‖μ_B − μ‖₂ and (1/d)‖σ²_B − σ²‖₂ against the
percentage of training, for ResNet20 on CIFAR-10 and for the Transformer on IWSLT14; the NLP
curves sit far above the CV ones. Here each curve is the median over seeds of the per-epoch
means the diagnostic logs, with the seeds' min–max shaded, on a log axis. The claims are in
``normbench/rules/powernorm_stats.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normbench.analysis.plot import FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run

MEAN_DIST = "bn_stats/first_layer/mean_dist"
VAR_DIST = "bn_stats/first_layer/var_dist"
ARMS = {"cv": ("CV: ResNet20 + BN, CIFAR-10", "tab:blue"), "nlp": ("NLP: Transformer + BN, translation", "tab:red")}


def arm(run: Run) -> str:
    """``nlp`` for a Transformer run, ``cv`` otherwise."""
    return "nlp" if str(run.get("model.name", "")).startswith("transformer") else "cv"


def percent_of_training(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    steps, values = run.series(key)
    total = max(run.final_step, 1)
    return 100.0 * steps / total, values


def powernorm_stats(runs: Sequence[Run]) -> list[FigureResult]:
    fig, axes = new_figure(1, 2, "Shen et al. 2020, Fig. 2: batch vs running statistics of the first BN layer")
    res = FigureResult("powernorm_fig2", fig)
    groups = {a: [r for r in runs if arm(r) == a] for a in ARMS}
    panels = ((axes[0, 0], MEAN_DIST, "mean", "(1/d)‖μ_B − μ‖₂"), (axes[0, 1], VAR_DIST, "var", "(1/d)‖σ²_B − σ²‖₂"))
    for ax, key, panel, ylabel in panels:
        for a, group in groups.items():
            series = [percent_of_training(r, key) for r in group if len(r.series(key)[0])]
            if series:
                label, color = ARMS[a]
                seed_curve(ax, res.rows, panel, label, series, color=color, marker="o")
        ax.set_yscale("log")
        finish_axes(ax, "percent of training (%)", ylabel)
    return [res]
