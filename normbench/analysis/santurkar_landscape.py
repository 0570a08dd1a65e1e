"""Santurkar et al. 2018, Figures 3 and 4 from a `santurkar_vgg` sweep.

- Figure 3: internal covariate shift per measured layer (Definition 2.1): ‖G − G′‖₂, the relative
  difference ‖G − G′‖₂ / ‖G‖₂ and cos(G, G′). The claim ("BN does not reduce ICS") is judged on the
  scale-free quantities only: BN's gradients are ~two orders of magnitude larger than the
  standard network's, so an absolute gap says more about that scale than about ICS.
- Figure 4: (a) the loss along the gradient (band from min to max over the step sizes),
  (b) gradient predictiveness (band of ‖∇L(θ) − ∇L(θ_η)‖₂), (c) effective β-smoothness.

Rules fixed before the runs: the claims use the measured steps in the last `CLAIM_WINDOW` of
training (the first 20 % are a transient in which both networks move fast); per run the median
over those steps (no outlier is removed: the median is robust to a few); per arm the seeds'
median and min–max; a run that diverged counts with the worst value of the measure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np

from normbench.analysis.claims import HIGHER_IS_BETTER, LOWER_IS_BETTER, Scale, claim_less, per_seed
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, select
from normbench.analysis.santurkar import LOW_LR, LR_STYLES, MAIN_LR, _natural, label, learning_rates, series_of
from normbench.analysis.stats import fraction_less, median_over_steps, stack

LANDSCAPE_MIN = "landscape/loss_min"
LANDSCAPE_MAX = "landscape/loss_max"
PRED_MAX = "predictiveness/grad_diff_max"
PRED_MIN = "predictiveness/grad_diff_min"
BETA = "beta_smoothness/beta"
ICS_KEY = re.compile(r"^ics/(?P<layer>[^/]+)/(?P<metric>grad_diff|rel_grad_diff|cos)$")
ICS_LRS = (LOW_LR, MAIN_LR)
"""Figure 3's learning rates in the paper; other rates are drawn only when neither is present."""
CLAIM_WINDOW = (0.2, 1.0)
"""The claims of Figs. 3-4 use the steps from 20 % to 100 % of the run's training steps."""
ICS_PANELS = (("grad_diff", "‖G − G′‖₂"), ("rel_grad_diff", "‖G − G′‖₂ / ‖G‖₂"), ("cos", "cos(G, G′)"))


def in_window(run: Run, steps: np.ndarray) -> np.ndarray:
    """A mask of the ``steps`` inside `CLAIM_WINDOW` of the run's planned training length."""
    total = run.get("max_steps") or run.final_step or 1
    lo, hi = CLAIM_WINDOW
    return (steps >= lo * float(total)) & (steps <= hi * float(total))


def window_median(series: Callable[[Run], tuple[np.ndarray, np.ndarray]]) -> Callable[[Run], float]:
    """Per run: the median of ``series(run)`` over the measured steps in `CLAIM_WINDOW`."""

    def value(run: Run) -> float:
        steps, values = series(run)
        return median_over_steps(values[in_window(run, steps)]) if len(steps) else math.nan

    return value


def key_series(key: str) -> Callable[[Run], tuple[np.ndarray, np.ndarray]]:
    return lambda run: run.series(key)


def loss_range_series(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Loss range along the gradient, max − min over step sizes, at each measured step."""
    steps, both = stack([run.series(LANDSCAPE_MIN), run.series(LANDSCAPE_MAX)])
    return steps, both[1] - both[0]


def figure3(runs: Sequence[Run], scale: Scale) -> FigureResult:
    layers = sorted({m["layer"] for r in runs for k in r.metric_keys() if (m := ICS_KEY.match(k))}, key=_natural)
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
        for lr in lrs:
            none, bn = select(runs, norm__name="none", lr=lr), select(runs, norm__name="bn", lr=lr)
            if not series_of(none, f"ics/{layer}/cos") or not series_of(bn, f"ics/{layer}/cos"):
                continue
            absolute = (per_seed(g, window_median(key_series(f"ics/{layer}/grad_diff")), LOWER_IS_BETTER)
                        for g in (none, bn))  # fmt: skip
            context = "absolute ‖G − G′‖₂ (not judged: scale-dependent) standard {} vs BN {}".format(
                *(s.fmt(3) for s in absolute)
            )
            res.claims.append(
                claim_less(
                    f"BN does not reduce ICS: relative ‖G − G′‖/‖G‖ with BN not below the standard network's "
                    f"(layer {layer}, lr {lr:g})",
                    "BN networks show ICS as large as or larger than standard ones (Fig. 3)",
                    res.name,
                    ("standard", per_seed(none, window_median(key_series(f"ics/{layer}/rel_grad_diff")),
                                          LOWER_IS_BETTER)),
                    ("BN", per_seed(bn, window_median(key_series(f"ics/{layer}/rel_grad_diff")), LOWER_IS_BETTER)),
                    scale,
                    context,
                )  # fmt: skip
            )
            res.claims.append(
                claim_less(
                    f"BN does not reduce ICS: cos(G, G′) with BN not above the standard network's "
                    f"(layer {layer}, lr {lr:g})",
                    "BN networks show ICS as large as or larger than standard ones (Fig. 3)",
                    res.name,
                    ("BN", per_seed(bn, window_median(key_series(f"ics/{layer}/cos")), HIGHER_IS_BETTER)),
                    ("standard", per_seed(none, window_median(key_series(f"ics/{layer}/cos")), HIGHER_IS_BETTER)),
                    scale,
                )
            )
    return res


def figure4(runs: Sequence[Run], scale: Scale) -> FigureResult:
    lr = MAIN_LR if MAIN_LR in learning_rates(runs) else learning_rates(runs)[0]
    fig, axes = new_figure(1, 3, f"Santurkar et al. 2018, Fig. 4: optimization landscape (VGG, lr {lr:g})")
    res = FigureResult("santurkar_fig4", fig)
    panels = (
        (axes[0, 0], "landscape", LANDSCAPE_MIN, LANDSCAPE_MAX, "loss along the gradient", "(a) loss landscape"),
        (axes[0, 1], "predictiveness", PRED_MIN, PRED_MAX, "‖∇L(θ) − ∇L(θ_η)‖₂", "(b) gradient predictiveness"),
    )
    groups = {norm: select(runs, norm__name=norm, lr=lr) for norm in ("none", "bn")}
    for ax, panel, key_lo, key_hi, ylabel, title in panels:
        for norm, group in groups.items():
            if not group:
                continue
            color = NORM_COLORS.get(norm)
            x, lo, _, _ = seed_curve(None, res.rows, f"{panel}/min", label(norm), series_of(group, key_lo))
            x2, hi, _, _ = seed_curve(None, res.rows, f"{panel}/max", label(norm), series_of(group, key_hi))
            if len(x) and len(x2):
                xs, both = stack([(x, lo), (x2, hi)])
                ax.fill_between(xs, both[0], both[1], color=color, alpha=0.35, label=label(norm), linewidth=0)
                ax.plot(xs, both[0], color=color, linewidth=0.6)
                ax.plot(xs, both[1], color=color, linewidth=0.6)
        finish_axes(ax, "steps", ylabel, title)
    for norm, group in groups.items():
        if group:
            seed_curve(axes[0, 2], res.rows, "beta_smoothness", label(norm), series_of(group, BETA),
                       color=NORM_COLORS.get(norm))  # fmt: skip
    finish_axes(axes[0, 2], "steps", "max ‖Δ∇L‖ / ‖Δθ‖", "(c) effective β-smoothness")
    for ax in axes[0]:
        ax.axvspan(*(f * max((r.get("max_steps") or r.final_step) for r in runs) for f in (0.0, CLAIM_WINDOW[0])),
                   color="0.9", zorder=0)  # fmt: skip  (left out of the claims)

    none, bn = groups["none"], groups["bn"]
    if none and bn:
        measures = (
            ("loss range along the gradient (max − min over step sizes)",
             "BN's loss landscape is smoother: smaller loss variation along the gradient (Fig. 4a)", loss_range_series),
            ("largest change of the gradient along the step ‖∇L(θ) − ∇L(θ_η)‖₂",
             "BN's gradients are more predictive: smaller gradient change (Fig. 4b)", key_series(PRED_MAX)),
            ("effective β-smoothness", "BN's effective β-smoothness is lower (Fig. 4c)", key_series(BETA)),
        )  # fmt: skip
        for what, paper, series in measures:
            res.claims.append(
                claim_less(
                    f"With BN, the {what} is smaller than without (median over steps {CLAIM_WINDOW[0]:.0%}–100 %)",
                    paper,
                    res.name,
                    ("BN", per_seed(bn, window_median(series), LOWER_IS_BETTER)),
                    ("standard", per_seed(none, window_median(series), LOWER_IS_BETTER)),
                    scale,
                    step_note(bn, none, series),
                )
            )
    return res


def step_note(a_runs: Sequence[Run], b_runs: Sequence[Run], series) -> str:
    """ "at k of m measured steps in the window" where the seed median of ``a`` is below ``b``'s."""
    xa, ma = stack([series(r) for r in a_runs])
    xb, mb = stack([series(r) for r in b_runs])
    common, ia, ib = np.intersect1d(xa, xb, return_indices=True)
    inside = in_window(a_runs[0], common)
    if not inside.any():
        return ""
    with np.errstate(all="ignore"):
        med_a = np.nanmedian(ma[:, ia], axis=0)[inside]
        med_b = np.nanmedian(mb[:, ib], axis=0)[inside]
    k, m = fraction_less(med_a, med_b)
    return f"smaller at {k} of {m} measured steps in the window (seed medians)"
