"""ℓp BatchNorm against BatchNorm and the standard network, from a `bn_lp` sweep (Santurkar et al.
2018, §3.3: normalizing by the ℓp norm of the uncentred activations instead of the standard deviation).

Two figures at the main learning rate, with santurkar_vgg's panels: training loss, training and
test accuracy (``bn_lp_training``), and the loss landscape, gradient predictiveness and effective
β-smoothness along the gradient (``bn_lp_landscape``), one colour per norm. The claims
(``normbench/rules/bn_lp.yaml``) use santurkar_vgg's measures: the final training accuracy and the
window medians of the landscape probes.
"""

from __future__ import annotations

from collections.abc import Sequence

from normbench.analysis.figures.plot import FigureResult
from normbench.analysis.figures.santurkar import MAIN_LR, accuracy_figure, learning_rates
from normbench.analysis.figures.santurkar_landscape import figure4
from normbench.analysis.loading.runs import Run

NORMS = ("none", "bn", "bn_l1", "bn_l2", "bn_linf")
"""The arms, in the figures' order (those with runs are drawn)."""


def bn_lp(runs: Sequence[Run]) -> list[FigureResult]:
    norms = [n for n in NORMS if any(r.record.norm.name == n for r in runs)]
    lr = MAIN_LR if MAIN_LR in learning_rates(runs) else learning_rates(runs)[0]
    title = f"Santurkar et al. 2018, §3.3: ℓp BatchNorm (VGG, lr {lr:g})"
    training = accuracy_figure(runs, norms, [lr], "bn_lp_training", title)
    landscape = figure4(runs, norms, "bn_lp_landscape", "Santurkar et al. 2018, §3.3: ℓp BatchNorm's landscape")
    return [training, landscape]
