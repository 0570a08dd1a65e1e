"""What a figure function returns, the drawing helpers they share, and writing PNG/PDF/CSV.

Every plotted number goes into the figure's CSV, one row per point:
``panel, series, x, median, lo, hi, n`` — the median over seeds and their min and max
(``n`` seeds with a finite value at that x).
"""

from __future__ import annotations

import csv
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from normbench.analysis.figures.figure_checks import check_figure  # noqa: E402
from normbench.analysis.figures.figure_lint import covers  # noqa: E402
from normbench.analysis.figures.figure_png import save_png  # noqa: E402
from normbench.analysis.figures.plot_rows import category_labels, draw_rows, number  # noqa: E402
from normbench.analysis.judging.claims import Claim, write_claims  # noqa: E402
from normbench.analysis.judging.stats import band, stack  # noqa: E402
from normbench.base.errors import ConfigError  # noqa: E402

CSV_COLUMNS = ("panel", "series", "x", "median", "lo", "hi", "n")
FIGURE_FORMATS = ("png", "pdf")
"""What every figure is written as, by default. ``NORMBENCH_FIGURE_FORMATS=png`` leaves the PDFs
out (a quarter less time per figure: the PDF is a second rendering of the same figure); the
test suite sets it, and its tests of the written files set both."""


def figure_formats() -> tuple[str, ...]:
    """The formats figures are written in: `FIGURE_FORMATS`, or ``NORMBENCH_FIGURE_FORMATS``
    (comma-separated; ``png`` always among them: the findings page and W&B show the PNGs)."""
    value = os.environ.get("NORMBENCH_FIGURE_FORMATS")
    if value is None:
        return FIGURE_FORMATS
    chosen = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if "png" not in chosen or not set(chosen) <= set(FIGURE_FORMATS):
        raise ConfigError(
            f"NORMBENCH_FIGURE_FORMATS={value!r} is not allowed; use png or png,pdf (png is always written)"
        )
    return chosen



# Fixed colours per norm so that every figure reads the same way; no two norms share one (a
# leaderboard panel shows them all at once).
NORM_COLORS = {
    "none": "black",
    "bn": "tab:red",
    "bn_noisy": "tab:purple",
    "noise_only": "tab:pink",
    "brn": "tab:orange",
    "gn": "tab:green",
    "ln": "tab:blue",
    "ln_sample": "tab:brown",
    "in": "navy",  # not grey: grey is "not judged" in the forests
    "rms": "tab:cyan",
    "prms": "tab:olive",
    "pn": "goldenrod",
    "bn_l1": "royalblue",  # deeppink read as bn's red beside it (bn_lp_landscape)
    "bn_l2": "salmon",
    "bn_linf": "teal",  # darkred / maroon were indistinguishable beside bn's red
}


@dataclass
class FigureResult:
    name: str
    """File stem: ``<name>.png``, ``.pdf``, ``.csv``."""
    fig: Figure
    rows: list[dict[str, Any]] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """What `normbench.analysis.figures.figure_checks.check_figure` found unreadable, as written."""


def new_figure(
    n_rows: int,
    n_cols: int,
    title: str,
    size: tuple[float, float] | None = None,
    width_ratios: Sequence[float] | None = None,
) -> tuple[Figure, Any]:
    size = size or (4.2 * n_cols, 3.3 * n_rows)
    size = (size[0], size[1] + 0.25 * title.count("\n"))  # a title's second line (the runs' scope) takes room
    kw = {"gridspec_kw": {"width_ratios": list(width_ratios)}} if width_ratios else {}
    fig, axes = plt.subplots(n_rows, n_cols, figsize=size, squeeze=False, **kw)
    fig.suptitle(title, fontsize=10)
    return fig, axes


def seed_curve(
    ax: Axes | None,
    rows: list[dict[str, Any]],
    panel: str,
    label: str,
    series: Sequence[tuple[np.ndarray, np.ndarray]],
    color: str | None = None,
    fill: bool = True,
    linestyle: str = "-",
    marker: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Median over seeds of several (x, y) series, with the seeds' min–max shaded; rows appended
    to ``rows``. Returns x, median, lo, hi."""
    xs, matrix = stack(series)
    med, lo, hi, n = band(matrix)
    for i in range(len(xs)):
        rows.append(
            {"panel": panel, "series": label, "x": xs[i], "median": med[i], "lo": lo[i], "hi": hi[i], "n": int(n[i])}
        )
    if ax is not None:
        draw_rows(ax, rows[len(rows) - len(xs):], label, color, fill=fill, linestyle=linestyle, marker=marker)
    return xs, med, lo, hi


def add_point_rows(rows: list[dict[str, Any]], panel: str, label: str, x: float, values: Sequence[float]) -> None:
    """One CSV row for a single plotted point (a bar) from per-seed ``values``."""
    xs, matrix = stack([(np.asarray([x]), np.asarray([v])) for v in values])
    med, lo, hi, n = band(matrix)
    rows.append({"panel": panel, "series": label, "x": x, "median": med[0], "lo": lo[0], "hi": hi[0], "n": int(n[0])})


TITLE_WIDTH = 48
"""Characters per line of a panel title (a 4-inch panel at 9 pt); longer titles wrap."""


def finish_axes(ax: Axes, xlabel: str, ylabel: str, title: str = "", legend: bool = True) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(textwrap.fill(title, TITLE_WIDTH), fontsize=9)
    ax.grid(alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def write_outputs(
    results: Sequence[FigureResult], out_dir: str | Path, claims: Sequence[Claim] | None = None
) -> list[Path]:
    """``<name>.png``, ``<name>.pdf`` (`figure_formats`) and ``<name>.csv`` per figure, and ``claims.csv`` /
    ``claims.md`` with ``claims`` in their order (`normbench.analysis.judging.claims.judge`'s: the rules'
    order; default: every figure's claims, figure by figure). Returns the paths written.
    Each figure is checked as saved (`check_figure`): its problems go into its ``problems``, for
    the caller to report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for res in results:
        res.fig.tight_layout()
        place_legends(res.fig)
        res.problems = check_figure(res.fig)
        for ext in figure_formats():
            path = out / f"{res.name}.{ext}"
            save_png(res.fig, path) if ext == "png" else res.fig.savefig(path, dpi=150)  # the PNG: with its spec
            written.append(path)
        path = out / f"{res.name}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for row in res.rows:
                writer.writerow({k: _fmt_csv(row[k]) for k in CSV_COLUMNS})
        written.append(path)
        plt.close(res.fig)
    return written + write_claims([c for res in results for c in res.claims] if claims is None else claims, out)


def _fmt_csv(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return v


def bar_panel(
    ax: Axes,
    rows: list[dict[str, Any]],
    panel: str,
    values: dict[str, Sequence[float]],
    colors: dict[str, str] | None = None,
) -> None:
    """One bar per label at its median over seeds, with a min–max error bar; rows appended."""
    colors = colors or {}
    for i, (label, vals) in enumerate(values.items()):
        add_point_rows(rows, panel, label, float(i), vals)
        row = rows[-1]
        if row["n"] == 0:
            continue
        err = [[row["median"] - row["lo"]], [row["hi"] - row["median"]]]
        ax.bar(i, row["median"], color=colors.get(label, "tab:gray"), alpha=0.8)
        ax.errorbar(i, row["median"], yerr=err, color="black", capsize=4, linewidth=1)
        ax.annotate(
            number(row['median']),
            (i - 0.4, row["median"]),
            textcoords="offset points",
            xytext=(1, 2),
            ha="left",
            va="bottom",
            fontsize=7,
        )  # at the bar's left edge: clear of its error bar
    ax.set_xticks(range(len(values)), category_labels(values), fontsize=8)


def point_panel(
    ax: Axes,
    rows: list[dict[str, Any]],
    panel: str,
    values: dict[str, Sequence[float]],
    colors: dict[str, str] | None = None,
    markers: dict[str, str] | None = None,
) -> None:
    """One point per label at its median over seeds, the seeds' min–max as an error bar, each seed
    a small dot beside it; the axis is scaled to the points (no bar from 0 to hide differences)."""
    colors, markers = colors or {}, markers or {}
    for i, (label, vals) in enumerate(values.items()):
        add_point_rows(rows, panel, label, float(i), vals)
        row = rows[-1]
        if row["n"] == 0:
            continue
        color, err = colors.get(label, "tab:gray"), [[row["median"] - row["lo"]], [row["hi"] - row["median"]]]
        ax.errorbar(i, row["median"], yerr=err, fmt=markers.get(label, "o"), color=color, capsize=4, markersize=6)
        finite = [v for v in vals if np.isfinite(v)]
        ax.plot([i + 0.18] * len(finite), finite, ".", color=color, alpha=0.5, markersize=4)
        ax.annotate(number(row['median']), (i, row["median"]), textcoords="offset points", xytext=(-8, 0),
                    ha="right", va="center", fontsize=7)  # fmt: skip
    ax.set_xticks(range(len(values)), category_labels(values), fontsize=8)
    ax.set_xlim(-0.6, len(values) - 0.4)


LEGEND_SPOTS = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
                "upper center", "lower center", "center")  # fmt: skip
"""Where `place_legends` tries an axes' legend, in order, before it moves it outside the axes."""


def _legend_under(ax: Axes, legend: Any, renderer: Any) -> Any:
    """``legend`` drawn anew under ``ax`` (below its tick labels and x label), centred, in as many
    columns (3 at most) as keep it within the panel's width and the page; flush with the panel's
    outer side where it still reaches past the page."""
    handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
    legend.set_visible(False)
    # the gap under the axes' tick labels and x label, in the legend's font sizes: it holds when a
    # later layout rescales the axes (an anchor in axes fractions would not)
    pad = (ax.bbox.y0 - ax.get_tightbbox(renderer).y0) / (7 * ax.figure.dpi / 72) + 0.4
    below, title, page = 0.0, legend.get_title().get_text() or None, ax.figure.bbox
    for ncols in range(min(3, -(-len(labels) // 4)), 0, -1):
        new = ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, below), bbox_transform=ax.transAxes,
                        ncols=ncols, fontsize=7, title=title, title_fontsize=7, borderaxespad=pad)  # fmt: skip
        box = new.get_window_extent(renderer)
        if box.width <= 1.1 * ax.bbox.width and page.x0 <= box.x0 and box.x1 <= page.x1:
            return new
    if box.x1 > page.x1 or box.x0 < page.x0:
        right = box.x1 > page.x1
        new.set_loc("upper right" if right else "upper left")
        new.set_bbox_to_anchor((1.0 if right else 0.0, below), transform=ax.transAxes)
    return new


def place_legends(fig: Figure) -> None:
    """Each axes' legend that covers its drawing (`figure_lint.covers`: a point, line, bar or band)
    goes to the first of `LEGEND_SPOTS` where it covers none, else outside: under its axes in two
    columns (a row of panels; the figure made taller by the legend's height), or on the right for a
    panel alone (the figure made wider); the layout redone. Run on the final layout: positions are
    in pixels."""
    for _ in range(2):  # a legend moved outside shrinks the axes: look once more
        fig.canvas.draw()
        renderer, wider, taller = fig.canvas.get_renderer(), 0.0, 0.0
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None or not covers(ax, legend.get_window_extent(renderer)):
                continue
            for spot in LEGEND_SPOTS:
                legend.set_loc(spot)
                if not covers(ax, legend.get_window_extent(renderer)):
                    break
            else:
                if len(fig.axes) > 1:  # under the panel: the row keeps its width, no canvas left empty beside
                    legend = _legend_under(ax, legend, renderer)
                    taller = max(taller, legend.get_window_extent(renderer).height / fig.dpi + 0.1)
                else:
                    legend.set_loc("upper left")
                    legend.set_bbox_to_anchor((1.02, 1.0), transform=ax.transAxes)
                    wider += legend.get_window_extent(renderer).width / fig.dpi + 0.1
        if not wider and not taller:
            return
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + wider, height + taller)  # room for the legends: the panels keep their size
        fig.tight_layout()
