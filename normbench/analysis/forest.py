"""The forest plot: what every verdict of a preset rests on, in one figure.

One row per claim (the rows of ``claims.csv``): the difference a − b (or, for a ``welch_log``
claim, the ratio a / b) with its 95 % interval, against the line of no difference (0, or 1 on a
log axis), with the equivalence band of an equivalence claim (±margin; for a ratio [1/m, m], as
`normbench.analysis.stats.compare` tests it on the logarithms), coloured by verdict
(`VERDICT_COLORS`). Claims measured in different units never share an x axis: ratios get one
panel (log scale), differences one panel per unit (accuracy, error in %, BLEU, loss, ...). A claim
that was not judged is listed in its panel in grey, with the reason, instead of an interval; setup
checks (verdict passed / failed) are not claims and are left out.

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

from normbench.analysis.plot import figure_formats  # noqa: E402
from normbench.analysis.rules_schema import load_rules  # noqa: E402
from normbench.analysis.stats import (  # noqa: E402
    DIFFERENT,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_JUDGED,
    OPPOSITE,
    SUPPORTED,
    VERDICTS,
)
from normbench.rules import base_preset  # noqa: E402

VERDICT_COLORS = {
    SUPPORTED: "#1a9850",
    OPPOSITE: "#d73027",
    INCONCLUSIVE: "#e08214",
    EQUIVALENT: "#2166ac",
    DIFFERENT: "#762a83",
    NOT_JUDGED: "#9e9e9e",
}
"""One fixed colour per verdict of `normbench.analysis.stats.VERDICTS` (the same on every plot)."""
assert set(VERDICT_COLORS) == set(VERDICTS)

RATIO_PANEL = "ratio a / b (log scale; 1 = no difference)"
DIFFERENCE = "difference a − b"
CSV_COLUMNS = ("panel", "label", "verdict", "estimate", "lo", "hi", "band_lo", "band_hi", "note")

UNITS = {
    "final_train_acc": "accuracy (fraction)",
    "final_test_acc": "accuracy (fraction)",
    "train_test_gap": "accuracy (fraction)",
    "train_eval_error": "error (fraction)",
    "error": "error (%)",
    "bleu": "BLEU",
    "loss_at_equal_time": "training loss",
    "loss_at_equal_steps": "training loss",
    "saturated_fraction": "saturated fraction",
    "val/acc": "accuracy (fraction)",
    "val/acc_population": "accuracy (fraction)",
    "val/loss": "validation loss",
    "cos": "cosine of the gradients (ICS)",
}
"""The unit of a measure (its name, or the W&B key it reads): difference panels are per unit."""


def measure_unit(spec: Any) -> str:
    """The unit a rule's ``measure`` (a name, or ``{name: ..., key: ..., metric: ...}``) is in; a
    measure not in `UNITS` is its own unit (its key, metric or name)."""
    if isinstance(spec, Mapping):
        name = str(spec.get("key") or spec.get("metric") or spec.get("name"))
    else:
        name = str(spec)
    return UNITS.get(name, name)


def rules_meta(preset: str) -> tuple[str, dict[str, dict[str, str]]]:
    """The preset's ``paper_title`` (default: the preset's name) and, per claim id, its ``short``
    name (the rules' default: the id) and the unit of its measure, from the typed rules."""
    rules = load_rules(preset)
    if rules is None:
        return base_preset(preset), {}
    claims = {c.id: {"short": c.short or c.id, "unit": measure_unit({"name": c.measure, **c.params})}
              for c in rules.claims}  # fmt: skip
    return rules.paper_title or base_preset(preset), claims


def annotate(rows: Sequence[Mapping[str, Any]], preset: str, prefix: str = "") -> list[dict[str, Any]]:
    """``rows`` (of ``claims.csv``) with ``short`` (``prefix`` + the claim's short name) and ``unit``
    from the preset's rules."""
    _, meta = rules_meta(preset)
    out = []
    for row in rows:
        info = meta.get(str(row.get("id")), {})
        out.append({**row, "short": prefix + info.get("short", str(row.get("id"))), "unit": info.get("unit", "")})
    return out


# ---------------------------------------------------------------------------------------------
# rows → what is drawn


@dataclass(frozen=True)
class ForestRow:
    """One claim as drawn: its panel, label, verdict, estimate with interval (NaN when not judged),
    its equivalence band (None without one) and, when not judged, the reason."""

    panel: str
    label: str
    verdict: str
    estimate: float
    lo: float
    hi: float
    band: tuple[float, float] | None
    note: str

    @property
    def judged(self) -> bool:
        return self.verdict != NOT_JUDGED


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def is_ratio(row: Mapping[str, Any]) -> bool:
    """Whether a ``claims.csv`` row compares a ratio (column ``ratio``; a claim not judged: its test)."""
    ratio = row.get("ratio")
    if ratio in ("", None):  # not judged: the panel its rule's test would have put it in
        return row.get("test") == "welch_log"
    return ratio is True or str(ratio) == "True"


def forest_row(row: Mapping[str, Any]) -> ForestRow | None:
    """What a ``claims.csv`` row draws; None for a setup check (not a claim)."""
    verdict = str(row.get("verdict", ""))
    if verdict not in VERDICTS:
        return None
    ratio = is_ratio(row)
    panel = RATIO_PANEL if ratio else f"{DIFFERENCE}: {row.get('unit') or 'measure'}"
    label = str(row.get("short") or row.get("id"))
    estimate, lo, hi = (_float(row.get(k)) for k in ("estimate", "lo", "hi"))
    if verdict != NOT_JUDGED and math.isnan(estimate):
        verdict, note = NOT_JUDGED, "no estimate"
    else:
        note = " ".join(str(row.get("measured", "")).split()) if verdict == NOT_JUDGED else ""
    band = None
    margin = _float(row.get("margin"))
    if row.get("relation") == "equivalent" and math.isfinite(margin):
        band = (1 / margin, margin) if ratio else (-margin, margin)
    return ForestRow(panel, label, verdict, estimate, lo, hi, band, note)


def not_judged_text(note: str, width: int = 100) -> str:
    """A not-judged row's text: "not judged: <reason>", the reason's own leading "not judged"
    dropped (claims read "not judged at this scale (needs n ≈ 14, …)"), cut at ``width``."""
    reason = note.removeprefix("not judged").lstrip(" :")
    text = f"not judged: {reason}" if reason else "not judged"
    return text if len(text) <= width else text[: width - 1] + "…"


def panels(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[ForestRow]]:
    """The drawn rows by panel: the ratio panel first, then the difference panels in the order
    their first claim comes."""
    drawn = [r for r in (forest_row(row) for row in rows) if r is not None]
    names = sorted(dict.fromkeys(r.panel for r in drawn), key=lambda p: p != RATIO_PANEL)
    return {p: [r for r in drawn if r.panel == p] for p in names}


def _limits(rows: Sequence[ForestRow], log: bool) -> tuple[float, float]:
    """The x range of a panel: every finite estimate, interval end and band edge, and the reference."""
    ref = 1.0 if log else 0.0
    values = [ref] + [v for r in rows for v in (r.estimate, r.lo, r.hi, *(r.band or ())) if math.isfinite(v)]
    if log:
        values = [math.log10(v) for v in values if v > 0]
    lo, hi = min(values), max(values)
    pad = 0.08 * (hi - lo) if hi > lo else 0.5
    lo, hi = lo - pad, hi + pad
    return (10**lo, 10**hi) if log else (lo, hi)


def _fmt(v: float, ratio: bool, lead: bool = True) -> str:
    """A number to 3 significant digits; the estimate (``lead``) with its sign (``+0.12``) or, for a
    ratio, ``×1.5``; ±inf as ∞; a ratio of 0 (a log interval open to the left) as 0."""
    if math.isnan(v):
        return "n/a"
    if math.isinf(v) or (ratio and v <= 0):
        return ("∞" if v > 0 else "0") if ratio else (("+∞" if lead else "∞") if v > 0 else "−∞")
    if ratio:
        return f"×{v:.3g}" if lead else f"{v:.3g}"
    return "0" if v == 0 else (f"{v:+.3g}" if lead else f"{v:.3g}").replace("-", "−")


def interval_text(estimate: Any, lo: Any, hi: Any, ratio: bool) -> str:
    """``+0.12 [0.08, 0.16]`` (a ratio: ``×1.5 [1.2, 1.9]``), 3 significant digits."""
    bounds = ", ".join(_fmt(_float(v), ratio, lead=False) for v in (lo, hi))
    return f"{_fmt(_float(estimate), ratio)} [{bounds}]"


def numbers(row: ForestRow, ratio: bool) -> str:
    return interval_text(row.estimate, row.lo, row.hi, ratio)


# ---------------------------------------------------------------------------------------------
# drawing


def _clip(v: float, xlim: tuple[float, float], log: bool) -> tuple[float, bool]:
    """``v`` inside the axis, and whether it lay beyond it (±inf; a ratio of 0 on a log axis)."""
    if math.isnan(v) or (log and v <= 0) or v < xlim[0]:
        return xlim[0], True
    if v > xlim[1]:
        return xlim[1], True
    return v, False


def _draw_interval(ax: Axes, y: float, row: ForestRow, xlim: tuple[float, float], log: bool) -> None:
    """The interval as one line (gid ``interval``), the estimate as a dot; an end beyond the axis
    (infinite, or a ratio's 0) is drawn to the edge with an arrowhead."""
    color = VERDICT_COLORS[row.verdict]
    (lo, lo_out), (hi, hi_out), (est, est_out) = (_clip(v, xlim, log) for v in (row.lo, row.hi, row.estimate))
    ax.plot([lo, hi], [y, y], color=color, linewidth=2.2, solid_capstyle="butt", gid="interval")
    for x, out, marker in ((lo, lo_out, "<"), (hi, hi_out, ">")):
        if out:
            ax.plot([x], [y], marker=marker, color=color, markersize=6, clip_on=False, gid="beyond")
    ax.plot([est], [y], marker=">" if est_out and est == xlim[1] else "o", color=color, markersize=5,
            markeredgecolor="white", markeredgewidth=0.6, clip_on=False, gid="estimate")  # fmt: skip


def draw_panel(ax: Axes, name: str, rows: Sequence[ForestRow]) -> None:
    """One panel: a row per claim from the top, the reference line, bands, intervals, labels and the
    numbers at the right; not-judged claims as grey text."""
    log = name == RATIO_PANEL
    ax.set_xscale("log" if log else "linear")
    xlim = _limits(rows, log)
    if log:  # ticks at 1, 2, 5 × 10^k (powers of 10 over > 3 decades, evenly spaced within one), plain numbers
        decades = math.log10(xlim[1] / xlim[0])
        subs = (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
        ax.xaxis.set_major_locator(MaxNLocator(6) if decades < 1 else LogLocator(subs=subs, numticks=12))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(*xlim)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.axvline(1.0 if log else 0.0, color="black", linewidth=0.9, zorder=1, gid="reference")
    blend = blended_transform_factory(ax.transAxes, ax.transData)
    for y, row in enumerate(rows):
        if row.band is not None and row.judged:
            ax.fill_between(row.band, y - 0.38, y + 0.38, color=VERDICT_COLORS[EQUIVALENT], alpha=0.15,
                            linewidth=0, gid="band")  # fmt: skip
        if row.judged:
            _draw_interval(ax, y, row, xlim, log)
            ax.text(1.01, y, numbers(row, log), transform=blend, va="center", fontsize=7)
        else:
            ax.text(0.01, y, not_judged_text(row.note), transform=blend, va="center", fontsize=7,
                    color=VERDICT_COLORS[NOT_JUDGED], style="italic", gid="not-judged",
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})  # fmt: skip
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize=7)
    for tick, row in zip(ax.get_yticklabels(), rows):
        tick.set_color("black" if row.judged else VERDICT_COLORS[NOT_JUDGED])
    ax.set_xlabel(name, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.3)


def forest_figure(rows: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """The forest plot of ``rows`` (dicts of ``claims.csv``, with ``short`` and ``unit`` where known:
    see `annotate`): one panel per unit, a legend of the verdicts that occur."""
    by_panel = panels(rows)
    if not by_panel:
        raise ValueError("no claims to draw: every row is a setup check, or there are none")
    heights = [len(r) + 1.6 for r in by_panel.values()]
    longest = max(len(r.label) for rs in by_panel.values() for r in rs)
    fig, axes = plt.subplots(len(by_panel), 1, squeeze=False, height_ratios=heights, layout="constrained",
                             figsize=(min(14.0, 6.5 + 0.06 * longest), 0.9 + 0.24 * sum(heights)))  # fmt: skip
    for ax, (name, drawn) in zip(axes[:, 0], by_panel.items()):
        draw_panel(ax, name, drawn)
    seen = {r.verdict for rs in by_panel.values() for r in rs}
    handles: list[Any] = [
        Line2D([], [], color=VERDICT_COLORS[v], marker="o", linewidth=2.2, label=v) for v in VERDICTS if v in seen
    ]
    if any(r.band for rs in by_panel.values() for r in rs):
        band = plt.Rectangle((0, 0), 1, 1, color=VERDICT_COLORS[EQUIVALENT], alpha=0.15, label="equivalence margin")
        handles.append(band)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=7, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def forest_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The plotted numbers, one dict per claim (`CSV_COLUMNS`)."""
    out = []
    for drawn in panels(rows).values():
        for r in drawn:
            d = asdict(r)
            band = d.pop("band") or ("", "")
            out.append({**{k: d[k] for k in CSV_COLUMNS if k in d}, "band_lo": band[0], "band_hi": band[1]})
    return out


def write_forest(rows: Sequence[Mapping[str, Any]], out_dir: str | Path, title: str = "") -> list[Path]:
    """``forest.png``, ``forest.pdf`` (`normbench.analysis.plot.figure_formats`) and ``forest.csv``
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
