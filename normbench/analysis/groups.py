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
`normbench.analysis.measures`'.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex

from normbench.analysis.figure_names import titled
from normbench.analysis.measures import TRAIN_LOSS, error
from normbench.analysis.plot import NORM_COLORS, FigureResult, add_point_rows, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run, select

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


def _error_panel(ax: Axes, res: FigureResult, arm_list: list[tuple[str, float, list[Run]]]) -> None:
    for label, color, marker, chosen in (
        (GN_LABEL, NORM_COLORS["gn"], "o", [a for a in arm_list if a[0] != "IN"]),
        (IN_LABEL, NORM_COLORS["in"], "s", [a for a in arm_list if a[0] == "IN"]),
    ):
        for _, x, arm_runs in chosen:
            add_point_rows(res.rows, ERROR_PANEL, label, x, [error(r) for r in arm_runs])
        rows = [row for row in res.rows if row["panel"] == ERROR_PANEL and row["series"] == label]
        if not rows:
            continue
        xs = np.asarray([row["x"] for row in rows])
        med = np.asarray([row["median"] for row in rows])
        err = np.stack([med - [row["lo"] for row in rows], [row["hi"] for row in rows] - med])
        ax.errorbar(xs, med, yerr=err, color=color, marker=marker, markersize=4, capsize=3, label=label)
        for _, x, arm_runs in chosen:  # every seed, slightly spread so that equal errors stay visible
            for i, r in enumerate(arm_runs):
                add_point_rows(res.rows, SEEDS_PANEL, f"seed {r.seed}", x, [error(r)])
                ax.plot(x * 2 ** (0.04 * (i - (len(arm_runs) - 1) / 2)), error(r), ".", color=color, alpha=0.5)


def gn_groups(runs: Sequence[Run]) -> list[FigureResult]:
    title = titled("Wu & He 2018, Table 3: error vs number of groups G; training loss per epoch", runs)
    fig, axes = new_figure(1, 2, title, size=(9.0, 3.6))
    res = FigureResult("gn_groups", fig)
    arm_list = arms(runs)
    ax = axes[0, 0]
    _error_panel(ax, res, arm_list)
    ax.set_xscale("log", base=2)
    ticks = [x for _, x, _ in arm_list]
    ax.set_xticks(ticks, ["C (IN)" if label == "IN" else str(int(x)) for label, x, _ in arm_list])
    finish_axes(ax, "groups per norm layer G (1 = LN over C,H,W)", "validation error (%)",
                "median over seeds, min–max; dots: each seed")  # fmt: skip
    greens = plt.get_cmap("Greens")  # GN's green in both panels: a shade per G (darker: more groups); IN its own
    n_gn = max(sum(1 for a in arm_list if a[0] != "IN"), 1)
    for i, (label, _, arm_runs) in enumerate(arm_list):  # is the training long enough? per arm, per epoch
        curves = []
        for r in arm_runs:
            rows = [row for row in r.history if row.get(TRAIN_LOSS) is not None]
            if rows:
                x = np.asarray([row.get("epoch", row["step"]) for row in rows])
                curves.append((x, np.asarray([float(row[TRAIN_LOSS]) for row in rows])))
        if curves:
            color = NORM_COLORS["in"] if label == "IN" else to_hex(greens(0.35 + 0.6 * i / max(n_gn - 1, 1)))
            seed_curve(axes[0, 1], res.rows, f"train_loss/{label}", f"GN, {label}" if label != "IN" else "IN", curves,
                       color=color, fill=False)  # fmt: skip
    axes[0, 1].set_yscale("log")
    finish_axes(axes[0, 1], "epoch", "training loss (epoch mean)", "training loss: a plateau?")
    return [res]
