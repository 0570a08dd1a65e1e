"""Santurkar, Tsipras, Ilyas, Madry 2018, "How Does Batch Normalization Help Optimization?":
Figures 1 and 2 from a `santurkar_vgg` sweep (VGG on CIFAR-10, ``norm`` × ``lr`` × seeds); Figures
3 and 4 are in `normbench.analysis.santurkar_landscape`.

- Figure 1: training loss and training accuracy per logged step (smoothed), test accuracy per
  evaluation, and (c) the distribution of one layer's activations over training, standard
  (``none``) vs ``bn``, at lr 0.1 and 0.5.
- Figure 2: the same for ``none``, ``bn`` and ``bn_noisy`` (BN followed by distributional noise).

Every curve is the median over seeds with the seeds' min–max shaded; an activation distribution is
drawn as the seed medians of its 5–95 % and 25–75 % quantile bands and its median. Rules, fixed
before the runs (`normbench.analysis.stats` has the verdicts): "final" training accuracy is the
mean of the smoothed batch accuracy over the last `FINAL_FRACTION` of logged steps; a run that
diverged counts in its arm with the worst value of the measure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from normbench.analysis.claims import HIGHER_IS_BETTER, LOWER_IS_BETTER, Claim, Scale, claim_less, per_seed
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, select
from normbench.analysis.stats import median_over_steps, verdict_true

TRAIN_ACC = "train/batch_acc"
"""Training accuracy of each logged batch (per logged step; smoothed for the figure and claims)."""
BATCH_LOSS = "train/batch_loss"
VAL_ACC = "val/acc"
ACTIVATION_KEY = re.compile(r"^activations/(?P<layer>.+)/post_q50$")

MAIN_LR = 0.1
HIGH_LR = 0.5
LOW_LR = 0.01
LR_STYLES = {0.1: "-", 0.5: "--", 0.01: ":"}
LABELS = {"none": "Standard", "bn": "Standard + BatchNorm", "bn_noisy": 'Standard + "Noisy" BatchNorm'}
SMOOTHING = 9
"""Logged points in the running mean that smooths per-step training accuracy."""
FINAL_FRACTION = 0.1
""""Final" training accuracy: the mean over the last 10 % of the logged steps (smoothed)."""
ACTIVATION_LAYER = 2
"""Fig. 1c / Fig. 2: the activations after the 3rd norm position (0-based index 2) of the VGG."""

CPU_SCALE = Scale(
    False,
    "VGG11 on a 10,000-image CIFAR-10 subset, batch 64, 200 steps: about 1.3 % of the paper's 15,000 steps "
    "with VGG at batch 128 on 50,000 images",
)


def label(norm: str, lr: float | None = None) -> str:
    name = LABELS.get(norm, norm)
    return name if lr is None else f"{name}, lr={lr:g}"


def learning_rates(runs: Sequence[Run]) -> list[float]:
    return sorted({float(r.get("lr")) for r in runs})


def series_of(runs: Sequence[Run], key: str) -> list[tuple[np.ndarray, np.ndarray]]:
    return [r.series(key) for r in runs if len(r.series(key)[0])]


def smoothed(steps: np.ndarray, values: np.ndarray, width: int = SMOOTHING) -> tuple[np.ndarray, np.ndarray]:
    """Running mean over ``width`` logged points (shorter at the start), at the same steps."""
    if not len(values):
        return steps, values
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    start = np.maximum(np.arange(1, len(values) + 1) - width, 0)
    return steps, (cumulative[1:] - cumulative[start]) / (np.arange(1, len(values) + 1) - start)


def final_train_acc(run: Run) -> float:
    """Mean of the smoothed batch accuracy over the last `FINAL_FRACTION` of logged steps."""
    steps, values = smoothed(*run.series(TRAIN_ACC))
    if not len(values):
        return float("nan")
    tail = max(1, round(FINAL_FRACTION * len(values)))
    return float(np.mean(values[-tail:]))


def final_test_acc(run: Run) -> float:
    return run.final(VAL_ACC)


def activation_layer(runs: Sequence[Run]) -> str | None:
    """The norm position whose activation distribution Fig. 1c / 2 draw (`ACTIVATION_LAYER`)."""
    layers = sorted({m["layer"] for r in runs for k in r.metric_keys() if (m := ACTIVATION_KEY.match(k))}, key=_natural)
    return layers[min(ACTIVATION_LAYER, len(layers) - 1)] if layers else None


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def activation_panel(ax, rows: list[dict], runs: Sequence[Run], norms: Sequence[str], lr: float, layer: str) -> None:
    """Seed medians of the layer's output quantiles over training: 5–95 % and 25–75 % bands, median."""
    prefix = f"activations/{layer}/post_"
    for norm in norms:
        group = select(runs, norm__name=norm, lr=lr)
        if not group:
            continue
        color = NORM_COLORS.get(norm)
        curves = {}
        for q in ("q05", "q25", "q50", "q75", "q95"):
            x, med, _, _ = seed_curve(None, rows, f"activations/{q}", label(norm, lr), series_of(group, prefix + q))
            curves[q] = (x, med)
        if not len(curves["q50"][0]):
            continue
        x = curves["q50"][0]
        ax.fill_between(x, curves["q05"][1], curves["q95"][1], color=color, alpha=0.15, linewidth=0)
        ax.fill_between(x, curves["q25"][1], curves["q75"][1], color=color, alpha=0.3, linewidth=0)
        ax.plot(x, curves["q50"][1], color=color, label=label(norm), linewidth=1)
    finish_axes(ax, "steps", "activation", f"activations after norm position {layer} (5/25/50/75/95 %)")


def accuracy_figure(
    runs: Sequence[Run], norms: Sequence[str], lrs: Sequence[float], name: str, title: str
) -> FigureResult:
    """Training loss and accuracy per logged step, test accuracy, activations of one layer."""
    fig, axes = new_figure(1, 4, title)
    rows: list[dict] = []
    for norm in norms:
        for lr in lrs:
            group = select(runs, norm__name=norm, lr=lr)
            if not group:
                continue
            style, color = LR_STYLES.get(lr, "-."), NORM_COLORS.get(norm)
            train_acc = [smoothed(*xy) for xy in series_of(group, TRAIN_ACC)]
            curves = (
                (axes[0, 0], "train_loss", series_of(group, BATCH_LOSS)),
                (axes[0, 1], "train_acc", [(s, 100 * v) for s, v in train_acc]),
                (axes[0, 2], "test_acc", [(s, 100 * v) for s, v in series_of(group, VAL_ACC)]),
            )
            for ax, panel, ys in curves:
                if ys:
                    seed_curve(ax, rows, panel, label(norm, lr), ys, color=color, linestyle=style)
    finish_axes(axes[0, 0], "steps", "training loss (batch)", "training loss")
    axes[0, 0].set_yscale("log")  # a diverging run's loss would flatten every other curve
    finish_axes(axes[0, 1], "steps", "training accuracy (%)", f"training accuracy (running mean of {SMOOTHING} logs)")
    finish_axes(axes[0, 2], "steps", "test accuracy (%)", "test accuracy")
    layer = activation_layer(runs)
    if layer is not None:
        activation_panel(axes[0, 3], rows, runs, norms, lrs[0], layer)
    else:
        axes[0, 3].set_axis_off()
    return FigureResult(name, fig, rows)


def figure1(runs: Sequence[Run], scale: Scale) -> FigureResult:
    lrs = [lr for lr in learning_rates(runs) if lr in (MAIN_LR, HIGH_LR)] or learning_rates(runs)
    title = "Santurkar et al. 2018, Fig. 1: VGG, standard vs BatchNorm"
    res = accuracy_figure(runs, ["none", "bn"], lrs, "santurkar_fig1", title)
    for lr in lrs:
        none, bn = select(runs, norm__name="none", lr=lr), select(runs, norm__name="bn", lr=lr)
        if not none or not bn:
            continue
        for what, paper, value in (
            ("training accuracy (smoothed, last 10 % of steps)", "BN reaches high training accuracy in far fewer "
             "steps (Fig. 1)", final_train_acc),
            ("test accuracy at the end", "BN's test accuracy is higher throughout training (Fig. 1)", final_test_acc),
        ):  # fmt: skip
            res.claims.append(
                claim_less(
                    f"BN trains faster: higher {what} than the standard network (lr {lr:g})",
                    paper,
                    res.name,
                    ("standard", per_seed(none, value, HIGHER_IS_BETTER)),
                    ("BN", per_seed(bn, value, HIGHER_IS_BETTER)),
                    scale,
                )
            )
    return res


def distribution_shift(run: Run, layer: str) -> float:
    """How much the layer's output distribution moves over training: the standard deviation over
    measured steps of its median (q50), in units of its median 25–75 % width."""
    _, q50 = run.series(f"activations/{layer}/post_q50")
    _, q25 = run.series(f"activations/{layer}/post_q25")
    _, q75 = run.series(f"activations/{layer}/post_q75")
    if len(q50) < 2 or len(q25) != len(q50) or len(q75) != len(q50):
        return float("nan")
    return float(np.std(q50) / max(median_over_steps(q75 - q25), 1e-12))


def figure2(runs: Sequence[Run], scale: Scale) -> FigureResult:
    lr = MAIN_LR if MAIN_LR in learning_rates(runs) else learning_rates(runs)[0]
    title = f"Santurkar et al. 2018, Fig. 2: noisy BatchNorm (lr {lr:g})"
    res = accuracy_figure(runs, ["none", "bn", "bn_noisy"], [lr], "santurkar_fig2", title)
    none, bn, noisy = (select(runs, norm__name=n, lr=lr) for n in ("none", "bn", "bn_noisy"))
    if none and noisy:
        res.claims.append(
            claim_less(
                "Noisy BN still trains faster than the standard network (training accuracy, last 10 % of steps)",
                "BN with injected distributional noise trains nearly as well as BN (Fig. 2)",
                res.name,
                ("standard", per_seed(none, final_train_acc, HIGHER_IS_BETTER)),
                ("noisy BN", per_seed(noisy, final_train_acc, HIGHER_IS_BETTER)),
                scale,
            )
        )
    if none and bn and noisy:
        acc = {name: per_seed(g, final_train_acc, HIGHER_IS_BETTER).median for name, g in
               (("none", none), ("bn", bn), ("noisy", noisy))}  # fmt: skip
        gap_noise, gap_bn = abs(acc["bn"] - acc["noisy"]), acc["bn"] - acc["none"]
        res.claims.append(
            Claim(
                "The gap between BN and noisy BN is small next to the gap between BN and the standard network",
                '"almost non-existent" difference between BN with and without noise (Fig. 2)',
                f"|BN − noisy BN| = {100 * gap_noise:.3g} points vs BN − standard = {100 * gap_bn:.3g} points "
                "(seed medians of the training accuracy over the last 10 % of steps; holds when below half)",
                verdict_true(gap_bn > 0 and gap_noise < 0.5 * gap_bn, scale.adequate),
                res.name,
            )
        )
    layer = activation_layer(runs)
    if layer is not None and bn and noisy:
        res.claims.append(
            claim_less(
                f"Noisy BN's activations (after norm position {layer}) move more over training than BN's",
                "the noise makes the activation distribution unstable, yet the network trains (Fig. 2, right)",
                res.name,
                ("BN", per_seed(bn, lambda r: distribution_shift(r, layer), LOWER_IS_BETTER)),
                ("noisy BN", per_seed(noisy, lambda r: distribution_shift(r, layer), LOWER_IS_BETTER)),
                scale,
                "std over measured steps of the output median, in units of its 25–75 % width",
            )
        )
    return res
