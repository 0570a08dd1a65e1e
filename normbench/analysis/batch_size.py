"""Wu & He 2018, "Group Normalization", Figure 1 in spirit, from a `gn_batch_size` sweep:
validation error against the per-device batch size (32 → 2, learning rate scaled linearly),
for BN, GN and Batch Renormalization. Their ImageNet ResNet-50 numbers: BN 23.6 % → 34.7 %
error from batch 32 to 2, GN flat at about 24.1 %.

Error = 100 · (1 − final ``val/acc``); points are medians over seeds with min–max error bars. Every
batch size trains for the same number of epochs with the learning rate scaled linearly (Goyal et
al.'s rule, as Wu & He). A run that diverged counts with 100 % error. The claims, and the check
that the runs are long enough, are in ``normbench/rules/gn_batch_size.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normbench.analysis.claims import measure
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, select

VAL_ACC = "val/acc"
NORMS = ("bn", "gn", "brn")
LABELS = {"bn": "Batch Norm", "gn": "Group Norm", "brn": "Batch Renorm"}
TRAIN_LOSS = "train/loss"
BATCH_STYLES = {32: "-", 16: "-.", 8: "--", 4: (0, (3, 1, 1, 1)), 2: ":"}


@measure("error")
def error(run: Run) -> float:
    """Final validation error in percent (a diverged run: 100 %)."""
    return 100.0 if run.status == "diverged" else 100.0 * (1.0 - run.final(VAL_ACC))


def gn_batch_size(runs: Sequence[Run]) -> list[FigureResult]:
    fig, axes = new_figure(1, 2, "Wu & He 2018, Fig. 1: error vs batch size per device; training loss per epoch")
    ax = axes[0, 0]
    res = FigureResult("gn_batch_size", fig)
    sizes = sorted({int(r.get("batch_size")) for r in runs}, reverse=True)
    norms = [n for n in NORMS if select(runs, norm__name=n)] + sorted({r.get("norm.name") for r in runs} - set(NORMS))
    for norm in norms:
        series = []
        for seed in sorted({r.seed for r in select(runs, norm__name=norm)}):
            pts = [(b, error(r)) for b in sizes for r in select(runs, norm__name=norm, batch_size=b, seed=seed)]
            if pts:
                xs, ys = zip(*pts)
                series.append((np.asarray(xs, dtype=np.float64), np.asarray(ys)))
        if series:
            seed_curve(
                ax, res.rows, "val_error", LABELS.get(norm, norm), series, color=NORM_COLORS.get(norm), marker="o"
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.invert_xaxis()
    finish_axes(ax, "batch size (images per worker)", "validation error (%)")
    for norm in norms:  # is the training long enough? each batch size's training loss per epoch
        for b in sizes:
            curves = [r.series(TRAIN_LOSS) for r in select(runs, norm__name=norm, batch_size=b)]
            curves = [(np.asarray([row["epoch"] for row in r.history if TRAIN_LOSS in row]), y)
                      for r, (_, y) in zip(select(runs, norm__name=norm, batch_size=b), curves) if len(y)]  # fmt: skip
            if curves:
                seed_curve(axes[0, 1], res.rows, f"train_loss/bs{b}", f"{LABELS.get(norm, norm)}, batch {b}", curves,
                           color=NORM_COLORS.get(norm), linestyle=BATCH_STYLES.get(b, "-"), fill=False)  # fmt: skip
    axes[0, 1].set_yscale("log")
    finish_axes(axes[0, 1], "epoch", "training loss (epoch mean)", "training loss: a plateau?")
    return [res]


@measure("remaining_loss")
def remaining_loss(run: Run) -> float:
    """The last epoch-mean training loss over the first: the most that any longer run could still
    gain, as a fraction of the start (cross-entropy >= 0). The check "long enough" (a plateau)
    asks every run's to be below a bound the rules declare; a flat tail alone is not enough, as
    the end of a cosine schedule is flat at any length."""
    _, y = run.series(TRAIN_LOSS)
    return float(y[-1] / y[0]) if len(y) else float("nan")
