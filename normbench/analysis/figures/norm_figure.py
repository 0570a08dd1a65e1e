"""The translation figures' one layout (`normbench.analysis.figures.transformer`: powernorm_mt,
powernorm_chain, ln_axes, prms_width, rmsnorm_speed), drawn from the figure's rows alone, so that a
figure drawn from runs and one redrawn from its committed CSV (`normbench.analysis.figures.figure_record`)
are the same figure:

- the loss by step (``val_loss`` when evaluated more than once, else ``train_loss``): the median
  over seeds with the min–max shaded; arms whose curves are the same numbers (compiled runs compute
  the eager runs' losses) drawn once, labelled ``a = b``;
- the final validation loss (when evaluated once: one ``val_loss`` row per arm), the final BLEU and
  (rmsnorm_speed) training throughput: a point per arm at the median, the seeds' min–max as an
  error bar, each seed a dot beside it (``<panel>/seeds`` rows, one per seed, ``n`` = 1).

Arms are named as the papers name them (`figure_names.arm_name`, applied to committed CSVs' old
code names too), coloured by their norm, compiled arms drawn dashed with square markers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from normbench.analysis.figures.plot import NORM_COLORS, FigureResult, finish_axes, new_figure
from normbench.analysis.figures.plot_rows import draw_rows, point_rows, rows_of
from normbench.analysis.wording.figure_names import arm_name, metric_name, titled

NAMED_COLORS = {arm_name(k): v for k, v in NORM_COLORS.items()}
"""The norms' colours by the names the figures give them."""
LOSS_PANELS = ("val_loss", "train_loss")
POINT_PANELS = ("val_loss", "bleu", "tokens_per_s")


@dataclass(frozen=True)
class NormFigure:
    """What a translation figure is besides its rows: its file stem, title and BLEU key."""

    name: str
    title: str
    bleu_key: str = "test/bleu"


def color_of(arm: str) -> str:
    """The arm's norm's colour: the longest norm name the label starts with: ``RMSNorm (eager)`` takes
    RMSNorm's, ``BN masked (mixed)`` BN's, ``LN (per sample)`` its own, not LN's."""
    names = [n for n in NAMED_COLORS if arm == n or arm.startswith(n + " ")]
    return NAMED_COLORS[max(names, key=len)] if names else "dimgray"


def style_of(arm: str) -> tuple[str, str]:
    """(line style, marker): compiled arms dashed with squares, the others solid with circles."""
    return ("--", "s") if arm.endswith("(compiled)") else ("-", "o")


def named(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows with their series named as the papers name the arms (old CSVs wrote ``pn_v``)."""
    return [{**r, "series": arm_name(str(r["series"]))} for r in rows]


def _series(rows: Sequence[Mapping[str, Any]], panel: str) -> list[str]:
    return list(dict.fromkeys(str(r["series"]) for r in rows if r["panel"] == panel))


def curve_panel(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The loss panel drawn as curves: ``val_loss`` when some arm has it at more than one step, else
    ``train_loss`` when logged; None when neither."""
    for panel in LOSS_PANELS:
        arms = _series(rows, panel)
        if arms and (panel == "train_loss" or any(len(rows_of(rows, panel, a)) > 1 for a in arms)):
            return panel
    return None


def loss_curves(ax: Any, rows: Sequence[Mapping[str, Any]], panel: str) -> None:
    """Each arm's loss by step; arms with the very same curve drawn once, labelled ``a = b``."""
    same: dict[bytes, list[str]] = {}
    arms = _series(rows, panel)
    for arm in arms:
        got = rows_of(rows, panel, arm)
        key = np.round([[float(r["x"]), float(r["median"])] for r in got], 9).tobytes()
        same.setdefault(key, []).append(arm)
    for names in same.values():
        linestyle, marker = style_of(names[0])
        draw_rows(ax, rows_of(rows, panel, names[0]), " = ".join(names), color_of(names[0]),
                  fill=len(arms) <= 4, linestyle=linestyle, marker=marker if panel == "val_loss" else None)  # fmt: skip
    if panel == "val_loss":
        finish_axes(ax, "steps", "validation loss", "validation loss")
    else:
        finish_axes(ax, "steps", "training loss (running mean of 9 logs)", "training loss (validated once, at the end)")


def end_points(ax: Any, rows: Sequence[Mapping[str, Any]], panel: str, ylabel: str, title: str) -> None:
    """A point per arm (median, seeds' min–max) with each seed a dot beside it."""
    arms = _series(rows, panel)
    point_rows(ax, {a: rows_of(rows, panel, a)[0] for a in arms}, {a: color_of(a) for a in arms},
               {a: style_of(a)[1] for a in arms})  # fmt: skip
    for i, arm in enumerate(arms):
        seeds = [float(r["median"]) for r in rows_of(rows, f"{panel}/seeds", arm)]
        ax.plot([i + 0.18] * len(seeds), seeds, ".", color=color_of(arm), alpha=0.5, markersize=4)
    finish_axes(ax, "arm", ylabel, title, legend=False)


def draw_norm_figure(spec: NormFigure, rows: Sequence[Mapping[str, Any]], runs: Sequence[Any]) -> FigureResult:
    """The figure from its rows (`normbench.analysis.figures.plot.CSV_COLUMNS`); ``runs`` (or a
    ``per_run.csv``'s rows) give the title's scope."""
    rows = named(rows)
    curve = curve_panel(rows)
    points = [p for p in POINT_PANELS if _series(rows, p) and p != curve]
    n = int(curve is not None) + len(points)
    fig, axes = new_figure(1, n, titled(spec.title, runs), size=(4.8 * n, 4.2))
    panels = iter(axes[0])
    if curve is not None:
        loss_curves(next(panels), rows, curve)
    what = {"val_loss": ("validation loss", "validation loss at the end"),
            "bleu": (metric_name(spec.bleu_key), f"{metric_name(spec.bleu_key)} at the end"),
            "tokens_per_s": ("training tokens / s", "throughput (median over epochs)")}  # fmt: skip
    for panel in points:
        ylabel, title = what[panel]
        end_points(next(panels), rows, panel, ylabel, f"{title}: median, seeds' min–max, each seed")
    return FigureResult(spec.name, fig, rows=list(rows))
