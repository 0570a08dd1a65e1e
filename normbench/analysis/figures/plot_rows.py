"""Drawing from a figure's rows (``panel, series, x, median, lo, hi, n``: `normbench.analysis.figures.plot`'s
CSV), so that a figure drawn from runs and one redrawn from its committed CSV are drawn by the same
code: a series as a median line with the seeds' min–max shaded, or one point per category with its
min–max as an error bar; numbers written with 2-3 significant digits and no e-notation."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.transforms import Bbox

from normbench.analysis.figures.figure_lint import FEW_POINTS, covers

BAND_ALPHA = 0.15
"""The seeds' min–max band's opacity: light enough that two overlapping bands stay their colours
(an edge line in the arm's colour marks each band's extent)."""


def number(value: float, signed: bool = False) -> str:
    """``value`` with 3 significant digits (2 past 100), never in e-notation: 0.000043, 4.3, 1234."""
    if not math.isfinite(value):
        return str(value)
    digits = max(0, 2 - int(math.floor(math.log10(abs(value))))) if value else 0
    text = f"{value:,.{digits}f}".replace(",", " ") if abs(value) >= 1e4 else f"{value:.{digits}f}"
    return ("+" if signed and value > 0 else "") + text


def category_labels(names: Iterable[str], width: int = 12) -> list[str]:
    """Tick labels for categories: ``"rms (eager)"`` → ``"rms\n(eager)"``, each line wrapped at ``width``."""
    return ["\n".join(textwrap.fill(part, width) for part in name.replace(" (", "\n(").split("\n")) for name in names]


def rows_of(rows: Sequence[Mapping[str, Any]], panel: str, series: str) -> list[Mapping[str, Any]]:
    """The rows of one series of one panel, by x."""
    return sorted((r for r in rows if r["panel"] == panel and r["series"] == series), key=lambda r: float(r["x"]))


def draw_rows(ax: Axes, rows: Sequence[Mapping[str, Any]], label: str, color: str | None = None, fill: bool = True,
              linestyle: str = "-", marker: str | None = None) -> None:  # fmt: skip
    """One series from its rows: the median over seeds (a point with its min–max bar when it is one
    x; markers when it is fewer than `FEW_POINTS`), the seeds' min–max shaded when more than one seed."""
    if not rows:
        return
    xs, med, lo, hi = (np.asarray([float(r[k]) for r in rows]) for k in ("x", "median", "lo", "hi"))
    seeds = max(int(r["n"]) for r in rows)
    if len(xs) == 1:  # one point (a run evaluated once): a line would not show
        ax.plot(xs, med, color=color, label=label, linestyle="none", marker=marker or "o", markersize=5)
        if fill and seeds > 1:
            ax.vlines(xs, lo, hi, color=color, alpha=0.5)
        return
    marker = marker or ("o" if len(xs) < FEW_POINTS else None)  # a few points joined: show where they are
    ax.plot(xs, med, color=color, label=label, linestyle=linestyle, marker=marker, markersize=3)
    if fill and seeds > 1:
        ax.fill_between(xs, lo, hi, facecolor=color, alpha=BAND_ALPHA, edgecolor=color, linewidth=0.4,
                        linestyle=":")  # fmt: skip


LABEL_OFFSETS: tuple[tuple[float, float], ...] = (
    (5, 3),
    (5, -10),
    (-5, 3),
    (-5, -10),
    (5, 11),
    (-5, 11),
    (5, -18),
    (-5, -18),
    (12, -4),
    (-12, -4),
    (5, 19),
    (-5, 19),
    (5, -26),
    (-5, -26),
)
"""Where `label_points` tries a label, in points from its point (right, left, above, below)."""
MARKER_PX = 5.0
"""Half the side of the box around a labelled point that no label may cover (pixels)."""


def label_points(ax: Axes, points: Sequence[tuple[float, float, str, str]], fontsize: float = 7,
                 offsets: Sequence[tuple[float, float]] = LABEL_OFFSETS, pad: float = 0.0,
                 within_axes: bool = True) -> None:  # fmt: skip
    """Label each ``(x, y, text, color)`` beside its point, at the first of ``offsets`` (points from
    the point; left-aligned right of it, right-aligned left of it) where the label, grown by ``pad``
    pixels, lies inside the axes and overlaps no label placed before it, no point and nothing drawn
    (`figure_lint.covers`: error bars, lines, bands; the first offset if every one does). Points are
    placed from the top down; the axes' limits are fixed first (labels in points do not move them).
    ``pad``: a margin for a layout that rescales the axes after the labels are placed; ``within_axes``
    False: a label may reach past the axes' edge (the first category's median, left of its point)."""
    ax.autoscale_view()
    renderer = ax.figure.canvas.get_renderer()
    markers = [Bbox.from_extents(px - MARKER_PX, py - MARKER_PX, px + MARKER_PX, py + MARKER_PX)
               for px, py in ax.transData.transform([(x, y) for x, y, _, _ in points] or np.zeros((0, 2)))]  # fmt: skip
    placed: list[Any] = []
    for x, y, text, color in sorted(points, key=lambda p: (-p[1], p[0])):
        for i, (dx, dy) in enumerate((*offsets, offsets[0])):
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
                                color=color, ha="left" if dx >= 0 else "right")  # fmt: skip
            box = label.get_window_extent(renderer).padded(pad)
            inside = not within_axes or (ax.bbox.containsx(box.x0) and ax.bbox.containsx(box.x1)
                                         and ax.bbox.containsy(box.y0) and ax.bbox.containsy(box.y1))  # fmt: skip
            free = inside and not any(box.overlaps(other) for other in placed + markers) and not covers(ax, box)
            if i == len(offsets) or free:
                placed.append(box)
                break
            label.remove()


SIDE_OFFSETS = ((-9, -3), (9, -3), (-9, 6), (-9, -12), (9, 6), (9, -12), (-9, 15), (-9, -21), (9, 15), (9, -21))
"""Where `point_rows` tries a median's label (points from the point to the text's baseline: level
with it first, then above and below), left first."""
PAD_PX = 4.0
"""How far (pixels) a median's label keeps from anything drawn: the final layout rescales the axes."""


def point_rows(ax: Axes, rows: Mapping[str, Mapping[str, Any]], colors: Mapping[str, str] | None = None,
               markers: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """One point per category (``rows``: label → its row) at the median over seeds, the seeds'
    min–max as an error bar and the median written left of it; the axis is scaled to the points."""
    colors, markers = colors or {}, markers or {}
    labels = list(rows)
    drawn = [(i, float(rows[label]["median"])) for i, label in enumerate(labels) if int(rows[label]["n"])]
    for i, m in drawn:
        row = rows[labels[i]]
        lo, hi = float(row["lo"]), float(row["hi"])
        ax.errorbar(i, m, yerr=[[m - lo], [hi - m]], fmt=markers.get(labels[i], "o"),
                    color=colors.get(labels[i], "dimgray"), capsize=4, markersize=6)  # fmt: skip
    ax.set_xticks(range(len(labels)), category_labels(labels), fontsize=8)
    ax.set_xlim(-0.45, len(labels) - 0.55)  # the points spread over the panel; their medians written left
    # placed once every point is drawn and the limits are final: the free spots are real
    label_points(ax, [(i, m, number(m), "black") for i, m in drawn], offsets=SIDE_OFFSETS, pad=PAD_PX,
                 within_axes=False)  # fmt: skip
