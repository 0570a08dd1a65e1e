"""Wu & He 2018, "Group Normalization", Table 3 in spirit, from a `gn_groups` sweep: validation
error against GroupNorm's number of groups G at a fixed batch size, from G = 1 (LayerNorm over
C, H, W) to G = C (InstanceNorm).

``norm.groups`` is one number for every norm layer and must divide each layer's channels (16 / 32
/ 64 in ResNet20 and ResNet8), so the GN series runs over G = 1, 2, 4, 8, 16 and the G = C end is
the ``in`` arm, drawn as its own series at x = 64 (the widest layer's C; its tick reads "C (IN)").
Points are medians over seeds with min–max error bars, and every seed's error is drawn as a dot
(its own CSV row, ``n`` = 1), as are the training-loss curves per arm (is the run long enough?).
Error = 100 · (1 − final ``val/acc``); a diverged run counts with 100 %. The claims and the check
are in ``normbench/rules/gn_groups.yaml``; the measures (``error``, ``remaining_loss``) are
`normbench.analysis.judging.measures`'.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex

from normbench.analysis.figures.figure_redraws import read_rows, register_redraw
from normbench.analysis.figures.plot import (
    NORM_COLORS,
    FigureResult,
    add_point_rows,
    finish_axes,
    new_figure,
    seed_curve,
)
from normbench.analysis.figures.plot_rows import draw_rows
from normbench.analysis.judging.measures import TRAIN_LOSS, error
from normbench.analysis.loading.runs import Run, select
from normbench.analysis.wording.figure_names import titled

IN_X = 64
"""Where the ``in`` arm (G = C in every layer) is drawn: the widest layer's channel count."""
ERROR_PANEL, SEEDS_PANEL = "val_error", "val_error_per_seed"
GN_LABEL, IN_LABEL = "GN (G groups in every layer)", "IN (G = C in every layer)"


def arms(runs: Sequence[Run]) -> list[tuple[str, float, list[Run]]]:
    """(label, x, runs) per arm: GN per group count, ascending, then IN."""
    out = []
    gn = [r for r in runs if r.record.norm.name == "gn"]
    for g in sorted({int(r.record.norm.groups) for r in gn}):
        out.append((f"G={g}", float(g), select(gn, norm__groups=g)))
    inst = select(runs, norm__name="in")
    if inst:
        out.append(("IN", float(IN_X), inst))
    return out


def _rows(runs: Sequence[Run]) -> list[dict]:
    """Every plotted number: the error per arm (GN's points one series, IN's another), each seed's
    error (``val_error_per_seed``, x: the arm's G), each arm's training loss per epoch."""
    rows: list[dict] = []
    arm_list = arms(runs)
    gn, inst = [a for a in arm_list if a[0] != "IN"], [a for a in arm_list if a[0] == "IN"]
    for label, chosen in ((GN_LABEL, gn), (IN_LABEL, inst)):
        for _, x, arm_runs in chosen:
            add_point_rows(rows, ERROR_PANEL, label, x, [error(r) for r in arm_runs])
            for r in arm_runs:
                add_point_rows(rows, SEEDS_PANEL, f"seed {r.seed}", x, [error(r)])
    for label, _, arm_runs in arm_list:  # is the training long enough? per arm, per epoch
        curves = []
        for r in arm_runs:
            logged = [row for row in r.history if row.get(TRAIN_LOSS) is not None]
            if logged:
                x = np.asarray([row.get("epoch", row["step"]) for row in logged])
                curves.append((x, np.asarray([float(row[TRAIN_LOSS]) for row in logged])))
        if curves:
            seed_curve(None, rows, f"train_loss/{label}", label, curves)
    return rows


def _error_panel(ax: Axes, rows: Sequence[dict]) -> None:
    """GN's and IN's errors (median, min–max) against G, every seed a dot slightly spread."""
    for label, color, marker, old in ((GN_LABEL, NORM_COLORS["gn"], "o", "Group Norm"),
                                      (IN_LABEL, NORM_COLORS["in"], "s", "Instance Norm")):  # fmt: skip
        mine = sorted((r for r in rows if r["panel"] == ERROR_PANEL and str(r["series"]).startswith((label[:2], old))),
                      key=lambda r: r["x"])  # fmt: skip  (committed CSVs wrote "Group Norm (…)")
        if not mine:
            continue
        xs, med = np.asarray([r["x"] for r in mine]), np.asarray([r["median"] for r in mine])
        err = np.stack([med - [r["lo"] for r in mine], [r["hi"] for r in mine] - med])
        ax.errorbar(xs, med, yerr=err, color=color, marker=marker, markersize=4, capsize=3, label=label)
        for x in xs:
            seeds = [float(r["median"]) for r in rows if r["panel"] == SEEDS_PANEL and float(r["x"]) == x]
            for i, v in enumerate(seeds):
                ax.plot(x * 2 ** (0.04 * (i - (len(seeds) - 1) / 2)), v, ".", color=color, alpha=0.5)


def draw(rows: Sequence[dict], runs: Sequence) -> FigureResult:
    """The figure from its rows (`_rows`, or a committed CSV read back); ``runs`` give the title's scope."""
    title = titled("Wu & He 2018, Table 3: error vs number of groups G; training loss per epoch", runs)
    fig, axes = new_figure(1, 2, title, size=(9.0, 3.6))
    ax = axes[0, 0]
    _error_panel(ax, rows)
    ax.set_xscale("log", base=2)
    ticks = sorted({float(r["x"]) for r in rows if r["panel"] == ERROR_PANEL})
    ax.set_xticks(ticks, ["C (IN)" if x == IN_X else str(int(x)) for x in ticks])
    finish_axes(ax, "groups per norm layer G (1 = LN over C,H,W)", "validation error (%)",
                "median over seeds, min–max; dots: each seed")  # fmt: skip
    greens = plt.get_cmap("Greens")  # GN's green in both panels: a shade per G (darker: more groups); IN its own
    panels = [str(r["panel"]) for r in rows if str(r["panel"]).startswith("train_loss/")]
    labels = list(dict.fromkeys(p.split("/", 1)[1] for p in panels))
    gn = [g for g in labels if g != "IN"]
    for label in labels:
        shade = 0.35 + 0.6 * gn.index(label) / max(len(gn) - 1, 1) if label != "IN" else 0.0
        color = NORM_COLORS["in"] if label == "IN" else to_hex(greens(shade))
        curve = sorted((r for r in rows if r["panel"] == f"train_loss/{label}"), key=lambda r: float(r["x"]))
        draw_rows(axes[0, 1], curve, f"GN, {label}" if label != "IN" else "IN", color, fill=False)
    axes[0, 1].set_yscale("log")
    finish_axes(axes[0, 1], "epoch", "training loss (epoch mean)", "training loss: a plateau?")
    return FigureResult("gn_groups", fig, rows=list(rows))


def gn_groups(runs: Sequence[Run]) -> list[FigureResult]:
    return [draw(_rows(runs), runs)]


register_redraw("gn_groups", lambda folder, runs: [draw(read_rows(folder / "gn_groups.csv"), runs)])
