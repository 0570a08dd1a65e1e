"""The forest plot: what every judged verdict of a preset rests on, in one figure.

One row per judged claim (the rows of ``claims.csv`` that carry a verdict; not-judged claims and
setup checks are left out: the findings page lists them), read as the findings page reads it
(`normbench.analysis.wording.present`): the difference signed toward the claim, **+ (a ratio above 1) is
the claim's direction**, the arms named in the order subtracted ("standard − BN"), in the measure's
natural unit (percentage points, BLEU, nats, decades of lr), with its 95 % interval, against the
line of no difference (0, or 1 on a log axis). An equivalence claim's margin is a band (±margin; a
ratio's [1/m, m]). Colours by verdict (`VERDICT_COLORS`), the legend at the top.

Each panel holds one unit, titled in words (`normbench.analysis.wording.units`): every ratio shares one log
panel, whose axis spans the data (an interval that lies far outside the rest, beyond 30× either
way, is drawn to the edge with an arrow, its numbers written beside it). The figure stays below
2,500 px at 150 dpi however many claims it holds.

`forest_figure` is the pure rows → figure function; `write_forest` writes ``forest.png``,
``forest.pdf`` and ``forest.csv`` (the plotted numbers, one row per claim).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from normbench.analysis.figures.plot import figure_formats  # noqa: E402
from normbench.analysis.judging.stats import (  # noqa: E402
    DIFFERENT,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_JUDGED,
    OPPOSITE,
    SUPPORTED,
    VERDICTS,
)
from normbench.analysis.wording.claim_meta import annotate as annotate  # noqa: E402  (re-exported)
from normbench.analysis.wording.present import Signed, num, ratio_num, signed, to_float  # noqa: E402
from normbench.analysis.wording.units import RATIO_TITLE, Unit  # noqa: E402

VERDICT_COLORS = {
    SUPPORTED: "#1a9850",
    OPPOSITE: "#d73027",
    INCONCLUSIVE: "#e08214",
    EQUIVALENT: "#2166ac",
    DIFFERENT: "#762a83",
    NOT_JUDGED: "#9e9e9e",
}
"""One fixed colour per verdict of `normbench.analysis.judging.stats.VERDICTS` (the same on every plot)."""
assert set(VERDICT_COLORS) == set(VERDICTS)

RATIO_PANEL = RATIO_TITLE
BAND_COLOR = "#b8b8b8"
"""The equivalence margin's band: a grey no verdict uses (a colour means one thing)."""
CSV_COLUMNS = ("panel", "label", "arms", "verdict", "estimate", "lo", "hi", "band_lo", "band_hi")
MAX_HEIGHT_IN = 16.4
"""The figure's height at most (in; × 150 dpi < 2,500 px): rows get thinner beyond it."""
FAR = 30.0
"""A ratio's interval wholly beyond FAR× (or 1/FAR×) does not stretch the log axis: drawn to its edge."""


@dataclass(frozen=True)
class ForestRow:
    """One judged claim as drawn: its panel, label, arms, verdict, signed estimate with interval
    (natural units) and its equivalence band (None without one)."""

    panel: str
    label: str
    arms: str
    verdict: str
    estimate: float
    lo: float
    hi: float
    band: tuple[float, float] | None


def _unit(row: Mapping[str, Any]) -> Unit:
    unit = row.get("unit")
    return unit if isinstance(unit, Unit) else Unit(str(unit or "measure"))


def forest_row(row: Mapping[str, Any]) -> ForestRow | None:
    """What a ``claims.csv`` row draws; None for a setup check or a claim not judged."""
    verdict = str(row.get("verdict", ""))
    unit = _unit(row)
    s: Signed | None = signed(row, unit)
    if verdict not in VERDICTS or verdict == NOT_JUDGED or s is None:
        return None
    band = None
    margin = to_float(row.get("margin"))
    if row.get("relation") == "equivalent" and math.isfinite(margin):
        band = (1 / margin, margin) if s.ratio else (-margin * unit.scale, margin * unit.scale)
    panel = RATIO_PANEL if s.ratio else unit.panel
    return ForestRow(panel, str(row.get("short") or row.get("id")), s.arms, verdict, s.estimate, s.lo, s.hi, band)


def panels(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[ForestRow]]:
    """The drawn rows by panel: the difference panels in the order their first claim comes, the
    ratio panel last."""
    drawn = [r for r in (forest_row(row) for row in rows) if r is not None]
    names = sorted(dict.fromkeys(r.panel for r in drawn), key=lambda p: p == RATIO_PANEL)
    return {p: [r for r in drawn if r.panel == p] for p in names}


def _near(r: ForestRow) -> bool:
    """A ratio row that does not lie wholly beyond FAR× either way (it sets the log axis)."""
    return not (min(r.lo, r.estimate) > FAR or max(r.hi, r.estimate) < 1 / FAR)


def limits(rows: Sequence[ForestRow], log: bool) -> tuple[float, float]:
    """The x range of a panel: every finite estimate, interval end and band edge, and the reference
    (a log panel: of the rows within FAR× of 1, when any)."""
    ref = 1.0 if log else 0.0
    kept = ([r for r in rows if _near(r)] or list(rows)) if log else list(rows)
    values = [ref] + [v for r in kept for v in (r.estimate, r.lo, r.hi, *(r.band or ())) if math.isfinite(v)]
    if log:
        values = [math.log10(v) for v in values if v > 0]
    lo, hi = min(values), max(values)
    pad = 0.06 * (hi - lo) if hi > lo else 0.5
    lo, hi = lo - pad, hi + pad
    return (10**lo, 10**hi) if log else (lo, hi)


def numbers(row: ForestRow, log: bool) -> str:
    """The numbers at a row's right: ``+1.2 [0.33, 2.1]`` (a ratio ``0.44× [0.38, 0.5]``)."""
    if log:
        return f"{ratio_num(row.estimate)}× [{ratio_num(row.lo)}, {ratio_num(row.hi)}]"
    sign = "+" if row.estimate > 0 else ""
    return f"{sign}{num(row.estimate)} [{num(row.lo)}, {num(row.hi)}]"


def _clip(v: float, xlim: tuple[float, float], log: bool) -> tuple[float, bool]:
    """``v`` inside the axis, and whether it lay beyond it (±inf; a ratio of 0 on a log axis)."""
    if math.isnan(v) or (log and v <= 0) or v < xlim[0]:
        return xlim[0], True
    if v > xlim[1]:
        return xlim[1], True
    return v, False


def _draw_interval(ax: Axes, y: float, row: ForestRow, xlim: tuple[float, float], log: bool) -> None:
    """The interval as one line (gid ``interval``), the estimate as a dot; an end beyond the axis
    is drawn to the edge with an arrowhead (gid ``beyond``)."""
    color = VERDICT_COLORS[row.verdict]
    (lo, lo_out), (hi, hi_out), (est, est_out) = (_clip(v, xlim, log) for v in (row.lo, row.hi, row.estimate))
    ax.plot(
        [lo, hi], [y, y], color=color, linewidth=2.2, solid_capstyle="butt", marker="|", markersize=5, gid="interval"
    )  # fmt: skip  (an interval, its ends capped: not a curve)
    for x, out, marker in ((lo, lo_out, "<"), (hi, hi_out, ">")):
        if out:
            ax.plot([x], [y], marker=marker, linestyle="none", color=color, markersize=6, clip_on=False, gid="beyond")
    ax.plot([est], [y], marker="o", linestyle="none", color=color, markersize=5, markeredgecolor="white",
            markeredgewidth=0.6, clip_on=False, gid="estimate")  # fmt: skip


def _log_ticks(ax: Axes, xlim: tuple[float, float]) -> None:
    """Ticks at 1, 2, 5 × 10^k (powers of 10 only over > 3 decades), written as plain numbers."""
    decades = math.log10(xlim[1] / xlim[0])
    subs = (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    ax.xaxis.set_major_locator(MaxNLocator(6) if decades < 1 else LogLocator(subs=subs, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: ratio_num(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def draw_panel(ax: Axes, name: str, rows: Sequence[ForestRow], fontsize: float = 7) -> None:
    """One panel: a row per claim from the top (its label: the claim and its arms), the reference
    line, bands, intervals and the numbers at the right."""
    log = name == RATIO_PANEL
    ax.set_xscale("log" if log else "linear")
    xlim = limits(rows, log)
    if log:
        _log_ticks(ax, xlim)
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: num(v) if abs(v) > 1e-12 else "0"))
    ax.set_xlim(*xlim)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.axvline(1.0 if log else 0.0, color="black", linewidth=0.9, zorder=1, gid="reference")
    blend = blended_transform_factory(ax.transAxes, ax.transData)
    for y, row in enumerate(rows):
        if row.band is not None:
            ax.fill_between(row.band, y - 0.38, y + 0.38, color=BAND_COLOR, alpha=0.35,
                            linewidth=0, gid="band")  # fmt: skip
        _draw_interval(ax, y, row, xlim, log)
        ax.text(1.02, y, numbers(row, log), transform=blend, va="center", fontsize=fontsize)
    ax.set_yticks(range(len(rows)), [f"{r.label} ({r.arms})" for r in rows], fontsize=fontsize)
    ax.set_xlabel(name, fontsize=fontsize + 1)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.grid(axis="x", alpha=0.3)


def _legend_handles(by_panel: Mapping[str, Sequence[ForestRow]]) -> list[Any]:
    seen = {r.verdict for rs in by_panel.values() for r in rs}
    handles: list[Any] = [
        Line2D([], [], color=VERDICT_COLORS[v], marker="o", linewidth=2.2, label=v) for v in VERDICTS if v in seen
    ]
    if any(r.band for rs in by_panel.values() for r in rs):
        handles.append(plt.Rectangle((0, 0), 1, 1, color=BAND_COLOR, alpha=0.35,
                                     label="equivalence margin"))  # fmt: skip
    return handles


def forest_figure(rows: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """The forest plot of ``rows`` (dicts of ``claims.csv``, with ``short`` and ``unit``: see
    `annotate`): one panel per unit, the legend of the verdicts shown at the top."""
    by_panel = panels(rows)
    if not by_panel:
        raise ValueError("no judged claims to draw: every row is a setup check or a claim not judged")
    heights = [len(r) + 1.8 for r in by_panel.values()]
    longest = max(len(r.label) + len(r.arms) + 3 for rs in by_panel.values() for r in rs)
    row_in = min(0.24, (MAX_HEIGHT_IN - 1.4) / sum(heights))
    fontsize = 7 if row_in >= 0.2 else 6
    fig, axes = plt.subplots(len(by_panel), 1, squeeze=False, height_ratios=heights, layout="constrained",
                             figsize=(min(15.0, 6.5 + 0.055 * longest), 1.4 + row_in * sum(heights)))  # fmt: skip
    for ax, (name, drawn) in zip(axes[:, 0], by_panel.items()):
        draw_panel(ax, name, drawn, fontsize)
    handles = _legend_handles(by_panel)
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=7, frameon=False)
    head = (
        "+ is the claim's direction (a ratio: above 1; an equivalence or two-sided claim reads a − b); 95 % intervals"
    )
    axes[0, 0].set_title(f"{title}\n{head}" if title else head, fontsize=9)
    return fig


def forest_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The plotted numbers, one dict per judged claim (`CSV_COLUMNS`)."""
    out = []
    for drawn in panels(rows).values():
        for r in drawn:
            d = asdict(r)
            band = d.pop("band") or ("", "")
            out.append({**{k: d[k] for k in CSV_COLUMNS if k in d}, "band_lo": band[0], "band_hi": band[1]})
    return out


def write_forest(rows: Sequence[Mapping[str, Any]], out_dir: str | Path, title: str = "") -> list[Path]:
    """``forest.png``, ``forest.pdf`` (`normbench.analysis.figures.plot.figure_formats`) and ``forest.csv``
    in ``out_dir``; the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig = forest_figure(rows, title)
    written = []
    metadata = {"png": {"Software": None}, "pdf": {"CreationDate": None}}  # no timestamp: reproducible
    for ext in figure_formats():
        fig.savefig(out / f"forest.{ext}", dpi=150, metadata=metadata[ext])
        written.append(out / f"forest.{ext}")
    plt.close(fig)
    with open(out / "forest.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in forest_table(rows):
            writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return [*written, out / "forest.csv"]


def remove_forest(out_dir: str | Path) -> list[Path]:
    """Remove ``forest.*`` from ``out_dir`` (a folder with no judged claim draws none: no stale one
    stays); the paths removed."""
    gone = [p for p in (Path(out_dir) / f"forest.{ext}" for ext in ("png", "pdf", "csv")) if p.is_file()]
    for p in gone:
        p.unlink()
    return gone
