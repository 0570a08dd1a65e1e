"""Any sweep, analysed without a preset: what it varied, its curves and final metrics per setting.

A paper preset's figures and claims come from its rules; a sweep of one's own (``normbench -m
norm=bn,ln,gn seed=0,1``) has none. Here the settings are read from the runs themselves: the
config keys whose values differ between runs (`swept_keys`; the seed is what repeats a setting,
never a setting), each setting's runs are its seeds, and every number is a mean over seeds with a
95 % Student-t interval (none under `MIN_SEEDS` seeds: "too few seeds").

- `sweep_figures`: ``curves.png`` (each headline metric against the step, a line per setting with
  its interval as a band) and ``finals.png`` / ``finals.csv`` (each setting's final value per
  metric, mean [95 % interval], n);
- `sweep_dashboard`: the same sweep as a W&B report specification (`normbench.analysis.dashboards.dashboard`),
  its runs filtered by the sweep's W&B group.

Runs that did not finish are left out of the numbers, each named in one warning (a diverged run is
counted in the table as diverged, never averaged).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from normbench.analysis.dashboards.dashboard import Dashboard, Panel, Section
from normbench.analysis.judging.stats import MIN_SEEDS_FOR_INTERVAL, t_interval
from normbench.analysis.loading.run_record import Run
from normbench.analysis.wording.figure_names import arm_name, metric_name
from normbench.base.errors import ConfigError
from normbench.base.output import warn

MIN_SEEDS = MIN_SEEDS_FOR_INTERVAL
"""Seeds a setting needs for an interval: the leaderboard's rule."""
NOT_SETTINGS = ("seed", "resume", "logger", "hardware.resolved", "hardware.num_threads", "checkpoint")
"""Config keys (and sections) that differ between runs without making another setting."""
HEADLINE_METRICS = ("train/loss", "val/loss", "val/acc", "test/acc", "val/bleu", "test/bleu")
"""What the figures draw, where the runs logged it (in this order)."""


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = repr(value) if isinstance(value, list) else value
    return out


def _is_setting(key: str) -> bool:
    return not any(key == k or key.startswith(f"{k}.") for k in NOT_SETTINGS)


def swept_keys(runs: Sequence[Run]) -> list[str]:
    """The config keys whose values differ between ``runs`` (the seed and run-only keys aside), sorted."""
    flats = [_flat(r.config) for r in runs]
    keys = sorted({k for f in flats for k in f if _is_setting(k)})
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def setting_label(run: Run, keys: Sequence[str]) -> str:
    """A setting's name from its swept values: ``norm=GN, lr=0.1`` (norms as the papers name them)."""
    if not keys:
        return "all runs"
    flat = _flat(run.config)
    parts = []
    for k in keys:
        value = arm_name(str(flat.get(k))) if k.split(".")[0] == "norm" else flat.get(k)
        parts.append(f"{k.removesuffix('.name')}={value}")
    return ", ".join(parts)


def settings(runs: Sequence[Run]) -> tuple[list[str], dict[str, list[Run]]]:
    """The swept keys and each setting's runs (its seeds), in order of appearance."""
    keys = swept_keys(runs)
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(setting_label(r, keys), []).append(r)
    return keys, groups


def finished_only(runs: Sequence[Run]) -> list[Run]:
    """The finished and diverged runs; each other one (interrupted, failed) named in one warning."""
    left = [r for r in runs if r.status not in ("finished", "diverged")]
    for r in left:
        warn(f"{r.source or r.name}: left out of the sweep's numbers (status {r.status}, step {r.final_step})")
    return [r for r in runs if r.status in ("finished", "diverged")]


def metrics_of(runs: Sequence[Run]) -> list[str]:
    """The headline metrics some run logged, in `HEADLINE_METRICS`' order."""
    logged = set().union(*(r.metric_keys() for r in runs)) if runs else set()
    return [k for k in HEADLINE_METRICS if k in logged]


def final_row(label: str, runs: Sequence[Run], metric: str) -> dict[str, Any]:
    """One setting's final ``metric``: mean and 95 % interval over its finished seeds, n, diverged."""
    values = np.array([r.final(metric) for r in runs if r.status == "finished"], dtype=np.float64)
    values = values[np.isfinite(values)]
    row = {"setting": label, "metric": metric_name(metric), "n": int(values.size),
           "diverged": sum(r.status == "diverged" for r in runs), "mean": math.nan, "lo": math.nan,
           "hi": math.nan, "note": ""}  # fmt: skip
    if values.size:
        mean, lo, hi = t_interval(values)
        row["mean"] = mean
        if values.size >= MIN_SEEDS:
            row["lo"], row["hi"] = lo, hi
        else:
            row["note"] = f"too few seeds (n = {values.size}; an interval needs {MIN_SEEDS})"
    return row


def finals_table(groups: Mapping[str, Sequence[Run]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    return [final_row(label, members, m) for m in metrics for label, members in groups.items()]


def write_finals_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def curve_band(runs: Sequence[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps and, at each step every run logged, the mean over runs and its 95 % interval (NaN
    bounds under `MIN_SEEDS` runs)."""
    series = [dict(zip(*(a.tolist() for a in r.series(metric)), strict=True)) for r in runs]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    mean, lo, hi = (np.full(len(steps), math.nan) for _ in range(3))
    for i, step in enumerate(steps):
        v = np.array([s[step] for s in series], dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size:
            mean[i], low, high = t_interval(v)
            if v.size >= MIN_SEEDS:
                lo[i], hi[i] = low, high
    return np.array(steps), mean, lo, hi


def sweep_figures(runs: Sequence[Run], out: Path) -> list[Path]:
    """``curves.png``, ``finals.png`` and ``finals.csv`` of any sweep into ``out``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    used = finished_only(runs)
    if not used:
        raise ConfigError("no finished run in the sweep to draw")
    keys, groups = settings(used)
    metrics = metrics_of(used)
    if not metrics:
        raise ConfigError(f"the runs logged none of {', '.join(HEADLINE_METRICS)}: nothing to draw")
    out.mkdir(parents=True, exist_ok=True)
    written = [write_finals_csv(finals_table(groups, metrics), out / "finals.csv")]
    colors = {label: f"C{i % 10}" for i, label in enumerate(groups)}
    varied = ", ".join(k.removesuffix(".name") for k in keys) or "nothing"
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6), squeeze=False, layout="constrained")
    for ax, metric in zip(axes[0], metrics, strict=True):
        for label, members in groups.items():
            steps, mean, lo, hi = curve_band([r for r in members if r.status == "finished"], metric)
            style = "-" if len(steps) >= 5 else "o"
            ax.plot(steps, mean, style, color=colors[label], label=label, ms=4)
            if np.isfinite(lo).any():
                ax.fill_between(steps, lo, hi, color=colors[label], alpha=0.2, lw=0)
        ax.set(xlabel="step", ylabel=metric_name(metric), title=metric_name(metric))
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside upper center", ncols=min(4, len(groups)))
    fig.suptitle(f"the sweep varies {varied}: mean over seeds, 95 % interval band (≥ {MIN_SEEDS} seeds)", y=1.0)
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)
    written.append(out / "curves.png")
    written.append(_finals_figure(groups, metrics, colors, varied, out / "finals.png"))
    return written


def _finals_figure(groups: Mapping[str, Sequence[Run]], metrics: Sequence[str], colors: Mapping[str, str],
                   varied: str, path: Path) -> Path:  # fmt: skip
    import matplotlib.pyplot as plt

    height = 0.45 * len(groups) + 1.6
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), height), squeeze=False, layout="constrained")
    labels = list(groups)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for y, label in enumerate(labels):
            row = final_row(label, groups[label], metric)
            if math.isfinite(row["lo"]):
                ax.errorbar(row["mean"], y, xerr=[[row["mean"] - row["lo"]], [row["hi"] - row["mean"]]], fmt="o",
                            color=colors[label], capsize=3)  # fmt: skip
            elif math.isfinite(row["mean"]):
                ax.plot(row["mean"], y, "o", mfc="none", color=colors[label])
        ax.set_yticks(range(len(labels)), labels if ax is axes[0][0] else [""] * len(labels))
        ax.set(xlabel=f"final {metric_name(metric)}", ylim=(-0.6, len(labels) - 0.4))
    fig.suptitle(f"final values per setting ({varied}): mean and 95 % interval; hollow: too few seeds")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def sweep_group(sweep_dir: Path) -> str:
    """The W&B group of a local sweep's runs: ``sweep-<folder name>`` (`normbench.sinks.wandb_run.run_identity`)."""
    return f"sweep-{Path(sweep_dir).resolve().name}"


def sweep_dashboard(runs: Sequence[Run], group: str) -> Dashboard:
    """A W&B report of any sweep: one section, its runs grouped by the swept keys, a panel per
    headline metric and a table of the final values."""
    keys, _ = settings(runs)
    metrics = metrics_of(runs)
    panels = [Panel(metric_name(m), (m,)) for m in metrics]
    panels.append(Panel("runs: the final values per setting", tuple(metrics), kind="table"))
    section = Section("sweep", f"{group}: the sweep varies {', '.join(keys) or 'nothing'}", [], {}, keys, panels)
    return Dashboard(preset=group, title=f"normbench: {group}", description=f"{len(runs)} runs of {group}",
                     job_type="", swept=dict.fromkeys(keys, ""),  # the group alone selects the sweep's runs
                     sections=[section], group=group)  # fmt: skip
