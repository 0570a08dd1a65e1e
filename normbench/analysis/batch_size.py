"""Wu & He 2018, "Group Normalization", Figure 1 in spirit, from a `gn_batch_size` sweep:
validation error against the per-device batch size (32 → 2, learning rate scaled linearly),
for BN, GN and Batch Renormalization. Their ImageNet ResNet-50 numbers: BN 23.6 % → 34.7 %
error from batch 32 to 2, GN flat at about 24.1 %.

Error = 100 · (1 − final ``val/acc``); points are medians over seeds with min–max error bars. Every
batch size trains for the same number of epochs with the learning rate scaled linearly (Goyal et
al.'s rule, as Wu & He). A run that diverged counts with 100 % error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normbench.analysis.claims import LOWER_IS_BETTER, Claim, Scale, claim_less, per_seed
from normbench.analysis.plot import NORM_COLORS, FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, select
from normbench.analysis.stats import NOT_MEASURED, verdict_true

VAL_ACC = "val/acc"
NORMS = ("bn", "gn", "brn")
LABELS = {"bn": "Batch Norm", "gn": "Group Norm", "brn": "Batch Renorm"}
CPU_SCALE = Scale(
    False,
    "ResNet8 on 500 CIFAR-10 images without augmentation for 80 epochs, against ResNet-50 on 1.28M "
    "augmented ImageNet images for 100 epochs",
)
TRAIN_LOSS = "train/loss"
PLATEAU_FRACTION = 0.05
"""Is the run long enough? Batch 32's training loss is on a plateau when its last epoch mean is
below 5 % of its first: cross-entropy is >= 0, so no longer run could lower it by more than that.
(A flat tail is not enough: the end of a cosine schedule can be flat at any length.)"""
BATCH_STYLES = {32: "-", 16: "-.", 8: "--", 4: (0, (3, 1, 1, 1)), 2: ":"}


def error(run: Run) -> float:
    """Final validation error in percent (a diverged run: 100 %)."""
    return 100.0 if run.status == "diverged" else 100.0 * (1.0 - run.final(VAL_ACC))


def gn_batch_size(runs: Sequence[Run], scale: Scale) -> list[FigureResult]:
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
    if sizes:
        big, small = sizes[0], sizes[-1]
        res.claims += _claims(runs, big, small, res.name, scale)
    return [res]


def remaining_loss(losses: Sequence[float]) -> float:
    """The last epoch-mean training loss over the first: the most that any longer run could still
    gain, as a fraction of the start (cross-entropy >= 0). Below `PLATEAU_FRACTION`: a plateau."""
    y = np.asarray(losses, dtype=np.float64)
    return float(y[-1] / y[0])


def _plateau_claim(runs: Sequence[Run], big: int, figure: str) -> Claim:
    claim = f"Long enough: batch {big}'s training loss is on a plateau (a check of the setup, not a paper claim)"
    left = {}
    for norm in NORMS:
        for r in select(runs, norm__name=norm, batch_size=big):
            _, y = r.series(TRAIN_LOSS)
            left[f"{norm} seed {r.seed}"] = remaining_loss(y) if r.status != "diverged" and len(y) else np.inf
    if not left:
        return Claim(claim, "", "no runs at this batch size", NOT_MEASURED, figure)
    return Claim(
        claim,
        "the paper trains to convergence (100 epochs)",
        "last / first epoch-mean training loss: "
        + ", ".join(f"{k} {v:.3g}" for k, v in left.items())
        + f" (holds when every run's is below {PLATEAU_FRACTION:g})",
        verdict_true(max(left.values()) < PLATEAU_FRACTION, scale_adequate=False),  # a check: never "contradicted"
        figure,
    )


def _claims(runs: Sequence[Run], big: int, small: int, figure: str, scale: Scale) -> list[Claim]:
    err = {
        (n, b): per_seed(select(runs, norm__name=n, batch_size=b), error, LOWER_IS_BETTER)
        for n in NORMS
        for b in (big, small)
    }
    claims = []
    if err[("bn", big)].n and err[("bn", small)].n:
        claims.append(
            claim_less(
                f"BN's error grows as the batch shrinks ({big} → {small})",
                "BN 23.6 % → 34.7 % from batch 32 to 2 (ImageNet)",
                figure,
                (f"BN@{big}", err[("bn", big)]),
                (f"BN@{small}", err[("bn", small)]),
                scale,
            )
        )
    if all(err[(n, b)].n for n in ("bn", "gn") for b in (big, small)):
        d_bn = err[("bn", small)].median - err[("bn", big)].median
        d_gn = err[("gn", small)].median - err[("gn", big)].median
        claims.append(
            Claim(
                f"GN's error is flat in the batch size: it moves less than BN's rises from {big} to {small}",
                "GN about 24.1 % at every batch size",
                f"change in median error: GN {d_gn:+.3g} points vs BN {d_bn:+.3g} points (holds when |GN| < BN)",
                verdict_true(abs(d_gn) < d_bn, scale.adequate),
                figure,
            )
        )
    for norm in ("gn", "brn"):
        if err[(norm, small)].n and err[("bn", small)].n:
            claims.append(
                claim_less(
                    f"At batch {small}, {LABELS[norm]} beats Batch Norm",
                    "GN 24.1 % vs BN 34.7 % at batch 2"
                    if norm == "gn"
                    else "Batch Renorm improves on BN with small batches (Ioffe 2017)",
                    figure,
                    (f"{norm}@{small}", err[(norm, small)]),
                    (f"bn@{small}", err[("bn", small)]),
                    scale,
                )
            )
    if not claims:
        claims.append(
            Claim("BN vs GN across batch sizes", "", "no BN/GN runs at two batch sizes", NOT_MEASURED, figure)
        )
    return [_plateau_claim(runs, big, figure), *claims]
