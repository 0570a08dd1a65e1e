"""One renderer for the figures written as data (a preset's ``figures:`` block, typed by
`normbench.analysis.judging.figure_schema`), and the registry of the figures that stay code.

`draw_preset` draws a preset's figures in the order its rules list them: a `FigureSpec` through
`render` (its arms grouped from the runs, each panel by its kind: seed curves, bars of a measure,
a measure against a swept config key), a `CodeFigure` through the function registered under its
name (`register_code`). Every plotted number goes into the figure's rows (`normbench.analysis.figures.plot`:
median over seeds, min, max, n), so the CSV holds what the figure shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, MaxNLocator
from matplotlib.transforms import ScaledTranslation

from normbench.analysis.figures.plot import (
    NORM_COLORS,
    FigureResult,
    add_point_rows,
    finish_axes,
    new_figure,
    seed_curve,
)
from normbench.analysis.figures.plot_rows import draw_rows, number, point_rows, rows_of
from normbench.analysis.judging.figure_schema import SERIES, ArmsBy, ArmSpec, FigureSpec, LineSpec, PanelSpec
from normbench.analysis.judging.per_run import call_measure, registered_measure
from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.loading.runs import Run
from normbench.analysis.wording.figure_names import arm_name, titled
from normbench.analysis.wording.units import Unit, unit_of
from normbench.base.errors import ConfigError

FigureFn = Callable[[Sequence[Run]], list[FigureResult]]
CODE_FIGURES: dict[str, FigureFn] = {}
"""Name → a figure function with real logic (``code:`` in a rules' ``figures.draw``)."""


def register_code(name: str, fn: FigureFn) -> FigureFn:
    """Register ``fn`` as the code figure ``name`` that a rules file's ``figures.draw`` names."""
    if name in CODE_FIGURES and CODE_FIGURES[name] is not fn:
        raise ValueError(f"code figure {name!r} is registered twice")
    CODE_FIGURES[name] = fn
    return fn


@dataclass
class ArmRuns:
    """One arm as drawn: its label, colour, line style and runs (by seed)."""

    label: str
    color: str | None
    linestyle: str | None
    runs: list[Run]


def _matches(run: Run, select: dict[str, Any]) -> bool:
    """Whether ``run``'s config takes each selected value (a list: any of its values)."""
    for key, want in select.items():
        have = run.get(key)
        wants = want if isinstance(want, list) else [want]
        if not any(have == w or (isinstance(w, float) and isinstance(have, (int, float)) and abs(have - w)
                                 <= 1e-9 * max(abs(w), abs(have))) for w in wants):  # fmt: skip
            return False
    return True


def _by_seed(runs: Sequence[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: r.seed)


def _listed_arms(arms: tuple[ArmSpec, ...], runs: Sequence[Run]) -> list[ArmRuns]:
    taken = {id(r) for a in arms if not a.rest for r in runs if _matches(r, a.select)}
    out = []
    for a in arms:
        mine = [r for r in runs if id(r) not in taken] if a.rest else [r for r in runs if _matches(r, a.select)]
        out.append(ArmRuns(a.label, a.color, a.linestyle, _by_seed(mine)))
    return out


def _value_order(values: set[Any], order: str | tuple[Any, ...]) -> list[Any]:
    if isinstance(order, tuple):
        first = [v for v in order if v in values]
        return first + sorted(values - set(first))
    return sorted(values, reverse=order == "descending")


def _grouped_arms(arms: ArmsBy, runs: Sequence[Run]) -> list[ArmRuns]:
    def value(r: Run) -> Any:
        got = tuple(r.get(k) for k in arms.by)
        return got[0] if len(got) == 1 else got

    out = []
    for i, v in enumerate(_value_order({value(r) for r in runs}, arms.order)):
        values = v if isinstance(v, tuple) else (v,)
        label = arms.labels.get(v, arm_name(arms.label.format(*values)))  # norms as the papers name them
        color = NORM_COLORS.get(str(values[0]), "tab:gray") if arms.colors == "norm" else \
            arms.colors[i % len(arms.colors)]  # fmt: skip
        out.append(ArmRuns(label, color, None, _by_seed([r for r in runs if value(r) == v])))
    return out


def arm_runs(spec: FigureSpec, runs: Sequence[Run]) -> list[ArmRuns]:
    """The figure's arms that hold runs, in its order."""
    arms = _grouped_arms(spec.arms, runs) if isinstance(spec.arms, ArmsBy) else _listed_arms(spec.arms, runs)
    return [a for a in arms if a.runs]


def by_epoch(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of every row that logged ``key`` and its epoch, in logging order."""
    rows = [(float(r["epoch"]), float(r[key])) for r in run.history if r.get(key) is not None and "epoch" in r]
    if not rows:
        return np.zeros(0), np.zeros(0)
    epochs, values = zip(*rows)
    return np.asarray(epochs), np.asarray(values)


def line_series(run: Run, line: LineSpec, x: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one run for ``line``: its registered series, or its key against ``x``."""
    if line.series is not None:
        if line.series not in SERIES:
            raise ConfigError(f"unknown series {line.series!r}; valid choices: {', '.join(sorted(SERIES))}")
        return SERIES[line.series](run, **line.params)
    assert line.key is not None
    if x == "epoch":
        return by_epoch(run, line.key)
    steps, values = run.series(line.key)
    if x == "percent":
        return 100.0 * steps / max(run.final_step, 1), values
    return steps, values


def _splits(panel: PanelSpec, runs: Sequence[Run], arm: ArmRuns) -> list[tuple[Any, list[Run]]]:
    if panel.split is None:
        return [(None, arm.runs)]
    values = sorted({r.get(panel.split) for r in runs}, reverse=panel.split_order == "descending")
    return [(v, [r for r in arm.runs if r.get(panel.split) == v]) for v in values]


def _curve_rows(res: FigureResult, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run]) -> None:
    """Per arm (and split value), each line: the median over seeds and their min–max, as rows."""
    for arm in arms:
        for split, members in _splits(panel, runs, arm):
            for line in panel.lines:
                series = [s for s in (line_series(r, line, panel.x) for r in members) if len(s[0])]
                if series:
                    label = line.label.format(arm=panel.split_label.format(arm=arm.label, split=split))
                    seed_curve(None, res.rows, (line.panel or panel.panel).format(split=split), label, series)


def merged_label(a: str, b: str | None = None, *more: str) -> str:
    """The label of a line drawn for series with the same numbers: ``a`` alone; ``a (= <what differs
    in b>)``, e.g. ``batch 128, momentum 0.1: population (= momentum 0.01)``, or ``a = b`` when they
    differ in more than one place; ``a (= n more series)`` for more than two."""
    if b is None:
        return a
    if more:
        return f"{a} (= {1 + len(more)} more series)"
    wa, wb = a.split(" "), b.split(" ")
    diff = [i for i in range(min(len(wa), len(wb))) if wa[i] != wb[i]]
    if len(wa) != len(wb) or not diff or diff[-1] - diff[0] + 1 != len(diff):
        return f"{a} = {b}"
    return f"{a} (= {' '.join(wb[max(diff[0] - 1, 0):diff[-1] + 1]).rstrip(':,;')})"


def _curve(ax: Axes, res: FigureResult, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run]) -> None:
    """Per arm (and split value), each line drawn from its rows: the median, the min–max shaded."""
    drawn: dict[bytes, list[str]] = {}  # a series with the very numbers of one drawn before: not drawn over it
    for arm in arms:
        for split, _ in _splits(panel, runs, arm):
            for line in panel.lines:
                label = line.label.format(arm=panel.split_label.format(arm=arm.label, split=split))
                style = line.linestyle or panel.split_styles.get(split) or arm.linestyle or "-"
                rows = rows_of(res.rows, (line.panel or panel.panel).format(split=split), label)
                key = np.round([[r["x"], r["median"], r["lo"], r["hi"]] for r in rows], 9).tobytes()
                if rows and key in drawn:  # the same numbers (the population estimate at two momenta)
                    first = next(ln for ln in ax.lines if ln.get_label() == merged_label(*drawn[key]))
                    drawn[key].append(label)
                    first.set_label(merged_label(*drawn[key]))
                    continue
                drawn[key] = [label]
                draw_rows(ax, rows, label, arm.color, fill=line.fill and panel.fill, linestyle=style,
                          marker=line.marker or panel.marker)  # fmt: skip


def _measured(panel: PanelSpec, run: Run, runs: Sequence[Run]) -> float:
    assert panel.value is not None
    name, params = panel.value
    return call_measure(registered_measure(name, f"figure panel {panel.panel!r}"), run, params, runs)


def _bar_rows(res: FigureResult, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run]) -> None:
    for i, a in enumerate(arms):
        add_point_rows(res.rows, panel.panel, a.label, float(i), [_measured(panel, r, runs) for r in a.runs])


def _bar(ax: Axes, res: FigureResult, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run]) -> None:
    """One point per arm: its runs' measure, median over seeds with the min–max, on an axis scaled to
    the points (a bar from 0 hid the gap a verdict rests on), the first two arms' difference named."""
    rows = {a.label: rows_of(res.rows, panel.panel, a.label) for a in arms}
    if panel.hline is not None:  # first: the points' labels are placed clear of it
        ax.axhline(panel.hline, color="black", linewidth=0.8)
    point_rows(ax, {k: v[0] for k, v in rows.items() if v}, {a.label: a.color for a in arms if a.color})


def _sweep_rows(res: FigureResult, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run]) -> None:
    for arm in arms:
        series = []
        for seed in sorted({r.seed for r in arm.runs}):
            pts = sorted((float(r.get(panel.x)), _measured(panel, r, runs)) for r in arm.runs if r.seed == seed)
            series.append((np.asarray([p[0] for p in pts]), np.asarray([p[1] for p in pts])))
        seed_curve(None, res.rows, panel.panel, arm.label, series)


DODGE_PT = 5.0
"""How far apart (points) the arms' points sit at one category of a categorical sweep."""


def _diverged_label(arm: ArmRuns, panel: PanelSpec, rows: Sequence[Mapping[str, Any]]) -> str:
    """The arm's legend entry with its diverged runs counted where there are any (a diverged run is
    drawn at the measure's worst value: the legend says whose and how many):
    ``Standard (diverged: 2 of 8 at lr 1; 6 of 8 at lr 3)``."""
    counts = []
    for row in rows if panel.mark_diverged else ():
        at_x = [r for r in arm.runs if float(r.get(panel.x)) == row["x"]]
        if diverged := sum(1 for r in at_x if r.status == "diverged"):
            counts.append(f"{diverged} of {len(at_x)} at {panel.x.split('.')[-1]} {row['x']:g}")
    return f"{arm.label} (diverged: {'; '.join(counts)})" if counts else arm.label


def _sweep(ax: Axes, res: FigureResult, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run]) -> None:
    """Per arm, the measure against the config key ``panel.x``: the median over seeds, min–max shaded;
    a sweep over categories (``xticks``: a few values, a tick at each) draws each arm's min–max as an
    error bar beside the others' instead (bands between two batch sizes only overlapped)."""
    for i, arm in enumerate(arms):
        rows = rows_of(res.rows, panel.panel, arm.label)
        label = _diverged_label(arm, panel, rows)
        if panel.xticks and rows:
            drawn = ax.errorbar([r["x"] for r in rows], [r["median"] for r in rows], fmt=(panel.marker or "o") + "-",
                                yerr=[[r["median"] - r["lo"] for r in rows], [r["hi"] - r["median"] for r in rows]],
                                color=arm.color, label=label, markersize=5, capsize=3, linewidth=1.0)  # fmt: skip
            shift = ScaledTranslation((i - (len(arms) - 1) / 2) * DODGE_PT / 72.0, 0.0, ax.figure.dpi_scale_trans)
            for artist in drawn.get_children():  # moved once drawn: the axes' limits already hold the points
                artist.set_transform(ax.transData + shift)
            ax.margins(x=0.12)  # the shifted outer points stay inside
        else:
            draw_rows(ax, rows, label, arm.color, marker=panel.marker or "o")


ROWS = {"curve": _curve_rows, "bar": _bar_rows, "sweep": _sweep_rows}
DRAW = {"curve": _curve, "bar": _bar, "sweep": _sweep}


def _difference_title(panel: PanelSpec, res: FigureResult, arms: list[ArmRuns]) -> str:
    """A bar panel of two arms: its title with their medians' difference (what a verdict on them
    rests on), the higher arm first, in the measure's natural unit (`normbench.analysis.wording.units`:
    an accuracy's difference in percentage points) with a true minus sign:
    ``medians, standard − BN: +1.05 pts``. A claim's page signs each difference toward its claim
    (a claim that BN's gap is lower reads standard − BN), so the two never read with opposite signs."""
    drawn = [(a.label, r[0]["median"]) for a in arms if (r := rows_of(res.rows, panel.panel, a.label)) and r[0]["n"]]
    if panel.kind != "bar" or len(drawn) != 2:  # two arms: their difference; more: no one pair to name
        return panel.title
    (a, va), (b, vb) = sorted(drawn, key=lambda d: -d[1])
    name, params = panel.value if isinstance(panel.value, tuple) else (panel.value, {})
    try:
        unit = unit_of({"name": name, **params})
    except KeyError:  # a measure with no natural unit recorded: its own
        unit = Unit("", 1.0)
    named = f"medians, {a} − {b}: {number((va - vb) * unit.scale, signed=True)}{unit.diff}"
    return f"{panel.title}; {named}" if panel.title else named


def _integer_x(ax: Axes, panel: PanelSpec) -> None:
    """Ticks at whole numbers only when every x drawn is one (a layer index, an epoch): no tick at
    layer 0.5."""
    xs = np.concatenate([np.asarray(line.get_xdata(), dtype=float) for line in ax.get_lines()] or [np.zeros(0)])
    whole = len(xs) and np.all(xs == np.round(xs)) and np.ptp(xs) <= 20  # a few whole numbers: indices
    if panel.kind != "bar" and panel.xscale == "linear" and not panel.xticks and whole:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))


LOG_LABELS = ((0.5, (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)), (1.2, (1, 2, 3, 5)), (2.0, (1, 2, 5)))
"""A log axis's labelled ticks by its span in decades: up to half a decade (matplotlib's ticks every
0.1 × 10ᵏ there) 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 and 8 × 10ᵏ, up to 1.2 decades 1, 2, 3 and 5 × 10ᵏ,
up to two 1, 2 and 5 × 10ᵏ; wider: matplotlib's powers of ten."""


def _plain_tick(value: float, mantissas: Sequence[float]) -> str:
    """``value`` as a tick label with 2-3 significant digits, never e-notation (0.0002, 0.3, 2), or
    ``""`` where its mantissa is not labelled."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** np.floor(np.log10(value) + 1e-9)
    if not any(abs(mantissa - m) < 1e-6 * m for m in mantissas):
        return ""
    text = number(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


def _plain_log_y(ax: Axes, panel: PanelSpec) -> None:
    """A log y axis within two decades labelled in plain numbers (0.2, 0.5, 1, 2), not 2 × 10⁻¹."""
    low, high = ax.get_ylim()
    if panel.yscale != "log" or low <= 0:
        return
    decades = float(np.log10(high / low))
    mantissas = next((m for span, m in LOG_LABELS if decades <= span), None)
    if mantissas is not None:
        plain = FuncFormatter(lambda v, _: _plain_tick(v, mantissas))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)


def _finish(ax: Axes, panel: PanelSpec, arms: list[ArmRuns], runs: Sequence[Run], res: FigureResult) -> None:
    for axis, scale in (("x", panel.xscale), ("y", panel.yscale)):
        if scale != "linear":
            getattr(ax, f"set_{axis}scale")("log", **({"base": 2} if scale == "log2" else {}))
    if panel.xticks:  # a sweep's values: a tick at each, labelled as the config writes it
        values = sorted({r.get(panel.x) for r in runs})
        ax.set_xticks([float(v) for v in values], [f"{float(v):g}" for v in values])
    if panel.invert_x:
        ax.invert_xaxis()
    _integer_x(ax, panel)
    _plain_log_y(ax, panel)
    finish_axes(ax, panel.xlabel, panel.ylabel, _difference_title(panel, res, arms),
                legend=panel.legend == "auto" and panel.kind != "bar")  # fmt: skip
    if panel.legend == "arms":  # one entry per arm: its first line (the colour and style say the arm)
        first = {panel.lines[0].label.format(arm=a.label): a.label for a in arms}
        entries = [(h, first[lab]) for h, lab in zip(*ax.get_legend_handles_labels()) if lab in first]
        if entries:
            ax.legend(*zip(*entries), fontsize=7, loc="center right")


def spec_title(spec: FigureSpec, arms: list[ArmRuns], runs: Sequence[Any]) -> str:
    """The spec's title, ``{arms}`` replaced by the arms that ran (``standard vs BN``), with the runs'
    scope (model, width, data set, steps) beneath."""
    return titled(spec.title.replace("{arms}", " vs ".join(a.label for a in arms)), runs)


def draw_spec(spec: FigureSpec, arms: list[ArmRuns], rows: list[dict[str, Any]], runs: Sequence[Any]) -> FigureResult:
    """``spec`` drawn from its ``rows`` (`render`'s, or a committed CSV's read back): one row of
    panels, in the spec's order; ``arms`` and ``runs`` (or a per_run.csv's rows) give the arms'
    labels, colours and styles and the title's scope."""
    fig, axes = new_figure(1, len(spec.panels), spec_title(spec, arms, runs))
    rows = [{**r, "series": arm_name(str(r["series"]))} for r in rows]  # committed CSVs wrote "bn"
    res = FigureResult(spec.name, fig, rows=rows)
    for ax, panel in zip(axes[0], spec.panels):
        DRAW[panel.kind](ax, shown(res, panel), panel, arms, runs)
        _finish(ax, panel, arms, runs, res)
    return res


def shown(res: FigureResult, panel: PanelSpec) -> FigureResult:
    """``res`` as ``panel`` draws it: its rows' values × ``panel.scale`` (an accuracy in %); the rows
    themselves (the CSV, the titles' differences in their natural unit) keep the stored values."""
    if panel.scale == 1.0:
        return res
    drawn = {panel.panel, *(line.panel for line in panel.lines if line.panel)}  # a curve's lines may have their own
    scaled = [
        {**r, **{k: float(r[k]) * panel.scale for k in ("median", "lo", "hi")}} if r["panel"] in drawn else r
        for r in res.rows
    ]
    return dataclasses.replace(res, rows=scaled)


def render(spec: FigureSpec, runs: Sequence[Run]) -> FigureResult:
    """``spec`` drawn from ``runs``: every plotted number computed first (the rows), then drawn from
    them (`draw_spec`), as a redraw from the committed CSV draws it."""
    res = FigureResult(spec.name, None)  # type: ignore[arg-type]
    arms = arm_runs(spec, runs)
    for panel in spec.panels:
        ROWS[panel.kind](res, panel, arms, runs)
    return draw_spec(spec, arms, res.rows, runs)


def draw_preset(preset: str, runs: Sequence[Run]) -> list[FigureResult]:
    """Every figure the rules of ``preset`` list, in their order."""
    rules = load_rules(preset)
    if rules is None or rules.figures is None:
        raise ConfigError(f"preset {preset!r} has no figures block in its rules")
    out: list[FigureResult] = []
    for item in rules.figures.draw:
        if isinstance(item, FigureSpec):
            out.append(render(item, runs))
        elif item.code in CODE_FIGURES:
            out += CODE_FIGURES[item.code](runs)
        else:
            raise ConfigError(f"rules of {preset}: unknown code figure {item.code!r}; valid: {', '.join(CODE_FIGURES)}")
    return out
