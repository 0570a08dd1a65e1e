"""The schema of a preset's ``figures:`` block (``normbench/rules/<preset>.yaml``), parsed once into
typed dataclasses (`Figures`, `FigureSpec`, `PanelSpec`, `LineSpec`, `ArmSpec`, `ArmsBy`) that
`normbench.analysis.figures.figure_spec` draws and `normbench.analysis.dashboards.dashboard` turns into panels.

A figure that follows the common pattern is data: its arms (config selectors, or the values of
config keys), and one to three panels, each of one kind:

- ``curve``: per arm, each line's logged ``key`` (or a registered per-run ``series``) against the
  step, the epoch or the percent of training: the median over seeds, the seeds' min–max shaded;
- ``bar``: per arm, one bar of a registered measure (``value``: a name, or a mapping of its
  ``name`` and parameters), median over seeds with the min–max;
- ``sweep``: per arm, the measure against a config key (``x``: ``lr``, ``batch_size``), one series
  per seed.

A figure with real logic is named by ``code`` (a function registered in
`normbench.analysis.figures.figure_spec`). ``fetch`` is the pattern of the history keys the preset's figures
and claims read (what ``normbench-figures --wandb`` fetches). Every level accepts only its own keys:
an unknown key is a one-line `ConfigError` naming it, where it stands and the valid keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from normbench.base.errors import ConfigError

SERIES: dict[str, Callable[..., Any]] = {}
"""Name → ``fn(run, **params) -> (x, y)``: a per-run series a ``curve`` line names (``series:``)
where it is more than one logged key (a mean over layers, each layer's last value)."""


def series(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn(run, **params) -> (x, y)`` as the series ``name`` a figure's line names."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in SERIES and SERIES[name] is not fn:
            raise ValueError(f"series {name!r} is registered twice")
        SERIES[name] = fn
        return fn

    return register


KINDS = ("curve", "bar", "sweep")
X_AXES = ("step", "epoch", "percent")
SCALES = ("linear", "log", "log2")
ORDERS = ("ascending", "descending")
LEGENDS = ("auto", "none", "arms")

FIGURES_KEYS = ("fetch", "draw"), ()
CODE_KEYS = ("code",), ()
FIGURE_KEYS = ("name", "title", "arms", "panels"), ()
ARM_KEYS = ("label",), ("select", "color", "linestyle", "rest")
BY_KEYS = ("by",), ("label", "labels", "order", "colors")
PANEL_KEYS = (("panel", "kind", "xlabel", "ylabel"),
              ("title", "x", "y", "value", "xscale", "yscale", "legend", "hline", "xticks", "invert_x", "split",
               "split_order", "split_styles", "split_label", "mark_diverged", "marker", "fill", "scale"))  # fmt: skip
LINE_KEYS = (), ("key", "series", "params", "label", "panel", "linestyle", "marker", "fill")


@dataclass(frozen=True)
class ArmSpec:
    """One series of a figure: the runs ``select`` picks (every run when empty; ``rest``: the runs
    no other arm takes), drawn in ``color`` with ``linestyle``."""

    label: str
    select: dict[str, Any] = field(default_factory=dict)
    color: str | None = None
    linestyle: str | None = None
    rest: bool = False


@dataclass(frozen=True)
class ArmsBy:
    """Arms from the values the runs take of config keys ``by``: one arm per value (tuple), in
    ``order`` (``ascending``, ``descending``, or a list of values first, the rest ascending),
    labelled by ``labels`` (one key) or the format ``label`` (``{0}``, ``{1:g}``: the values), coloured
    by ``colors`` (``norm``: `normbench.analysis.figures.plot.NORM_COLORS`; a list: cycled)."""

    by: tuple[str, ...]
    label: str = "{0}"
    labels: dict[Any, str] = field(default_factory=dict)
    order: str | tuple[Any, ...] = "ascending"
    colors: str | tuple[str, ...] = "norm"


@dataclass(frozen=True)
class LineSpec:
    """One line per arm of a ``curve`` panel: a logged ``key``, or a registered ``series`` (with
    ``params``) that gives its own x; ``label`` formats ``{arm}``; ``panel`` overrides the CSV panel."""

    key: str | None = None
    series: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    label: str = "{arm}"
    panel: str | None = None
    linestyle: str | None = None
    marker: str | None = None
    fill: bool = True


@dataclass(frozen=True)
class PanelSpec:
    """One panel: its CSV name (``panel``), its kind (`KINDS`), axes and what it draws."""

    panel: str
    kind: str
    xlabel: str
    ylabel: str
    title: str = ""
    x: str = "step"
    """``curve``: `X_AXES`; ``sweep``: the config key on the x axis."""
    lines: tuple[LineSpec, ...] = ()
    value: tuple[str, dict[str, Any]] | None = None
    """``bar`` / ``sweep``: the registered measure (name, parameters) of each run."""
    xscale: str = "linear"
    yscale: str = "linear"
    legend: str = "auto"
    hline: float | None = None
    xticks: bool = False
    """``sweep``: a tick at each x value, labelled by it."""
    invert_x: bool = False
    split: str | None = None
    """``curve``: one line per arm and value of this config key (``panel`` and ``split_label`` format ``{split}``)."""
    split_order: str = "ascending"
    split_styles: dict[Any, Any] = field(default_factory=dict)
    split_label: str = "{arm}"
    mark_diverged: bool = False
    """``sweep``: the number of diverged runs written beside each point."""
    marker: str | None = None
    fill: bool = True
    scale: float = 1.0
    """The drawn values are the stored ones × ``scale`` (100: an accuracy stored as a fraction drawn
    in %, a difference of two in points); the figure's CSV keeps the stored values."""


@dataclass(frozen=True)
class FigureSpec:
    name: str
    """File stem: ``<name>.png``, ``.pdf``, ``.csv``."""
    title: str
    arms: tuple[ArmSpec, ...] | ArmsBy
    panels: tuple[PanelSpec, ...]


@dataclass(frozen=True)
class CodeFigure:
    """Figures drawn by a registered function (real logic: santurkar, transformer, train clock)."""

    code: str


@dataclass(frozen=True)
class Figures:
    """A preset's ``figures:`` block: the pattern of the keys to fetch, the figures in their order."""

    fetch: re.Pattern[str]
    draw: tuple[FigureSpec | CodeFigure, ...]


def keyed_node(node: Any, where: str, keys: tuple[tuple[str, ...], tuple[str, ...]]) -> Mapping[str, Any]:
    """``node`` as a mapping holding every required key of ``keys`` (required, optional) and no other
    (the rules' and the figures' one checker: `normbench.analysis.judging.rules_schema` uses it too)."""
    required, optional = keys
    valid = ", ".join((*required, *optional))
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where}: a mapping with keys {valid} expected, got {node!r}")
    for key in node:
        if key not in required and key not in optional:
            raise ConfigError(f"{where}: unknown key {key!r}; valid keys: {valid}")
    for key in required:
        if key not in node:
            raise ConfigError(f"{where}: missing key {key!r} (required: {', '.join(required)})")
    return node


def _choice(value: Any, valid: tuple[str, ...], where: str, what: str) -> str:
    if value not in valid:
        raise ConfigError(f"{where}: {what} {value!r}; valid choices: {', '.join(valid)}")
    return value


def _value(node: Any, where: str) -> tuple[str, dict[str, Any]]:
    spec = dict(node) if isinstance(node, Mapping) else {"name": node}
    if not isinstance(spec.get("name"), str):
        raise ConfigError(f"{where}: value: a measure name, or a mapping of 'name' and its parameters; got {node!r}")
    return spec.pop("name"), spec


def _line(node: Any, where: str) -> LineSpec:
    node = keyed_node(node, where, LINE_KEYS)
    if ("key" in node) == ("series" in node):
        raise ConfigError(f"{where}: give exactly one of 'key' (a logged key) and 'series' (a registered series)")
    return LineSpec(node.get("key"), node.get("series"), dict(node.get("params") or {}),
                    str(node.get("label", "{arm}")), node.get("panel"), node.get("linestyle"), node.get("marker"),
                    bool(node.get("fill", True)))  # fmt: skip


def _style(v: Any) -> Any:
    """A line style as matplotlib takes it: ``[0, [3, 1, 1, 1]]`` (YAML) → ``(0, (3, 1, 1, 1))``."""
    return (v[0], tuple(v[1])) if isinstance(v, list) else v


def _panel(node: Any, where: str) -> PanelSpec:
    where = f"{where}, panel {node.get('panel')!r}" if isinstance(node, Mapping) and "panel" in node else where
    node = keyed_node(node, where, PANEL_KEYS)
    kind = _choice(node["kind"], KINDS, where, "kind")
    y = node.get("y")
    lines = tuple(_line(n, f"{where}, y") for n in (y if isinstance(y, list) else [y] if y is not None else []))
    if (kind == "curve") != bool(lines):
        raise ConfigError(f"{where}: a curve panel draws its 'y' lines, and only a curve panel has them")
    if (kind != "curve") != ("value" in node):
        raise ConfigError(f"{where}: a {kind} panel {'needs' if kind != 'curve' else 'takes no'} 'value' (a measure)")
    x = str(node.get("x", "step"))
    if kind == "curve":
        _choice(x, X_AXES, where, "x")
    for axis in ("xscale", "yscale"):
        _choice(node.get(axis, "linear"), SCALES, where, axis)
    return PanelSpec(
        panel=str(node["panel"]), kind=kind, xlabel=str(node["xlabel"]), ylabel=str(node["ylabel"]),
        title=str(node.get("title", "")), x=x, lines=lines,
        value=_value(node["value"], where) if "value" in node else None,
        xscale=node.get("xscale", "linear"), yscale=node.get("yscale", "linear"),
        legend=_choice(node.get("legend", "auto"), LEGENDS, where, "legend"),
        hline=float(node["hline"]) if "hline" in node else None, xticks=bool(node.get("xticks", False)),
        invert_x=bool(node.get("invert_x", False)), split=node.get("split"),
        split_order=_choice(node.get("split_order", "ascending"), ORDERS, where, "split_order"),
        split_styles={k: _style(v) for k, v in (node.get("split_styles") or {}).items()},
        split_label=str(node.get("split_label", "{arm}")), mark_diverged=bool(node.get("mark_diverged", False)),
        marker=node.get("marker"), fill=bool(node.get("fill", True)), scale=_scale(node.get("scale", 1.0), where),
    )  # fmt: skip


def _scale(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{where}: scale {value!r} is not allowed; scale must be a positive number "
                          "(100: a fraction drawn in %)")
    return float(value)


def _arms(node: Any, where: str) -> tuple[ArmSpec, ...] | ArmsBy:
    if isinstance(node, list):
        arms = []
        for i, a in enumerate(node):
            a = keyed_node(a, f"{where}, arm {i}", ARM_KEYS)
            select = a.get("select") or {}
            if not isinstance(select, Mapping):
                raise ConfigError(f"{where}, arm {i}: select must map config keys to values, got {select!r}")
            arms.append(ArmSpec(str(a["label"]), dict(select), a.get("color"), a.get("linestyle"), bool(a.get("rest"))))
        return tuple(arms)
    node = keyed_node(node, where, BY_KEYS)
    by = node["by"] if isinstance(node["by"], list) else [node["by"]]
    order = node.get("order", "ascending")
    order = tuple(order) if isinstance(order, list) else _choice(order, ORDERS, where, "order")
    colors = node.get("colors", "norm")
    colors = tuple(colors) if isinstance(colors, list) else _choice(colors, ("norm",), where, "colors")
    return ArmsBy(tuple(str(k) for k in by), str(node.get("label", "{0}")), dict(node.get("labels") or {}), order,
                  colors)  # fmt: skip


def _figure(node: Any, where: str) -> FigureSpec | CodeFigure:
    if isinstance(node, Mapping) and "code" in node:
        return CodeFigure(str(keyed_node(node, f"{where}, code figure", CODE_KEYS)["code"]))
    where = f"{where}, figure {node.get('name')!r}" if isinstance(node, Mapping) and "name" in node else where
    node = keyed_node(node, where, FIGURE_KEYS)
    panels = tuple(_panel(p, where) for p in node["panels"] or [])
    if not panels:
        raise ConfigError(f"{where}: no panels")
    return FigureSpec(str(node["name"]), str(node["title"]), _arms(node["arms"], f"{where}, arms"), panels)


def parse_figures(node: Any, where: str) -> Figures:
    """A rules file's ``figures:`` block as `Figures` (``where``: ``rules of <preset>``)."""
    where = f"{where}, figures"
    node = keyed_node(node, where, FIGURES_KEYS)
    try:
        fetch = re.compile(str(node["fetch"]))
    except re.error as e:
        raise ConfigError(f"{where}: fetch {node['fetch']!r} is not a regular expression ({e})") from None
    draw = tuple(_figure(f, where) for f in node["draw"] or [])
    if not draw:
        raise ConfigError(f"{where}: draw names no figure")
    return Figures(fetch, draw)
