"""Does BatchNorm regularize? From a `bn_dropout` sweep (VGG, with and without BN, with and
without dropout): the train–test gap and the test accuracy per arm.

The gap is the final ``train_eval/acc`` (the training images scored in evaluation mode, so neither
dropout nor augmentation lowers it) minus the final ``val/acc``. Two panels: test accuracy against
the step (train_eval dashed), medians over seeds with the min–max shaded; and the final gap per
arm (bars: median with the seeds' min–max). The claims are in ``normbench/rules/bn_dropout.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence

from normbench.analysis.claims import measure
from normbench.analysis.plot import NORM_COLORS, FigureResult, bar_panel, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run

VAL_ACC, TRAIN_EVAL_ACC = "val/acc", "train_eval/acc"


@measure("train_test_gap")
def train_test_gap(run: Run) -> float:
    """Final training accuracy in eval mode minus final validation accuracy (a diverged run counts
    with the measure's worst value in the claims, as every measure)."""
    return run.final(TRAIN_EVAL_ACC) - run.final(VAL_ACC)


@measure("train_eval_error")
def train_eval_error(run: Run) -> float:
    """One minus the final training accuracy in eval mode: the share of its own training images the
    run still gets wrong (bn_dropout's setup check: a small gap from an arm that has not fitted its
    training images is underfitting, not regularization)."""
    return 1.0 - run.final(TRAIN_EVAL_ACC)


def arm_label(run: Run) -> str:
    norm = "BN" if run.get("norm.name") == "bn" else "standard"
    dropout = float(run.get("model.dropout") or 0.0)
    return f"{norm} + dropout {dropout:g}" if dropout > 0 else norm


def bn_dropout(runs: Sequence[Run]) -> list[FigureResult]:
    fig, axes = new_figure(1, 2, "Does BatchNorm regularize? VGG with / without BN x with / without dropout")
    res = FigureResult("bn_dropout", fig)
    order = sorted({arm_label(r) for r in runs}, key=lambda s: (s.startswith("BN"), "dropout" in s))
    groups = {label: sorted((r for r in runs if arm_label(r) == label), key=lambda r: r.seed) for label in order}
    colors = {label: NORM_COLORS["bn" if label.startswith("BN") else "none"] for label in order}
    for label, group in groups.items():
        style = "--" if "dropout" in label else "-"
        for key, suffix, alpha_fill in ((VAL_ACC, "test", True), (TRAIN_EVAL_ACC, "train (eval mode)", False)):
            series = [r.series(key) for r in group if len(r.series(key)[0])]
            if series:
                marker = "o" if key == VAL_ACC else "x"
                seed_curve(axes[0, 0], res.rows, key.replace("/", "_"), f"{label}: {suffix}", series,
                           colors[label], fill=alpha_fill, linestyle=style, marker=marker)  # fmt: skip
    finish_axes(axes[0, 0], "step", "accuracy", "test (o) and training images (x), eval mode", legend=False)
    entries = zip(*axes[0, 0].get_legend_handles_labels())
    arms = [(h, label.removesuffix(": test")) for h, label in entries if label.endswith(": test")]
    if arms:  # one entry per arm (colour and line style); the markers are in the title
        axes[0, 0].legend(*zip(*arms), fontsize=7, loc="center right")
    gaps = {label: [train_test_gap(r) for r in group] for label, group in groups.items()}
    bar_panel(axes[0, 1], res.rows, "train_test_gap", gaps, colors)
    finish_axes(axes[0, 1], "arm", "train − test accuracy", "the final gap, per arm", legend=False)
    return [res]
