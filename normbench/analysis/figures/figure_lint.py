"""What a figure says, checked against what it draws (issue 57): the checks of
`normbench.analysis.figures.figure_checks.check_figure` that look past layout, each one problem line:

- a legend or annotation over a filled band, a bar, a marker or a line (reference lines and error
  bars' whiskers too), in display coordinates (`covered_marks`);
- a series hidden under another (the same points, drawn twice), a legend entry that draws nothing,
  or a style the text names that nothing is drawn in ("dashed", "dotted", "hollow": `style_lies`);
- a line through 2-4 points with no markers (a few points joined look like a measured curve);
- a panel whose data fill less than 65 % of it, or a canvas more than 35 % empty (`empty_share`);
- a raw metric key (``test/bleu``, ``token_scale/…``), a snake_case name (``best_over_lr``,
  ``pn_v``) or e-notation (``4.27e-06``) in any text a reader sees (`raw_texts`);
- one colour meaning two things: two legend entries of the same colour that are not the same arm
  (labels equal up to a qualifier after ``:``, ``,``, `` + `` or a bracket), or an arm's colour also used for
  "not judged" (`shared_colors`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import Collection, LineCollection, PolyCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

FEW_POINTS = 5
"""A line through fewer finite points than this (and at least 2) must draw markers."""
MAX_EMPTY = 0.35
"""The largest share of a panel (outside its data's extent) or of the canvas that may stay empty."""
MARGIN = 0.1
"""The data's box is widened by this share of the axes each side (markers, labels and the axes'
own margins sit there) before the panel's empty share is measured."""
CANVAS_CELLS = 80
"""The canvas is sampled on a grid of this many cells a side for its empty share."""
KEY_PREFIXES = ("train", "val", "test", "perf", "diag", "landscape", "ics", "predictiveness", "beta_smoothness",
                "bn_stats", "token_scale", "grad", "acts", "lr_range", "machine")  # fmt: skip
METRIC_KEY = re.compile(r"(?<![\w/])([a-z][a-z0-9_]*)((?:/[a-z0-9_.]+)+)")
SNAKE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/])")
E_NOTATION = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?[eE][+\-−]?\d+\b")
MATHTEXT = re.compile(r"\$[^$]*\$")
STYLE_WORDS = {"dashed": "--", "dotted": ":", "dash-dot": "-.", "solid": "-"}
"""A word of a title or legend → the line style that must then be drawn."""
NOT_JUDGED = "not judged"


def _visible_text(t: Text) -> str:
    return t.get_text().strip() if t.get_visible() else ""


def _is_line(line: Line2D) -> bool:
    return line.get_linestyle() not in ("None", "none", "", " ")


def _has_marker(line: Line2D) -> bool:
    return line.get_marker() not in (None, "None", "none", "", " ")


def _points(line: Line2D) -> np.ndarray:
    xy = np.asarray(line.get_xydata(), dtype=np.float64).reshape(-1, 2)
    return xy[np.isfinite(xy).all(axis=1)]


def _name(ax: Axes, index: int) -> str:
    title = ax.get_title() or ax.get_title("left")
    return f"panel {title!r}" if title else f"panel {index}"


def _data_axes(fig: Figure) -> Iterator[tuple[int, Axes]]:
    for i, ax in enumerate(fig.axes):
        if ax.axison and not getattr(ax, "_normbench_text_panel", False):
            yield i, ax


def _along(xy: np.ndarray, n: int = 12) -> np.ndarray:
    if len(xy) < 2:
        return xy
    t = np.linspace(0.0, 1.0, n, endpoint=False)[None, :, None]
    return np.concatenate([(xy[:-1, None, :] + t * (xy[1:, None, :] - xy[:-1, None, :])).reshape(-1, 2), xy[-1:]])


def mark_points(ax: Axes) -> np.ndarray:
    """Display coordinates of everything drawn in ``ax`` that text must not cover: its lines'
    points (and points along their segments), reference lines, error bars' whiskers, scatter
    offsets, inside the axes."""
    pts = [np.zeros((0, 2))]
    for line in ax.lines:
        xy = _points(line) if line.get_visible() else np.zeros((0, 2))
        if len(xy):
            xy = line.get_transform().transform(xy)
            pts.append(_along(xy) if _is_line(line) else xy)
    for c in ax.collections:
        if not c.get_visible():
            continue
        if isinstance(c, LineCollection):
            for seg in c.get_segments():
                pts.append(_along(c.get_transform().transform(np.asarray(seg, dtype=np.float64))))
        elif not isinstance(c, PolyCollection) and len(c.get_offsets()):
            off = np.asarray(c.get_offsets(), dtype=np.float64).reshape(-1, 2)
            pts.append(c.get_offset_transform().transform(off[np.isfinite(off).all(axis=1)]))
    xy = np.concatenate(pts)
    b = ax.bbox
    return xy[(xy[:, 0] >= b.x0) & (xy[:, 0] <= b.x1) & (xy[:, 1] >= b.y0) & (xy[:, 1] <= b.y1)]


def _bands(ax: Axes) -> Iterator[Collection]:
    yield from (c for c in ax.collections if isinstance(c, PolyCollection) and c.get_visible())


def covers(ax: Axes, box: Bbox) -> list[str]:
    """What of ``ax``'s drawing lies inside ``box`` (display): ``band``, ``bar``, ``n mark(s)``."""
    box = Bbox.from_extents(box.x0 + 1, box.y0 + 1, box.x1 - 1, box.y1 - 1)
    out = []
    if any(p.intersects_bbox(box, filled=True) for c in _bands(ax) for p in
           (c.get_transform().transform_path(q) for q in c.get_paths())):  # fmt: skip
        out.append("a filled band")
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_visible()]
    if any(p.get_window_extent().overlaps(box) for p in bars):
        out.append("a bar")
    xy = mark_points(ax)
    n = int(((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)).sum())
    return out + ([f"{n} drawn point(s)"] if n else [])


def covered_marks(fig: Figure, renderer) -> list[str]:
    """Each legend and annotation (``ax.texts``) of a data panel that covers its drawing."""
    out = []
    for i, ax in _data_axes(fig):
        legend = ax.get_legend()
        items = [("the legend", legend)] if legend is not None and legend.get_visible() else []
        items += [(f"the text {t.get_text()!r}", t) for t in ax.texts if _visible_text(t)]
        for what, artist in items:
            hit = covers(ax, artist.get_window_extent(renderer))
            if hit:
                out.append(f"{_name(ax, i)}: {what} covers {' and '.join(hit)} (move it to a free spot or outside)")
    return out


def _legend_entries(fig: Figure) -> Iterator[tuple[str, object]]:
    """(label, handle) of every legend entry of the figure (axes' legends and figure legends)."""
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    for legend in legends:
        if legend is None or not legend.get_visible():
            continue
        for text, handle in zip(legend.get_texts(), legend.legend_handles):
            if text.get_text().strip() and handle is not None:
                yield text.get_text(), handle


def hidden_series(ax: Axes) -> list[list[str]]:
    """Groups of ``ax``'s visible labelled lines (legend series, 2 points or more) drawn through the
    same points: the one drawn last hides the others."""
    groups: dict[bytes, list[str]] = {}
    for line in ax.lines:
        label = line.get_label()
        if line.get_visible() and len(_points(line)) >= 2 and label and not label.startswith("_"):
            groups.setdefault(np.round(_points(line), 9).tobytes(), []).append(label)
    return [g for g in groups.values() if len(g) > 1]


def _all_texts(fig: Figure) -> Iterator[tuple[str, str]]:
    """(where, text) of every text a reader sees: the figure's texts, each axes' titles, axis labels,
    tick labels, offset texts, annotations and legend entries and titles."""
    for t in fig.texts:
        yield "figure text", t.get_text()
    for i, ax in enumerate(fig.axes):
        name = _name(ax, i)
        texts = [ax.title, ax._left_title, ax._right_title, *ax.texts]
        if ax.axison:
            texts += [ax.xaxis.label, ax.yaxis.label, ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()]
            texts += [*ax.get_xticklabels(which="both"), *ax.get_yticklabels(which="both")]
        legend = ax.get_legend()
        if legend is not None:
            texts += [*legend.get_texts(), legend.get_title()]
        for t in texts:
            if _visible_text(t):
                yield name, t.get_text()
    for legend in fig.legends:
        for t in [*legend.get_texts(), legend.get_title()]:
            if _visible_text(t):
                yield "figure legend", t.get_text()


def style_lies(fig: Figure) -> list[str]:
    """Line styles and hollow markers that the text names but nothing draws, legend entries whose
    label names another style than their handle's, and legend entries whose series draws nothing
    (data given, none of it finite; a key's proxy with no data is fine)."""
    lines = [ln for ax in fig.axes for ln in ax.lines if ln.get_visible() and len(_points(ln))]
    drawn = {ln.get_linestyle() for ln in lines if _is_line(ln) and len(_points(ln)) >= 2}
    hollow = any(_has_marker(ln) and str(ln.get_markerfacecolor()) in ("none", "white", "w") for ln in lines)
    out, words = [], " ".join(t.lower() for _, t in _all_texts(fig))
    for word, style in STYLE_WORDS.items():
        if re.search(rf"\b{word}\b", words) and style not in drawn:
            out.append(f"the text says {word!r} but no line is drawn {word}")
    if re.search(r"\b(hollow|open)( point| marker| circle|:)", words) and not hollow:
        out.append("the text names hollow/open points but none is drawn")
    for label, handle in _legend_entries(fig):
        if isinstance(handle, Line2D):
            named = [s for w, s in STYLE_WORDS.items() if re.search(rf"\b{w}\b", label.lower())]
            if named and _is_line(handle) and handle.get_linestyle() not in named:
                out.append(f"legend entry {label!r} names a style its line does not have")
    for i, ax in enumerate(fig.axes):
        legend = ax.get_legend()
        labels = {t.get_text() for t in legend.get_texts()} if legend is not None else set()
        for line in ax.lines:  # a key's proxy (a line with no data at all) draws nothing on purpose
            proxy = len(line.get_xydata()) == 0
            if line.get_label() in labels and not proxy and not (line.get_visible() and len(_points(line))):
                out.append(f"{_name(ax, i)}: legend entry {line.get_label()!r} draws nothing")
    return out


def few_point_lines(ax: Axes) -> list[str]:
    """Labels of ``ax``'s lines drawn in data coordinates with a line style through 2 to
    `FEW_POINTS` − 1 points and no marker."""
    out = []
    for i, line in enumerate(ax.lines):
        n = len(_points(line)) if line.get_visible() else 0
        in_data = line.get_transform().contains_branch(ax.transData)
        if in_data and _is_line(line) and not _has_marker(line) and 2 <= n < FEW_POINTS:
            label = line.get_label()
            out.append(repr(label) if label and not label.startswith("_") else f"line {i}")
    return out


def _data_box(ax: Axes) -> Bbox | None:
    """The display box of ``ax``'s drawing (points, bars, bands), inside the axes; None when it
    draws fewer than 2 points and no bar or band."""
    boxes = [p.get_window_extent() for p in ax.patches if isinstance(p, Rectangle) and p.get_visible()]
    boxes += [c.get_transform().transform_path(q).get_extents() for c in _bands(ax) for q in c.get_paths()
              if len(q.vertices)]  # fmt: skip
    xy = mark_points(ax)
    if len(xy) >= 2:
        boxes.append(Bbox.from_extents(*xy.min(axis=0), *xy.max(axis=0)))
    if not boxes:
        return None
    box = Bbox.intersection(Bbox.union(boxes), ax.bbox)
    return box


def empty_panel_share(ax: Axes) -> float:
    """The share of ``ax`` outside its drawing's box (`_data_box`, widened by `MARGIN` of the axes
    each side; a dimension the data do not span, a flat line, counts as filled)."""
    box, frame = _data_box(ax), ax.bbox
    if box is None or frame.width <= 0 or frame.height <= 0:
        return 0.0
    w = 1.0 if box.width < 1 else min(box.width / frame.width + 2 * MARGIN, 1.0)
    h = 1.0 if box.height < 1 else min(box.height / frame.height + 2 * MARGIN, 1.0)
    return 1.0 - w * h


def empty_canvas_share(fig: Figure, renderer) -> float:
    """The share of the canvas that no axes (with its labels and ticks), legend, legend column (an
    axes turned off that holds a legend) or figure text covers (sampled on a `CANVAS_CELLS` grid)."""
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.axison]
    boxes += [ax.get_legend().get_window_extent(renderer) for ax in fig.axes if ax.get_legend() is not None]
    boxes += [ax.bbox for ax in fig.axes if not ax.axison and ax.get_legend() is not None]  # a legend's own column
    boxes += [t.get_window_extent(renderer) for t in fig.texts if _visible_text(t)]
    boxes += [lg.get_window_extent(renderer) for lg in fig.legends]
    frame = fig.bbox
    grid = np.zeros((CANVAS_CELLS, CANVAS_CELLS), dtype=bool)
    for b in (b for b in boxes if b is not None):
        x0, x1 = ((np.array([b.x0, b.x1]) - frame.x0) / frame.width * CANVAS_CELLS).clip(0, CANVAS_CELLS)
        y0, y1 = ((np.array([b.y0, b.y1]) - frame.y0) / frame.height * CANVAS_CELLS).clip(0, CANVAS_CELLS)
        grid[int(y0):int(np.ceil(y1)), int(x0):int(np.ceil(x1))] = True
    return 1.0 - float(grid.mean())


def raw_texts(fig: Figure) -> list[str]:
    """Texts that show a raw metric key, a snake_case name or e-notation (mathtext left out)."""
    out = []
    for where, text in _all_texts(fig):
        plain = MATHTEXT.sub(" ", text)
        keys = [m.group(0) for m in METRIC_KEY.finditer(plain) if "_" in m.group(0) or m.group(1) in KEY_PREFIXES]
        found = keys + [m.group(0) for m in SNAKE.finditer(plain)] + [m.group(0) for m in E_NOTATION.finditer(plain)]
        if found:
            out.append(f"{where}: {text!r} shows {', '.join(dict.fromkeys(found))} (a raw key, a code name or "
                       "e-notation: write it as a reader says it)")  # fmt: skip
    return out


def _color(artist: object) -> str | None:
    """The artist's colour as ``#rrggbb`` (a line's colour, else its face or edge colour's first)."""
    for get in ("get_color", "get_facecolor", "get_edgecolor"):
        if not hasattr(artist, get):
            continue
        value = getattr(artist, get)()
        if isinstance(value, np.ndarray) and value.ndim == 2:
            value = value[0] if len(value) else None
        try:
            return to_hex(value) if value is not None else None
        except (ValueError, TypeError):
            continue
    return None


def _arm(label: str) -> str:
    """The arm a legend label names: the label up to its first ``:``, ``,``, bracket or `` + ``
    (``BN (mixed)``, ``BN, batch 2``, ``BN: test`` and ``BN + dropout 0.3`` are all BN, told apart
    by their style)."""
    return re.split(r"[:,(]| \+ ", label, maxsplit=1)[0].strip().lower()


def shared_colors(fig: Figure) -> list[str]:
    """Colours that mean two things: legend entries of one colour with labels of different arms
    (`_arm`), or an arm's colour on a "not judged" text."""
    meaning: dict[str, set[str]] = {}
    for label, handle in _legend_entries(fig):
        color = _color(handle)
        if color is not None and color != "#000000":
            meaning.setdefault(color, set()).add(_arm(label))
    for ax in fig.axes:
        for t in [*ax.texts, *ax.get_yticklabels(), *ax.get_xticklabels()]:
            if NOT_JUDGED in t.get_text().lower() and to_hex(t.get_color()) in meaning:
                meaning[to_hex(t.get_color())].add(NOT_JUDGED)
    return [f"colour {c} means {len(m)} things: {', '.join(sorted(m))} (give each its own colour)"
            for c, m in meaning.items() if len(m) > 1]  # fmt: skip


def lint_figure(fig: Figure, renderer) -> list[str]:
    """Every problem of this module's checks (see its docstring), the figure drawn."""
    out = covered_marks(fig, renderer)
    for i, ax in _data_axes(fig):
        name = _name(ax, i)
        out += [f"{name}: series {', '.join(map(repr, g))} are drawn through the same points (one hides the others)"
                for g in hidden_series(ax)]  # fmt: skip
        out += [f"{name}: line {lab} joins fewer than {FEW_POINTS} points without markers (draw markers)"
                for lab in few_point_lines(ax)]  # fmt: skip
        share = empty_panel_share(ax)
        if share > MAX_EMPTY:
            out.append(f"{name}: {share:.0%} of the panel is empty (fit the axes to the data)")
    share = empty_canvas_share(fig, renderer)
    if share > MAX_EMPTY:
        out.append(f"{share:.0%} of the canvas is empty (fewer or larger panels, or a smaller figure)")
    return out + style_lies(fig) + raw_texts(fig) + shared_colors(fig)
