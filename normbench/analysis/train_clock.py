"""Equal time, not only equal steps: curves against the runner's training clock.

Every row a run logs carries ``perf/train_s``, the training clock (seconds spent in training
steps so far: torch.compile's compilation included; evaluation, diagnostics and checkpoints not;
`normbench.run_state.Run.train_time`). `on_clock` puts a key's values on that clock; seeds are
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

import numpy as np

from normbench.analysis.claims import measure
from normbench.analysis.plot import FigureResult, finish_axes, new_figure, seed_curve
from normbench.analysis.runs import Run

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
    total = run.get("max_steps") or run.final_step or 0
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
    seeds, min–max shaded)."""
    fig, axes = new_figure(1, 3, title)
    res = FigureResult(name, fig)
    end = max((on_clock(r, CLOCK)[0][-1] for g in groups.values() for r in g if len(on_clock(r, CLOCK)[0])), default=0)
    grid = np.linspace(0.0, end, GRID_POINTS)
    for label, group in groups.items():
        color = colors.get(label)
        style = "--" if "compiled" in label else "-"
        by_step = [(s, running_mean(v, smoothing)) for s, v in (r.series(TRAIN_LOSS) for r in group) if len(s)]
        if by_step:
            seed_curve(axes[0, 0], res.rows, "train_loss_by_step", label, by_step, color=color, linestyle=style)
        by_time = [(t, running_mean(v, smoothing)) for t, v in (on_clock(r, TRAIN_LOSS) for r in group) if len(t)]
        if by_time:
            seed_curve(axes[0, 1], res.rows, "train_loss_by_time", label, on_grid(by_time, grid), color=color,
                       linestyle=style)  # fmt: skip
        val = [on_clock(r, VAL_LOSS) for r in group]
        val = [(t, v) for t, v in val if len(t)]
        if val:  # few points (one per evaluation): the seeds' own, with their median at each evaluation
            for t, v in val:
                axes[0, 2].plot(t, v, color=color, linestyle="none", marker="o", markersize=3, alpha=0.5)
            n = min(len(t) for t, _ in val)
            t_med = np.median([t[:n] for t, _ in val], axis=0)
            v_med = np.median([v[:n] for _, v in val], axis=0)
            axes[0, 2].plot(t_med, v_med, color=color, linestyle=style, label=label)
            res.rows.extend({"panel": "val_loss_by_time", "series": label, "x": float(x), "median": float(y),
                             "lo": np.nan, "hi": np.nan, "n": len(val)} for x, y in zip(t_med, v_med))  # fmt: skip
    finish_axes(axes[0, 0], "steps", "training loss (batch)", f"training loss by step (mean of {smoothing} logs)")
    finish_axes(axes[0, 1], "training clock (s)", "training loss (batch)", "training loss by training time")
    finish_axes(axes[0, 2], "training clock (s)", "validation loss", "validation loss by training time")
    return res
