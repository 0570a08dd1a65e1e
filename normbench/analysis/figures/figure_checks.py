"""Is a figure readable? `check_figure` lists what would make it not, as drawn (after
``fig.canvas.draw()``, in display space):

- an axes with nothing drawn in it (no line with a visible point, no collection, patch or image)
  unless it was turned off (``ax.axis('off')``) or marked a text-only panel (`mark_text_panel`);
- a line with fewer than 2 finite points drawn with a line style (a curve that shows nothing);
- tick labels that overlap on one axis;
- a title, axis label, figure title or legend cut at the figure's edge, or two of the titles and
  axis labels over each other;
- a legend over the data it labels (a data point of its axes, or a point along one of its
  lines, inside the legend's box);
- what `normbench.analysis.figures.figure_lint` checks: text over bands, bars, markers or lines, hidden
  series and styles the text names but nothing draws, few-point lines without markers, empty
  panels and canvases, raw keys and e-notation, one colour meaning two things.

Each problem is one line naming the panel (its title, else its position) and what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from normbench.analysis.figures.figure_lint import lint_figure

TEXT_PANEL = "_normbench_text_panel"
"""The attribute `mark_text_panel` sets on an axes that holds text only (no data by design)."""
EDGE_PX = 1.0
"""How far (pixels) a text may reach past the figure's edge before it counts as cut (rounding)."""
OVERLAP_PX = 0.5
"""Tick label boxes are shrunk by this many pixels each side before the overlap test (touching is fine)."""


def mark_text_panel(ax: Axes) -> Axes:
    """Mark ``ax`` as a panel of text only: `check_figure` does not ask it for data."""
    setattr(ax, TEXT_PANEL, True)
    return ax


def panel_name(ax: Axes, index: int) -> str:
    """The panel's title in quotes, else ``panel <index>`` (0-based, in the figure's order)."""
    title = next((t.get_text() for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()), "")
    return f"panel {title!r}" if title else f"panel {index}"


def finite_points(line: Line2D) -> np.ndarray:
    """The line's (x, y) points where both are finite, as floats (categorical x: its positions)."""
    xy = np.asarray(line.get_xydata(), dtype=np.float64).reshape(-1, 2)
    return xy[np.isfinite(xy).all(axis=1)]


def _draws_line(line: Line2D) -> bool:
    return line.get_linestyle() not in ("None", "none", "", " ")


def _draws_marker(line: Line2D) -> bool:
    return line.get_marker() not in (None, "None", "none", "", " ")


def _collection_has_data(c: Collection) -> bool:
    if len(c.get_offsets()) and np.isfinite(np.asarray(c.get_offsets(), dtype=np.float64)).any():
        return True
    return any(len(p.vertices) for p in c.get_paths())


def has_data(ax: Axes) -> bool:
    """Something visible is drawn from data: a line with a visible point (2 finite points with a line
    style, or 1 with a marker), a collection with points or paths, a patch or an image."""
    for line in ax.lines:
        n = len(finite_points(line)) if line.get_visible() else 0
        if (n >= 2 and _draws_line(line)) or (n >= 1 and _draws_marker(line)):
            return True
    if any(c.get_visible() and _collection_has_data(c) for c in ax.collections):
        return True
    return any(p.get_visible() for p in ax.patches) or any(im.get_visible() for im in ax.images)


def errorbar_lines(ax: Axes) -> set[Line2D]:
    """The data lines of the axes' error bars (an error bar at one point is no curve)."""
    return {c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer) and c.lines[0] is not None}


def one_point_lines(ax: Axes) -> list[str]:
    """Labels (or ``line <i>``) of the lines drawn with a line style through fewer than 2 finite
    points (error bars' data lines left out)."""
    out, bars = [], errorbar_lines(ax)
    for i, line in enumerate(ax.lines):
        if line in bars:
            continue
        if line.get_visible() and _draws_line(line) and len(finite_points(line)) < 2:
            name = line.get_label()
            out.append(repr(name) if name and not name.startswith("_") else f"line {i}")
    return out


def _shrunk(box: Bbox, px: float) -> Bbox:
    return Bbox.from_extents(box.x0 + px, box.y0 + px, box.x1 - px, box.y1 - px)


def tick_labels(ax: Axes, which: str) -> list[Text]:
    """The drawn tick labels (major and minor) of ``ax``'s x or y axis: visible, non-empty, at ticks
    inside the view interval."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(axis.get_view_interval())
    span = (hi - lo) * 1e-9
    out = []
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        if not (lo - span <= tick.get_loc() <= hi + span):
            continue
        out += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text().strip()]
    return out


def overlapping_ticks(ax: Axes, which: str, renderer) -> list[tuple[str, str]]:
    """Pairs of ``which``-axis tick labels whose boxes overlap."""
    labels = tick_labels(ax, which)
    boxes = [_shrunk(t.get_window_extent(renderer), OVERLAP_PX) for t in labels]
    return [
        (labels[i].get_text(), labels[j].get_text())
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]


def outside(box: Bbox, frame: Bbox, px: float = EDGE_PX) -> bool:
    """Whether ``box`` reaches more than ``px`` pixels past ``frame``."""
    return box.x0 < frame.x0 - px or box.y0 < frame.y0 - px or box.x1 > frame.x1 + px or box.y1 > frame.y1 + px


def _texts(fig: Figure) -> Iterator[tuple[str, Text | Legend]]:
    """(what, artist) for every title, axis label and legend that must lie inside the figure."""
    for t in fig.texts:
        yield "figure text", t
    for i, ax in enumerate(fig.axes):
        if not ax.axison and not getattr(ax, TEXT_PANEL, False):
            continue
        name = panel_name(ax, i)
        for what, t in (("title", ax.title), ("x label", ax.xaxis.label), ("y label", ax.yaxis.label)):
            yield f"{name}: {what}", t
        if ax.get_legend() is not None:
            yield f"{name}: legend", ax.get_legend()
    for legend in fig.legends:
        yield "figure legend", legend


def cut_texts(fig: Figure, renderer) -> list[str]:
    """What reaches past the figure's edge: ``<where>: <what> '<text>'``."""
    out = []
    for what, artist in _texts(fig):
        if not artist.get_visible() or (isinstance(artist, Text) and not artist.get_text().strip()):
            continue
        if outside(artist.get_window_extent(renderer), fig.bbox):
            text = artist.get_text() if isinstance(artist, Text) else ""
            out.append(f"{what} {text!r}" if text else what)
    return out


SEGMENT_SAMPLES = 12
"""Points per segment at which a drawn line is sampled (a legend over a segment covers data too)."""


def _along(xy: np.ndarray, n: int = SEGMENT_SAMPLES) -> np.ndarray:
    """``n`` evenly spaced points on each segment between consecutive rows of ``xy`` (and the rows)."""
    if len(xy) < 2:
        return xy
    t = np.linspace(0.0, 1.0, n, endpoint=False)[None, :, None]
    inner = xy[:-1, None, :] + t * (xy[1:, None, :] - xy[:-1, None, :])
    return np.concatenate([inner.reshape(-1, 2), xy[-1:]])


def overlapping_texts(fig: Figure, renderer) -> list[str]:
    """Pairs of the figure's titles and axis labels (`_texts`, legends left out) whose boxes overlap:
    ``'<where>: <what>' / '<where>: <what>'``."""
    texts = [(what, t) for what, t in _texts(fig) if isinstance(t, Text) and t.get_visible() and t.get_text().strip()]
    boxes = [_shrunk(t.get_window_extent(renderer), OVERLAP_PX) for _, t in texts]
    return [
        f"{texts[i][0]} / {texts[j][0]}"
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]


def data_points(ax: Axes) -> np.ndarray:
    """Display coordinates of the axes' data: the finite vertices of its lines drawn in data
    coordinates (points along their segments too, for a line drawn with a line style) and the
    offsets of its point collections (scatter), those inside the axes."""
    pts = [np.zeros((0, 2))]
    for line in ax.lines:
        if line.get_visible() and line.get_transform().contains_branch(ax.transData):
            xy = finite_points(line)
            if len(xy):
                xy = line.get_transform().transform(xy)
                pts.append(_along(xy) if _draws_line(line) else xy)
    for c in ax.collections:
        offsets = np.asarray(c.get_offsets(), dtype=np.float64).reshape(-1, 2)
        if c.get_visible() and len(offsets) and c.get_offset_transform().contains_branch(ax.transData):
            offsets = offsets[np.isfinite(offsets).all(axis=1)]
            pts.append(c.get_offset_transform().transform(offsets))
    xy = np.concatenate(pts)
    box = ax.bbox
    inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
    return xy[inside]


def covered_points(ax: Axes, legend: Legend, renderer) -> int:
    """How many of the axes' data points (`data_points`) lie inside the legend's box."""
    box, xy = legend.get_window_extent(renderer), data_points(ax)
    return int(((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)).sum())


def axes_problems(ax: Axes, index: int, renderer) -> list[str]:
    """The problems of one axes (see the module's docstring)."""
    if not ax.axison and not getattr(ax, TEXT_PANEL, False):
        return []  # turned off on purpose
    name, out = panel_name(ax, index), []
    if not getattr(ax, TEXT_PANEL, False) and not has_data(ax):
        out.append(f"{name}: no data drawn (an empty panel; turn it off or mark it a text panel)")
    for line in one_point_lines(ax):
        out.append(f"{name}: line {line} has fewer than 2 points (a curve that shows nothing; draw markers)")
    for which in ("x", "y"):
        pairs = overlapping_ticks(ax, which, renderer)
        if pairs:
            shown = ", ".join(f"{a!r}/{b!r}" for a, b in pairs[:3])
            out.append(f"{name}: {len(pairs)} pair(s) of {which} tick labels overlap ({shown})")
    legend = ax.get_legend()
    if legend is not None and legend.get_visible():
        n = covered_points(ax, legend, renderer)
        if n:
            out.append(f"{name}: the legend covers {n} data point(s) of its panel (move it to a free spot or outside)")
    return out


def check_figure(fig: Figure) -> list[str]:
    """Every readability problem of ``fig`` as drawn now (one line each); empty when it reads."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = [p for i, ax in enumerate(fig.axes) for p in axes_problems(ax, i, renderer)]
    out += [f"{what} is cut at the figure's edge" for what in cut_texts(fig, renderer)]
    out += [f"{pair} overlap" for pair in overlapping_texts(fig, renderer)]
    legend_lines = {p.split(": the legend covers")[0] for p in out if ": the legend covers" in p}
    return out + [p for p in lint_figure(fig, renderer)
                  if not (": the legend covers" in p and p.split(": the legend covers")[0] in legend_lines)]
