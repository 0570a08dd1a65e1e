"""The leaderboard's figure: per model and data set, each norm's score with its 95 % t-interval.

Throughput is drawn (score against throughput relative to the cell's reference norm) only when
every run recorded that it ran on a quiet machine (`measured_quietly`); timings taken beside
other work are not a speed ranking (issue 43), so otherwise the figure is the scores alone, one
row per norm with its name on the axis, best on top.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from normbench.analysis.figures.plot import NORM_COLORS, finish_axes, new_figure
from normbench.analysis.figures.plot_rows import label_points
from normbench.analysis.leaderboard.leaderboard import IMAGES, NA, REFERENCE, THROUGHPUT, Row
from normbench.analysis.leaderboard.leaderboard_labels import cell_title
from normbench.analysis.loading.runs import Run
from normbench.analysis.wording.figure_names import MODEL_NAMES, arm_name, metric_name

QUIET_KEY = "machine"
"""A run's summary record of the machine's load while it ran: ``{"quiet": true, ...}``."""


def measured_quietly(run: Run) -> bool:
    """Whether the run recorded a quiet machine (``summary["machine"]["quiet"]`` true); a run that
    recorded nothing does not count."""
    record = run.summary.get(QUIET_KEY)
    return isinstance(record, Mapping) and record.get("quiet") is True


def _cells(rows: Sequence[Row]) -> list[tuple[str, str, list[Row], str]]:
    """(model, data set, the rows with a score, task) per cell, in order of appearance."""
    out = []
    for model, dataset in dict.fromkeys((r.model, r.dataset) for r in rows):
        members = [r for r in rows if (r.model, r.dataset) == (model, dataset)]
        scored = [r for r in members if r.score.n > 0 and r.verdict != NA]
        out.append((model, dataset, scored, members[0].task))
    return out


def _title(model: str, dataset: str) -> str:
    """The cell's title with the model as the papers name it (``Transformer``, not its config name)."""
    title = cell_title(model, dataset)
    for code, name in MODEL_NAMES.items():
        title = title.replace(code, name)
    return title


def _verdict(r: Row) -> str:
    """The rules' verdict on the norm's row, short: ``not judged``, ``reference``, ``inconclusive``."""
    return str(r.verdict).split(":")[0].strip()


def _subtitle(rows: Sequence[Row], what: str) -> str:
    """What the error bars are; hollow points named only when one is drawn; the verdicts' reminder."""
    hollow = "; hollow: under 3 seeds" if any(r.score.n and not math.isfinite(r.score.lo) for r in rows) else ""
    return f"({what}{hollow})\nin brackets: the rules' verdict; a gap without one is not decided"


def _metric(scored: Sequence[Row], task: str) -> str:
    return (metric_name(scored[0].metric) if scored else "score") + (" (%)" if task == IMAGES else "")


def _point(ax: Any, x: float, y: float, r: Row, scale: float, horizontal: bool) -> None:
    """The norm's mean with its interval (hollow, no bar: one seed)."""
    color = NORM_COLORS.get(r.swept or r.norm, "dimgray")
    if math.isfinite(r.score.lo) and math.isfinite(r.score.hi):  # too few seeds: no interval drawn
        half = [[r.score.mean * scale - r.score.lo * scale], [r.score.hi * scale - r.score.mean * scale]]
        kw = {"xerr": half} if horizontal else {"yerr": half}
        ax.errorbar(x, y, fmt="o", color=color, capsize=3, **kw)
    else:
        ax.plot(x, y, "o", mfc="none", color=color)


def score_figure(rows: Sequence[Row]) -> Any:
    """Each norm's score (mean, 95 % t-interval) per cell, norms on the y axis, best on top."""
    cells = _cells(rows)
    height = max([len(c[2]) for c in cells] + [3]) * 0.42 + 1.4
    shown = [r for c in cells for r in c[2]]
    title = "Norm leaderboard: final score per norm\n" + _subtitle(shown, "95 % t-interval over seeds")
    fig, axes = new_figure(1, max(len(cells), 1), title, size=(6.0 * max(len(cells), 1), height))
    for ax, (model, dataset, scored, task) in zip(axes[0], cells):
        scale = 100.0 if task == IMAGES else 1.0
        ordered = sorted(scored, key=lambda r: r.score.mean)  # the best at the top
        for y, r in enumerate(ordered):
            _point(ax, r.score.mean * scale, y, r, scale, horizontal=True)
        ax.set_yticks(range(len(ordered)), [f"{arm_name(r.norm)} ({_verdict(r)})" for r in ordered], fontsize=8)
        ax.set_ylim(-0.5, len(ordered) - 0.5)
        finish_axes(ax, _metric(scored, task), "", _title(model, dataset), legend=False)
    return fig


def throughput_figure(rows: Sequence[Row]) -> Any:
    """Score against throughput relative to the reference norm, one panel per cell; each point
    labelled with its norm beside it, where it overlaps no other label."""
    cells = _cells(rows)
    title = "Norm leaderboard: score vs training throughput\n" + _subtitle(
        [r for c in cells for r in c[2]], "error bars: 95 % t-interval over seeds")
    fig, axes = new_figure(1, max(len(cells), 1), title, size=(max(7.0, 6.0 * len(cells)), 5.0))  # the title fits
    cell_labels = []
    for ax, (model, dataset, scored, task) in zip(axes[0], cells):
        scale = 100.0 if task == IMAGES else 1.0
        relative = all(math.isfinite(r.relative_throughput) for r in scored)
        labels = []
        for r in scored:
            x = r.relative_throughput if relative else r.throughput
            _point(ax, x, r.score.mean * scale, r, scale, horizontal=False)
            labels.append((x, r.score.mean * scale, f"{arm_name(r.norm)} ({_verdict(r)})",
                           NORM_COLORS.get(r.swept or r.norm, "dimgray")))  # fmt: skip
        cell_labels.append((ax, labels))
        xlabel = f"throughput × {arm_name(REFERENCE[task])}" if relative else THROUGHPUT[task]
        finish_axes(ax, xlabel, _metric(scored, task), _title(model, dataset), legend=False)
    fig.tight_layout()  # the axes' final size first: labels are placed in points on the page
    for ax, labels in cell_labels:
        label_points(ax, labels)
    return fig


def figure(rows: Sequence[Row], runs: Sequence[Run]) -> Any:
    """`throughput_figure` when every run recorded a quiet machine, else `score_figure`."""
    quiet = bool(runs) and all(measured_quietly(r) for r in runs)
    return throughput_figure(rows) if quiet else score_figure(rows)
