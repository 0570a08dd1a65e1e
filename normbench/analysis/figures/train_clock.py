"""Equal time, not only equal steps: curves against the runner's training clock.

Every row a run logs carries ``perf/train_s``, the training clock (seconds spent in training
steps so far: torch.compile's compilation included; evaluation, diagnostics and checkpoints not;
`normbench.run.loop.state.Run.train_time`). `on_clock` puts a key's values on that clock; seeds are
compared on a common time grid (each seed interpolated linearly between its logged rows, never
past its last one), so the median over seeds at a time t is over the seeds that trained that long.

The claims' measures (`rmsnorm_time`): the training loss — the running mean of ``smoothing``
logged batch losses, interpolated linearly between logged rows — at a common training time
(``time_fraction`` of the shortest finished run's clock, so every run reached it) and at a common
step (``step_fraction`` of the run's steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from normbench.analysis.figures.plot import FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.judging.claims import measure
from normbench.analysis.loading.runs import Run

CLOCK = "perf/train_s"
TRAIN_LOSS = "train/batch_loss"
VAL_LOSS = "val/loss"
GRID_POINTS = 60


def has_clock(runs: Sequence[Run]) -> bool:
    return any(CLOCK in r.metric_keys() for r in runs)


def on_clock(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(training seconds, values) of the rows that logged both ``key`` and the clock."""
    rows = [
        (float(r[CLOCK]), float(r[key])) for r in run.history if r.get(CLOCK) is not None and r.get(key) is not None
    ]
    if not rows:
        return np.zeros(0), np.zeros(0)
    t, v = zip(*rows)
    return np.asarray(t), np.asarray(v)


def running_mean(values: np.ndarray, width: int) -> np.ndarray:
    """The mean of the last ``width`` values at each point (fewer at the start)."""
    c = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - width, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def smoothed_loss(run: Run, smoothing: int, on_time: bool) -> tuple[np.ndarray, np.ndarray]:
    """(clock seconds or steps, running mean of ``smoothing`` logged training losses)."""
    x, v = on_clock(run, TRAIN_LOSS) if on_time else run.series(TRAIN_LOSS)
    return np.asarray(x, dtype=np.float64), running_mean(v, smoothing)


def at(x: np.ndarray, y: np.ndarray, point: float) -> float:
    """``y`` interpolated at ``point`` (NaN outside the logged range)."""
    return float(np.interp(point, x, y)) if len(x) and x[0] <= point <= x[-1] else math.nan


def final_clock(run: Run) -> float:
    t, _ = on_clock(run, CLOCK)
    return float(t[-1]) if len(t) else math.nan


@measure("loss_at_equal_time")
def loss_at_equal_time(run: Run, all_runs: Sequence[Run], time_fraction: float, smoothing: int) -> float:
    """The run's smoothed training loss at T = ``time_fraction`` × the shortest training clock of
    the finished runs judged (eager and compiled alike): one time that every run reached."""
    ends = [final_clock(r) for r in all_runs if r.status == "finished"]
    ends = [e for e in ends if math.isfinite(e)]
    if not ends:
        return math.nan
    return at(*smoothed_loss(run, smoothing, True), time_fraction * min(ends))


@measure("loss_at_equal_steps")
def loss_at_equal_steps(run: Run, step_fraction: float, smoothing: int) -> float:
    """The run's smoothed training loss at step ``step_fraction`` × its planned training steps."""
    total = run.record.max_steps or run.final_step or 0
    return at(*smoothed_loss(run, smoothing, False), step_fraction * float(total))


def on_grid(series: Sequence[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each (t, y) series interpolated onto ``grid``; NaN outside the series' own time range."""
    out = []
    for t, y in series:
        inside = (grid >= t[0]) & (grid <= t[-1]) if len(t) else np.zeros(len(grid), dtype=bool)
        values = np.full(len(grid), np.nan)
        if inside.any():
            values[inside] = np.interp(grid[inside], t, y)
        out.append((grid, values))
    return out


def time_figure(
    groups: Mapping[str, Sequence[Run]], colors: Mapping[str, str], name: str, title: str, smoothing: int = 5
) -> FigureResult:
    """Training loss (running mean over ``smoothing`` logged steps) against steps and against the
    training clock, and validation loss against the clock, one curve per group (median over
    seeds, min–max shaded). Groups of compiled runs (``... (compiled)``) get a row of their own,
    on the same axes' limits as the eager row: six curves in one panel could not be read."""
    modes = [m for m in ("eager", "compiled") if any(_mode(label) == m for label in groups)] or ["eager"]
    fig, axes = new_figure(len(modes), 3, title, size=(14.0, 3.8 * len(modes)))
    res = FigureResult(name, fig)
    end = max((on_clock(r, CLOCK)[0][-1] for g in groups.values() for r in g if len(on_clock(r, CLOCK)[0])), default=0)
    grid = np.linspace(0.0, end, GRID_POINTS)
    for label, group in groups.items():
        row = axes[modes.index(_mode(label)) if _mode(label) in modes else 0]
        _time_curves(row, res, label, group, colors.get(label), grid, smoothing)
    for mode, row in zip(modes, axes):
        what = f" ({mode} runs)" if len(modes) > 1 else ""
        finish_axes(row[0], "steps", "training loss (batch)", f"training loss by step{what}, mean of {smoothing} logs")
        finish_axes(row[1], "training clock (s)", "training loss (batch)", f"training loss by training time{what}")
        finish_axes(row[2], "training clock (s)", "validation loss", f"validation loss by training time{what}")
    for j in range(3):  # one loss scale per column, eager and compiled compared at a glance; one step scale
        cols = [axes[i, j] for i in range(len(modes))]
        lo = min(ax.get_xlim()[0] for ax in cols), min(ax.get_ylim()[0] for ax in cols)
        hi = max(ax.get_xlim()[1] for ax in cols), max(ax.get_ylim()[1] for ax in cols)
        for ax in cols:  # the clock's scale is each row's own: compiled runs end sooner (their panel half empty)
            ax.set_xlim(*((lo[0], hi[0]) if j == 0 else ax.get_xlim()))
            ax.set_ylim(lo[1], hi[1])
    return res


def _mode(label: str) -> str:
    return "compiled" if label.endswith("(compiled)") else "eager"


def _time_curves(
    row: Sequence[Any], res: FigureResult, label: str, group: Sequence[Run], color: str | None, grid: np.ndarray,
    smoothing: int,
) -> None:  # fmt: skip
    """One group's three curves, on ``row``'s three panels."""
    by_step = [(s, running_mean(v, smoothing)) for s, v in (r.series(TRAIN_LOSS) for r in group) if len(s)]
    if by_step:
        seed_curve(row[0], res.rows, "train_loss_by_step", label, by_step, color=color)
    by_time = [(t, running_mean(v, smoothing)) for t, v in (on_clock(r, TRAIN_LOSS) for r in group) if len(t)]
    if by_time:
        seed_curve(row[1], res.rows, "train_loss_by_time", label, on_grid(by_time, grid), color=color)
    val = [(t, v) for t, v in (on_clock(r, VAL_LOSS) for r in group) if len(t)]
    if val:  # few points (one per evaluation): the seeds' own, with their median at each evaluation
        for t, v in val:
            row[2].plot(t, v, color=color, linestyle="none", marker="o", markersize=3, alpha=0.5)
        n = min(len(t) for t, _ in val)
        t_med = np.median([t[:n] for t, _ in val], axis=0)
        v_med = np.median([v[:n] for _, v in val], axis=0)
        row[2].plot(t_med, v_med, color=color, linestyle="-" if n > 1 else "none", marker="D", markersize=6,
                    label=f"{label}: median" if n == 1 else label)  # fmt: skip
        res.rows.extend({"panel": "val_loss_by_time", "series": label, "x": float(x), "median": float(y),
                         "lo": np.nan, "hi": np.nan, "n": len(val)} for x, y in zip(t_med, v_med))  # fmt: skip
