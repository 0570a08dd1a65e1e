"""Santurkar et al. 2018, Figures 3 and 4 from a `santurkar_vgg` sweep.

- Figure 3: internal covariate shift per measured layer (Definition 2.1): ‖G − G′‖₂, the relative
  difference ‖G − G′‖₂ / ‖G‖₂ and cos(G, G′). The claim ("BN does not reduce ICS") is judged on the
  scale-free quantities only: BN's gradients are ~two orders of magnitude larger than the
  standard network's, so an absolute gap says more about that scale than about ICS.
- Figure 4: (a) the loss along the gradient (band from min to max over the step sizes),
  (b) gradient predictiveness (band of ‖∇L(θ) − ∇L(θ_η)‖₂), (c) effective β-smoothness.

The claims (``normbench/rules/santurkar_vgg.yaml``) use the measured steps inside the rules'
``claim_window`` (a fraction of the run's training steps: the first 20 % are a transient in which
both networks move fast); per run the median over those steps (the median is robust to a few
outliers, none is removed). The figures shade the steps left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from normbench.analysis.figures.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.figures.santurkar import (
    LOW_LR,
    LR_STYLES,
    MAIN_LR,
    _natural,
    hatched_band,
    label,
    learning_rates,
    series_of,
)
from normbench.analysis.judging.claims import measure
from normbench.analysis.judging.stats import median_over_steps, stack
from normbench.analysis.loading.runs import Run, select
from normbench.analysis.wording.figure_names import titled
from normbench.rules import load_rules_data

LANDSCAPE_MIN = "landscape/loss_min"
LANDSCAPE_MAX = "landscape/loss_max"
PRED_MAX = "predictiveness/grad_diff_max"
PRED_MIN = "predictiveness/grad_diff_min"
BETA = "beta_smoothness/beta"
ICS_KEY = re.compile(r"^ics/(?P<layer>[^/]+)/(?P<metric>grad_diff|rel_grad_diff|cos)$")
ICS_LRS = (LOW_LR, MAIN_LR)
"""Figure 3's learning rates in the paper; other rates are drawn only when neither is present."""
ICS_PANELS = (("grad_diff", "‖G − G′‖₂"), ("rel_grad_diff", "‖G − G′‖₂ / ‖G‖₂"), ("cos", "cos(G, G′)"))


def claim_window() -> tuple[float, float]:
    """The rules' window of the claims of Figs. 3-4, as fractions of the training steps."""
    lo, hi = load_rules_data("santurkar_vgg")["params"]["claim_window"]
    return float(lo), float(hi)


def in_window(run: Run, steps: np.ndarray, window: Sequence[float]) -> np.ndarray:
    """A mask of the ``steps`` inside ``window`` (fractions) of the run's planned training length."""
    total = run.record.max_steps or run.final_step or 1
    lo, hi = window
    return (steps >= lo * float(total)) & (steps <= hi * float(total))


def window_median(run: Run, series: Callable[[Run], tuple[np.ndarray, np.ndarray]], window: Sequence[float]) -> float:
    """The median of ``series(run)`` over the measured steps inside ``window``."""
    steps, values = series(run)
    return median_over_steps(values[in_window(run, steps, window)]) if len(steps) else math.nan


@measure("key_window_median")
def key_window_median(run: Run, key: str, claim_window: Sequence[float]) -> float:
    """The median of the logged ``key`` over the steps in the claim window."""
    return window_median(run, lambda r: r.series(key), claim_window)


@measure("loss_range_window_median")
def loss_range_window_median(run: Run, claim_window: Sequence[float]) -> float:
    """The median over the claim window of the loss range along the gradient (max − min)."""
    return window_median(run, loss_range_series, claim_window)


@measure("ics_window_median")
def ics_window_median(run: Run, layer_index: int, metric: str, claim_window: Sequence[float]) -> float:
    """The median over the claim window of ICS ``metric`` of the ``layer_index``-th measured layer."""
    layers = ics_layers([run])
    if layer_index >= len(layers):
        return math.nan
    return window_median(run, lambda r: r.series(f"ics/{layers[layer_index]}/{metric}"), claim_window)


def ics_layers(runs: Sequence[Run]) -> list[str]:
    """The layers whose ICS the runs measured, in the model's order."""
    return sorted({m["layer"] for r in runs for k in r.metric_keys() if (m := ICS_KEY.match(k))}, key=_natural)


def loss_range_series(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Loss range along the gradient, max − min over step sizes, at each measured step."""
    steps, both = stack([run.series(LANDSCAPE_MIN), run.series(LANDSCAPE_MAX)])
    return steps, both[1] - both[0]


def figure3(runs: Sequence[Run]) -> FigureResult:
    layers = ics_layers(runs)
    title = "Santurkar et al. 2018, Fig. 3: internal covariate shift"
    fig, axes = new_figure(len(ICS_PANELS), max(len(layers), 1), title)
    res = FigureResult("santurkar_fig3", fig)
    lrs = [lr for lr in learning_rates(runs) if lr in ICS_LRS] or learning_rates(runs)
    for j, layer in enumerate(layers):
        for norm in ("none", "bn"):
            for lr in lrs:
                group = select(runs, norm__name=norm, lr=lr)
                for i, (metric, ylabel) in enumerate(ICS_PANELS):
                    ys = series_of(group, f"ics/{layer}/{metric}")
                    if ys:
                        seed_curve(axes[i, j], res.rows, f"{layer}/{metric}", label(norm, lr), ys,
                                   color=NORM_COLORS.get(norm), linestyle=LR_STYLES.get(lr, "-."))  # fmt: skip
                    finish_axes(axes[i, j], "steps", ylabel, f"layer {layer}")
    return res


UNJUDGED = "#fbf3dc"
"""The steps a claim leaves out, shaded in cream."""


def figure4(
    runs: Sequence[Run], norms: Sequence[str] = ("none", "bn"), name: str = "santurkar_fig4", title: str | None = None
) -> FigureResult:
    """Fig. 4's three panels for ``norms`` at the main learning rate (``bn_lp`` draws the ℓp norms too),
    the runs' scope under the title, one legend in panel (c) (moved under it when it covers a line)."""
    lr = MAIN_LR if MAIN_LR in learning_rates(runs) else learning_rates(runs)[0]
    title = titled(f"{title or 'Santurkar et al. 2018, Fig. 4: optimization landscape'} (lr {lr:g})", runs)
    fig, axes = new_figure(1, 3, title, size=(13.0, 3.8))
    res = FigureResult(name, fig)
    groups = {norm: g for norm in norms if (g := select(runs, norm__name=norm, lr=lr))}
    _band_panels(axes[0, :2], res, groups)
    for norm, group in groups.items():
        seed_curve(axes[0, 2], res.rows, "beta_smoothness", label(norm), series_of(group, BETA),
                   color=NORM_COLORS.get(norm))  # fmt: skip
    finish_axes(axes[0, 2], "steps", "max ‖Δ∇L‖ / ‖Δθ‖", "(c) effective β-smoothness", legend=False)
    start = claim_window()[0] * max((r.record.max_steps or r.final_step) for r in runs)
    for ax in axes[0]:
        ax.axvspan(0.0, start, color=UNJUDGED, zorder=0)  # left out of the claims (not grey: grey is Standard's band)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[0, 2].legend([*handles, Patch(color=UNJUDGED)], [*labels, "steps left out of the claims"], fontsize=7)
    return res


BAND_PANELS = (
    ("landscape", LANDSCAPE_MIN, LANDSCAPE_MAX, "loss along the gradient", "(a) loss landscape"),
    ("predictiveness", PRED_MIN, PRED_MAX, "‖∇L(θ) − ∇L(θ_η)‖₂", "(b) gradient predictiveness"),
)
"""Fig. 4 (a) and (b): a band per norm from the min to the max over the step sizes along the gradient."""


def _band_panels(axes: Sequence[Axes], res: FigureResult, groups: dict[str, list[Run]]) -> None:
    """Panels (a) and (b): per norm, the seed medians of the min and of the max over step sizes, the
    band between them. Two norms (the paper's figure): the second hatched over the first's fill;
    more: each a light fill outlined in its colour (hatches over each other read as noise)."""
    for ax, (panel, key_lo, key_hi, ylabel, title) in zip(axes, BAND_PANELS):
        for i, (norm, group) in enumerate(groups.items()):
            x, lo, _, _ = seed_curve(None, res.rows, f"{panel}/min", label(norm), series_of(group, key_lo))
            x2, hi, _, _ = seed_curve(None, res.rows, f"{panel}/max", label(norm), series_of(group, key_hi))
            if len(x) and len(x2):
                xs, both = stack([(x, lo), (x2, hi)])
                hatched_band(ax, xs, both[0], both[1], NORM_COLORS.get(norm), i if len(groups) <= 2 else 0,
                             label=label(norm), width=0.5 if len(groups) <= 2 else 1.0)  # fmt: skip
        finish_axes(ax, "steps", ylabel, title, legend=False)
