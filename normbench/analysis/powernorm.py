"""Shen, Yao, Gholami, Mahoney, Keutzer 2020, "PowerNorm: Rethinking Batch Normalization in
Transformers": Figure 2 (batch statistics against running statistics, CV vs NLP) from a
`powernorm_stats` sweep, and Figure 3 (the gradient through the batch statistics) from a
`powernorm_grads` sweep.

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
VAR_INPUT_GRAD = "bn_stats/first_layer/var_input_grad"
MEAN_INPUT_GRAD = "bn_stats/first_layer/mean_input_grad"
VAR_INPUT_GRAD_CV = "bn_stats/first_layer/var_input_grad_cv"
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
    panels = ((axes[0, 0], MEAN_DIST, "mean", "(1/d)‖μ_B − μ‖₂"), (axes[0, 1], VAR_DIST, "var", "(1/d)‖σ²_B − σ²‖₂"))
    _cv_nlp_panels(runs, res, panels)
    return [res]


def powernorm_grads(runs: Sequence[Run]) -> list[FigureResult]:
    """Fig. 3: at the first BN layer, ‖∂L/∂x‖₂ through σ²_B and through μ_B (epoch means), and the
    step-to-step coefficient of variation of the first within each epoch, CV vs NLP."""
    fig, axes = new_figure(1, 3, "Shen et al. 2020, Fig. 3: the gradient through the first BN layer's batch statistics")
    res = FigureResult("powernorm_fig3", fig)
    panels = (
        (axes[0, 0], VAR_INPUT_GRAD, "var_input_grad", "‖∂L/∂x‖₂ through σ²_B"),
        (axes[0, 1], MEAN_INPUT_GRAD, "mean_input_grad", "‖∂L/∂x‖₂ through μ_B"),
        (axes[0, 2], VAR_INPUT_GRAD_CV, "var_input_grad_cv", "‖∂L/∂x‖₂ through σ²_B:\nwithin-epoch s/m"),
    )
    _cv_nlp_panels(runs, res, panels)
    return [res]


def _cv_nlp_panels(runs: Sequence[Run], res: FigureResult, panels: Sequence[tuple]) -> None:
    """Per panel (axes, key, panel name, y label): the CV and NLP curves against the percentage of
    training, medians over seeds with the min–max shaded, on a log axis."""
    groups = {a: [r for r in runs if arm(r) == a] for a in ARMS}
    for ax, key, panel, ylabel in panels:
        for a, group in groups.items():
            series = [percent_of_training(r, key) for r in group if len(r.series(key)[0])]
            if series:
                label, color = ARMS[a]
                seed_curve(ax, res.rows, panel, label, series, color=color, marker="o")
        ax.set_yscale("log")
        finish_axes(ax, "percent of training (%)", ylabel)
