"""Santurkar, Tsipras, Ilyas, Madry 2018, "How Does Batch Normalization Help Optimization?":
Figures 1 and 2 from a `santurkar_vgg` sweep (VGG on CIFAR-10, ``norm`` × ``lr`` × seeds); Figures
3 and 4 are in `normbench.analysis.figures.santurkar_landscape`.

- Figure 1: training loss and training accuracy per logged step (smoothed), test accuracy per
  evaluation, and (c) the distribution of one layer's activations over training, standard
  (``none``) vs ``bn``, at lr 0.1 and 0.5.
- Figure 2: the same for ``none``, ``bn`` and ``bn_noisy`` (BN followed by distributional noise).

Every curve is the median over seeds with the seeds' min–max shaded; an activation distribution is
drawn as the seed medians of its 5–95 % and 25–75 % quantile bands and its median. The claims and
the parameters of their measures (the smoothing, what "final" means) are in
``normbench/rules/santurkar_vgg.yaml``; the measures are the functions registered here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from normbench.analysis.figures.plot import (
    NORM_COLORS,
    FigureResult,
    category_labels,
    finish_axes,
    new_figure,
    point_panel,
    seed_curve,
)
from normbench.analysis.judging.claims import measure
from normbench.analysis.judging.stats import median_over_steps
from normbench.analysis.loading.runs import Run, select
from normbench.analysis.wording.figure_names import titled

TRAIN_ACC = "train/batch_acc"
"""Training accuracy of each logged batch (per logged step; smoothed for the figure and claims)."""
BATCH_LOSS = "train/batch_loss"
VAL_ACC = "val/acc"
ACTIVATION_KEY = re.compile(r"^activations/(?P<layer>.+)/post_q50$")

MAIN_LR = 0.1
HIGH_LR = 0.5
LOW_LR = 0.01
LR_STYLES = {0.1: "-", 0.5: "--", 0.01: ":"}
LR_MARKERS = {0.1: "o", 0.5: "s", 0.01: "^"}
LABELS = {
    "none": "Standard",
    "bn": "Standard + BatchNorm",
    "bn_noisy": 'Standard + "Noisy" BatchNorm',
    "bn_l1": "Standard + ℓ1 BatchNorm",
    "bn_l2": "Standard + ℓ2 BatchNorm",
    "bn_linf": "Standard + ℓ∞ BatchNorm",
}
SMOOTHING = 9
"""Logged points in the running mean that smooths per-step training accuracy in the figures (the
claims' value is in the rules: ``smoothing``)."""
ACTIVATION_LAYER = 2
"""Fig. 1c / Fig. 2: the activations after the 3rd norm position (0-based index 2) of the VGG."""


def label(norm: str, lr: float | None = None) -> str:
    name = LABELS.get(norm, norm)
    return name if lr is None else f"{name}, lr={lr:g}"


def learning_rates(runs: Sequence[Run]) -> list[float]:
    return sorted({r.record.lr for r in runs})


def series_of(runs: Sequence[Run], key: str) -> list[tuple[np.ndarray, np.ndarray]]:
    return [r.series(key) for r in runs if len(r.series(key)[0])]


def smoothed(steps: np.ndarray, values: np.ndarray, width: int = SMOOTHING) -> tuple[np.ndarray, np.ndarray]:
    """Running mean over ``width`` logged points (shorter at the start), at the same steps."""
    if not len(values):
        return steps, values
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    start = np.maximum(np.arange(1, len(values) + 1) - width, 0)
    return steps, (cumulative[1:] - cumulative[start]) / (np.arange(1, len(values) + 1) - start)


@measure("final_train_acc")
def final_train_acc(run: Run, final_fraction: float, smoothing: int) -> float:
    """Mean of the batch accuracy, smoothed over ``smoothing`` logged points, over the last
    ``final_fraction`` of the logged steps."""
    steps, values = smoothed(*run.series(TRAIN_ACC), width=smoothing)
    if not len(values):
        return float("nan")
    tail = max(1, round(final_fraction * len(values)))
    return float(np.mean(values[-tail:]))


@measure("final_train_error")
def final_train_error(run: Run, final_fraction: float, smoothing: int) -> float:
    """One minus `final_train_acc`: the positive control "BN trains" as a bound from above."""
    return 1.0 - final_train_acc(run, final_fraction, smoothing)


@measure("final_test_acc")
def final_test_acc(run: Run) -> float:
    """The run's last validation accuracy."""
    return run.final(VAL_ACC)


def activation_layer(runs: Sequence[Run], index: int = ACTIVATION_LAYER) -> str | None:
    """The norm position whose activation distribution Fig. 1c / 2 draw: the ``index``-th
    measured one (in the model's order; the last when there are fewer)."""
    layers = sorted({m["layer"] for r in runs for k in r.metric_keys() if (m := ACTIVATION_KEY.match(k))}, key=_natural)
    return layers[min(index, len(layers) - 1)] if layers else None


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


HATCHES = ("", "////", "\\\\\\\\", "xx", "..", "++")
"""Per norm, in the figure's order: how its band is hatched, so that overlapping bands stay apart
(two translucent fills of red and grey blend to brown)."""


def hatched_band(ax, x, lo, hi, color: str | None, index: int, label: str | None = None, width: float = 0.5) -> None:
    """A band between ``lo`` and ``hi``: index 0 a light fill, the others hatched in their colour
    over a fainter fill, each outlined with edges ``width`` points wide (its lower edge labelled
    ``label`` for a legend)."""
    hatch = HATCHES[index % len(HATCHES)]
    ax.fill_between(x, lo, hi, facecolor=color, alpha=(0.18 if width <= 0.5 else 0.1) if not hatch else 0.06,
                    linewidth=0)  # fmt: skip
    if hatch:
        ax.fill_between(x, lo, hi, facecolor="none", edgecolor=color, hatch=hatch, linewidth=0, alpha=0.6)
    ax.plot(x, lo, color=color, linewidth=width, label=label)
    ax.plot(x, hi, color=color, linewidth=width)


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
        hatched_band(ax, x, curves["q25"][1], curves["q75"][1], color, norms.index(norm))
        for q in ("q05", "q95"):  # the outer quantiles as thin dotted lines: two filled bands per norm blended
            ax.plot(x, curves[q][1], color=color, linewidth=0.7, linestyle=":")
        ax.plot(x, curves["q50"][1], color=color, label=label(norm), linewidth=1)
    title = f"activations after {layer}, lr {lr:g} (band 25–75 %, dotted 5 % and 95 %; line: median)"
    finish_axes(ax, "steps", "activation", title, legend=False)


SHORT = {"none": "standard", "bn": "BN", "bn_noisy": "noisy BN", "bn_l1": "ℓ1 BN", "bn_l2": "ℓ2 BN", "bn_linf": "ℓ∞ BN"}
"""Short arm names for a category axis."""


def short_label(norm: str, lr: float, lrs: Sequence[float]) -> str:
    """``BN`` (one learning rate drawn) or ``BN (lr 0.5)``."""
    name = SHORT.get(norm, norm)
    return name if len(lrs) == 1 else f"{name} (lr {lr:g})"


def log_if_wide(ax, ratio: float = 3.0) -> None:
    """A log y axis when the drawn values span more than ``ratio`` (a diverging run's loss would
    flatten every other curve), labelled in plain numbers; linear otherwise."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = ax.dataLim.y0, ax.dataLim.y1
    if lo > 0 and np.isfinite(hi) and hi / lo > ratio:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def test_panel(
    ax,
    rows: list[dict],
    arms: dict[str, list[Run]],
    colors: dict[str, str],
    shorts: dict[str, str],
    markers: dict[str, str],
) -> None:
    """Test accuracy: curves over the evaluations when a run was evaluated more than once, else the
    one evaluation at the end per arm, on a category axis (median, seeds' min–max, each seed)."""
    once = all(len(r.series(VAL_ACC)[0]) <= 1 for g in arms.values() for r in g)
    if not once:
        for name, group in arms.items():
            ys = [(s, 100 * v) for s, v in series_of(group, VAL_ACC)]
            if ys:
                seed_curve(ax, rows, "test_acc", name, ys, color=colors[name], marker="o")
        finish_axes(ax, "steps", "test accuracy (%)", "test accuracy", legend=False)
        return
    values = {name: [100 * r.final(VAL_ACC) for r in g] for name, g in arms.items()}
    point_panel(ax, rows, "test_acc", values, colors, markers)
    ax.set_xticks(range(len(values)), category_labels(shorts[n] for n in values), fontsize=8)
    step = max((r.final_step for g in arms.values() for r in g), default=0)
    finish_axes(ax, "", "test accuracy (%)", f"test accuracy at the end (step {step})", legend=False)


def accuracy_figure(
    runs: Sequence[Run], norms: Sequence[str], lrs: Sequence[float], name: str, title: str
) -> FigureResult:
    """Training loss and accuracy per logged step, test accuracy (per evaluation, or at the end per
    arm), activations of one layer; the legend in a panel of its own (every panel has its series)."""
    layer = activation_layer(runs)
    n = 4 if layer is not None else 3  # no activations logged: no empty panel for them
    fig, axes = new_figure(1, n, titled(title, runs), size=(4.1 * n, 3.9))
    rows: list[dict] = []
    arms: dict[str, list[Run]] = {}
    colors: dict[str, str] = {}
    shorts: dict[str, str] = {}
    markers: dict[str, str] = {}
    for norm in norms:
        for lr in lrs:
            group = select(runs, norm__name=norm, lr=lr)
            if not group:
                continue
            style, color = LR_STYLES.get(lr, "-."), NORM_COLORS.get(norm)
            arms[label(norm, lr)], colors[label(norm, lr)] = group, color
            shorts[label(norm, lr)], markers[label(norm, lr)] = short_label(norm, lr, lrs), LR_MARKERS.get(lr, "D")
            train_acc = [smoothed(*xy) for xy in series_of(group, TRAIN_ACC)]
            curves = (
                (axes[0, 0], "train_loss", series_of(group, BATCH_LOSS)),
                (axes[0, 1], "train_acc", [(s, 100 * v) for s, v in train_acc]),
            )
            for ax, panel, ys in curves:
                if ys:
                    seed_curve(ax, rows, panel, label(norm, lr), ys, color=color, linestyle=style)
    finish_axes(axes[0, 0], "steps", "training loss (batch)", "training loss", legend=False)
    log_if_wide(axes[0, 0])
    acc_title = f"training accuracy (running mean of {SMOOTHING} logs)"
    finish_axes(axes[0, 1], "steps", "training accuracy (%)", acc_title, legend=False)
    test_panel(axes[0, 2], rows, arms, colors, shorts, markers)
    if layer is not None:
        activation_panel(axes[0, 3], rows, runs, norms, lrs[0], layer)
    axes[0, n - 1].legend(*axes[0, 0].get_legend_handles_labels(), fontsize=7)  # moved under it if it covers a line
    return FigureResult(name, fig, rows)


def figure1(runs: Sequence[Run]) -> FigureResult:
    lrs = [lr for lr in learning_rates(runs) if lr in (MAIN_LR, HIGH_LR)] or learning_rates(runs)
    title = "Santurkar et al. 2018, Fig. 1: VGG, standard vs BatchNorm"
    return accuracy_figure(runs, ["none", "bn"], lrs, "santurkar_fig1", title)


def distribution_shift(run: Run, layer: str) -> float:
    """How much the layer's output distribution moves over training: the standard deviation over
    measured steps of its median (q50), in units of its median 25–75 % width."""
    _, q50 = run.series(f"activations/{layer}/post_q50")
    _, q25 = run.series(f"activations/{layer}/post_q25")
    _, q75 = run.series(f"activations/{layer}/post_q75")
    if len(q50) < 2 or len(q25) != len(q50) or len(q75) != len(q50):
        return float("nan")
    return float(np.std(q50) / max(median_over_steps(q75 - q25), 1e-12))


@measure("activation_shift")
def activation_shift(run: Run, layer_index: int) -> float:
    """`distribution_shift` of the ``layer_index``-th measured norm position of the run."""
    layer = activation_layer([run], layer_index)
    return distribution_shift(run, layer) if layer is not None else float("nan")


def figure2(runs: Sequence[Run]) -> FigureResult:
    lr = MAIN_LR if MAIN_LR in learning_rates(runs) else learning_rates(runs)[0]
    title = f"Santurkar et al. 2018, Fig. 2: noisy BatchNorm (lr {lr:g})"
    return accuracy_figure(runs, ["none", "bn", "bn_noisy"], [lr], "santurkar_fig2", title)
