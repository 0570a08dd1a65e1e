"""Santurkar, Tsipras, Ilyas, Madry 2018, "How Does Batch Normalization Help Optimization?":
Figures 1, 2, 3 and 4 from a `santurkar_vgg` sweep (VGG on CIFAR-10, ``norm`` × ``lr`` × seeds).

- Figure 1: training and test accuracy against steps, standard (``none``) vs ``bn``, lr 0.1 and 0.5.
- Figure 2: the same for ``none``, ``bn`` and ``bn_noisy`` (BN followed by distributional noise).
- Figure 3: internal covariate shift, ‖G − G′‖₂ and cos(G, G′), per measured layer.
- Figure 4: (a) the loss along the gradient (band from min to max over the step sizes),
  (b) gradient predictiveness (band of ‖∇L(θ) − ∇L(θ_η)‖₂), (c) effective β-smoothness.

Every curve is the median over seeds with the seeds' min–max shaded; in Figure 4 (a, b) the
paper's band from the min to the max over step sizes is drawn between the seed medians of the
per-step min and max. Claims rest on per-seed medians over the measured steps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from normbench.analysis.claims import Claim, claim_less, per_seed
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, select
from normbench.analysis.stats import FAILS, HOLDS, fraction_less, median_over_steps, stack

TRAIN_ACC = "train/acc"
BATCH_LOSS = "train/batch_loss"
VAL_ACC = "val/acc"
LANDSCAPE_MIN = "diag/landscape/loss_min"
LANDSCAPE_MAX = "diag/landscape/loss_max"
PRED_MIN = "diag/predictiveness/grad_diff_min"
PRED_MAX = "diag/predictiveness/grad_diff_max"
BETA = "diag/beta_smoothness/beta"
ICS_KEY = re.compile(r"^diag/ics/(?P<layer>.+)/(?P<metric>grad_diff|rel_grad_diff|cos)$")

MAIN_LR = 0.1
HIGH_LR = 0.5
LOW_LR = 0.01
ICS_LRS = (LOW_LR, MAIN_LR)
"""Figure 3's learning rates in the paper; other rates are drawn only when neither is present."""
LR_STYLES = {0.1: "-", 0.5: "--", 0.01: ":"}
LABELS = {"none": "Standard", "bn": "Standard + BatchNorm", "bn_noisy": 'Standard + "Noisy" BatchNorm'}


def _label(norm: str, lr: float | None = None) -> str:
    name = LABELS.get(norm, norm)
    return name if lr is None else f"{name}, lr={lr:g}"


def _lrs(runs: Sequence[Run]) -> list[float]:
    return sorted({float(r.get("lr")) for r in runs})


def _series(runs: Sequence[Run], key: str) -> list[tuple[np.ndarray, np.ndarray]]:
    return [r.series(key) for r in runs if len(r.series(key)[0])]


def _final(key: str):
    return lambda r: r.final(key)


def _median(key: str):
    return lambda r: median_over_steps(r.series(key)[1])


def _range_series(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Loss range along the gradient, max − min over step sizes, at each measured step."""
    s_lo, lo = run.series(LANDSCAPE_MIN)
    s_hi, hi = run.series(LANDSCAPE_MAX)
    steps, both = stack([(s_lo, lo), (s_hi, hi)])
    return steps, both[1] - both[0]


def accuracy_figure(
    runs: Sequence[Run], norms: Sequence[str], lrs: Sequence[float], name: str, title: str
) -> FigureResult:
    """Training loss per logged step, and training / test accuracy per epoch, against steps."""
    fig, axes = new_figure(1, 3, title)
    rows: list[dict] = []
    panels = (
        (axes[0, 0], BATCH_LOSS, "train_loss", 1.0),
        (axes[0, 1], TRAIN_ACC, "train_acc", 100.0),
        (axes[0, 2], VAL_ACC, "test_acc", 100.0),
    )
    for norm in norms:
        for lr in lrs:
            group = select(runs, norm__name=norm, lr=lr)
            if not group:
                continue
            style = LR_STYLES.get(lr, "-.")
            color = NORM_COLORS.get(norm)
            for ax, key, panel, scale in panels:
                ys = [(s, scale * v) for s, v in _series(group, key)]
                if ys:
                    seed_curve(ax, rows, panel, _label(norm, lr), ys, color=color, linestyle=style, marker=".")
    finish_axes(axes[0, 0], "steps", "training loss (batch)", "training loss")
    axes[0, 0].set_yscale("log")  # a diverging run's loss would flatten every other curve
    finish_axes(axes[0, 1], "steps", "training accuracy (%)", "training accuracy (epoch mean)")
    finish_axes(axes[0, 2], "steps", "test accuracy (%)", "test accuracy")
    return FigureResult(name, fig, rows)


def figure1(runs: Sequence[Run]) -> FigureResult:
    lrs = [lr for lr in _lrs(runs) if lr in (MAIN_LR, HIGH_LR)] or _lrs(runs)
    res = accuracy_figure(
        runs, ["none", "bn"], lrs, "santurkar_fig1", "Santurkar et al. 2018, Fig. 1: VGG, standard vs BatchNorm"
    )
    for lr in lrs:
        none, bn = select(runs, norm__name="none", lr=lr), select(runs, norm__name="bn", lr=lr)
        if not none or not bn:
            continue
        res.claims.append(
            claim_less(
                f"BN trains faster: higher final training accuracy than the standard network (lr {lr:g})",
                "BN reaches high training accuracy in far fewer steps (Fig. 1)",
                res.name,
                ("standard", per_seed(none, _final(TRAIN_ACC))),
                ("BN", per_seed(bn, _final(TRAIN_ACC))),
            )
        )
        res.claims.append(
            claim_less(
                f"BN generalizes better early: higher final test accuracy than the standard network (lr {lr:g})",
                "BN's test accuracy is higher throughout training (Fig. 1)",
                res.name,
                ("standard", per_seed(none, _final(VAL_ACC))),
                ("BN", per_seed(bn, _final(VAL_ACC))),
            )
        )
    return res


def figure2(runs: Sequence[Run]) -> FigureResult:
    lr = MAIN_LR if MAIN_LR in _lrs(runs) else _lrs(runs)[0]
    res = accuracy_figure(
        runs,
        ["none", "bn", "bn_noisy"],
        [lr],
        "santurkar_fig2",
        f"Santurkar et al. 2018, Fig. 2: noisy BatchNorm (lr {lr:g})",
    )
    none, bn, noisy = (select(runs, norm__name=n, lr=lr) for n in ("none", "bn", "bn_noisy"))
    if none and noisy:
        res.claims.append(
            claim_less(
                "Noisy BN still trains faster than the standard network (final training accuracy)",
                "BN with injected distributional noise trains nearly as well as BN (Fig. 2)",
                res.name,
                ("standard", per_seed(none, _final(TRAIN_ACC))),
                ("noisy BN", per_seed(noisy, _final(TRAIN_ACC))),
            )
        )
    if none and bn and noisy:
        gap_noise = abs(per_seed(bn, _final(TRAIN_ACC)).median - per_seed(noisy, _final(TRAIN_ACC)).median)
        gap_bn = per_seed(bn, _final(TRAIN_ACC)).median - per_seed(none, _final(TRAIN_ACC)).median
        verdict = HOLDS if gap_bn > 0 and gap_noise < 0.5 * gap_bn else FAILS
        res.claims.append(
            Claim(
                "The gap between BN and noisy BN is small next to the gap between BN and the standard network",
                '"almost non-existent" difference between BN with and without noise (Fig. 2)',
                f"|BN − noisy BN| = {100 * gap_noise:.3g} points vs BN − standard = {100 * gap_bn:.3g} points "
                "(medians over seeds of final training accuracy; holds when below half)",
                verdict,
                res.name,
            )
        )
    return res


def figure3(runs: Sequence[Run]) -> FigureResult:
    layers: dict[str, set[str]] = {}
    for run in runs:
        for key in run.metric_keys():
            m = ICS_KEY.match(key)
            if m:
                layers.setdefault(m["layer"], set()).add(m["metric"])
    names = sorted(layers, key=_natural)
    fig, axes = new_figure(2, max(len(names), 1), "Santurkar et al. 2018, Fig. 3: internal covariate shift")
    res = FigureResult("santurkar_fig3", fig)
    lrs = [lr for lr in _lrs(runs) if lr in ICS_LRS] or _lrs(runs)
    for j, layer in enumerate(names):
        for norm in ("none", "bn"):
            for lr in lrs:
                group = select(runs, norm__name=norm, lr=lr)
                for i, (metric, ylabel) in enumerate((("grad_diff", "‖G − G′‖₂"), ("cos", "cos(G, G′)"))):
                    ys = _series(group, f"diag/ics/{layer}/{metric}")
                    if ys:
                        seed_curve(
                            axes[i, j],
                            res.rows,
                            f"{layer}/{metric}",
                            _label(norm, lr),
                            ys,
                            color=NORM_COLORS.get(norm),
                            linestyle=LR_STYLES.get(lr, "-."),
                        )
                    finish_axes(axes[i, j], "steps", ylabel, f"layer {layer}")
        for lr in lrs:
            none, bn = select(runs, norm__name="none", lr=lr), select(runs, norm__name="bn", lr=lr)
            key = f"diag/ics/{layer}/grad_diff"
            if not _series(none, key) or not _series(bn, key):
                continue
            res.claims.append(
                claim_less(
                    f"BN does not reduce ICS: ‖G − G′‖₂ with BN is not below the standard network's "
                    f"(layer {layer}, lr {lr:g})",
                    "BN networks show ICS as large as or larger than standard ones (Fig. 3)",
                    res.name,
                    ("standard", per_seed(none, _median(key))),
                    ("BN", per_seed(bn, _median(key))),
                    "medians over measured steps",
                )
            )
    return res


def figure4(runs: Sequence[Run]) -> FigureResult:
    lr = MAIN_LR if MAIN_LR in _lrs(runs) else _lrs(runs)[0]
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
            x, lo, _, _ = seed_curve(None, res.rows, f"{panel}/min", _label(norm), _series(group, key_lo))
            x2, hi, _, _ = seed_curve(None, res.rows, f"{panel}/max", _label(norm), _series(group, key_hi))
            if len(x) and len(x2):
                xs, both = stack([(x, lo), (x2, hi)])
                ax.fill_between(xs, both[0], both[1], color=color, alpha=0.35, label=_label(norm), linewidth=0)
                ax.plot(xs, both[0], color=color, linewidth=0.6)
                ax.plot(xs, both[1], color=color, linewidth=0.6)
        finish_axes(ax, "steps", ylabel, title)
    for norm, group in groups.items():
        if group:
            seed_curve(
                axes[0, 2], res.rows, "beta_smoothness", _label(norm), _series(group, BETA), color=NORM_COLORS.get(norm)
            )
    finish_axes(axes[0, 2], "steps", "max ‖Δ∇L‖ / ‖Δθ‖", "(c) effective β-smoothness")

    none, bn = groups["none"], groups["bn"]
    if none and bn:
        measures = (
            (
                "loss range along the gradient (max − min over step sizes)",
                "BN's loss landscape is smoother: smaller loss variation along the gradient (Fig. 4a)",
                lambda r: median_over_steps(_range_series(r)[1]),
                _range_series,
            ),
            (
                "largest change of the gradient along the step ‖∇L(θ) − ∇L(θ_η)‖₂",
                "BN's gradients are more predictive: smaller gradient change (Fig. 4b)",
                _median(PRED_MAX),
                lambda r: r.series(PRED_MAX),
            ),
            (
                "effective β-smoothness",
                "BN's effective β-smoothness is lower (Fig. 4c)",
                _median(BETA),
                lambda r: r.series(BETA),
            ),
        )
        for what, paper, value, series in measures:
            a, b = per_seed(bn, value), per_seed(none, value)
            note = _step_note(bn, none, series)
            res.claims.append(
                claim_less(
                    f"With BN, the {what} is smaller than without (median over measured steps)",
                    paper,
                    res.name,
                    ("BN", a),
                    ("standard", b),
                    note,
                )
            )
    return res


def _step_note(a_runs: Sequence[Run], b_runs: Sequence[Run], series) -> str:
    """ "at k of m measured steps" where the seed median of ``a`` is below that of ``b``."""
    xa, ma = stack([series(r) for r in a_runs])
    xb, mb = stack([series(r) for r in b_runs])
    common, ia, ib = np.intersect1d(xa, xb, return_indices=True)
    if not len(common):
        return ""
    with np.errstate(all="ignore"):
        med_a = np.nanmedian(ma[:, ia], axis=0) if ma.size else np.full(len(common), math.nan)
        med_b = np.nanmedian(mb[:, ib], axis=0) if mb.size else np.full(len(common), math.nan)
    k, m = fraction_less(med_a, med_b)
    return f"smaller at {k} of {m} measured steps (seed medians)"


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def santurkar_vgg(runs: Sequence[Run]) -> list[FigureResult]:
    out = [figure1(runs), figure2(runs), figure4(runs)]
    if any(ICS_KEY.match(k) for r in runs for k in r.metric_keys()):
        out.insert(2, figure3(runs))
    return out


__all__ = ["santurkar_vgg", "figure1", "figure2", "figure3", "figure4"]
