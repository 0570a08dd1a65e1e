"""How a metrics row is laid out in W&B: sections, per-layer tables, step axes and summaries.

W&B makes one dashboard section per first path segment of a key, so every diagnostic gets its own
(``landscape/…``, ``ics/…``, ``hessian/…`` beside ``train/``, ``val/``, ``test/``, ``perf/``); a
leading ``diag/`` is dropped. Keys with a layer segment, ``<name>/<layer>/<metric>`` (e.g.
``ics/conv1/cos``), would be hundreds of panels; they become one ``wandb.Table`` per diagnostic and
step, ``<name>/layers`` (columns ``index``, ``layer`` and the metrics, one row per layer in the
order the diagnostic reports them, which is the model's order), plus two headline scalars per
metric computed from it: ``<name>/first_layer/<metric>`` (the first layer that reports the metric:
what Santurkar et al. 2018 plot for BN statistics) and ``<name>/layer_mean/<metric>`` (the plain
mean over layers; a NaN in any layer makes it NaN, so a diverged layer is not averaged away). A
value the diagnostic reports itself under ``first_layer`` or ``layer_mean`` is kept as it is.
Per-layer histograms (`normbench.sinks.files.Histogram`) go to their own section,
``<name>_hist/<layer>/<metric>`` (``activations_hist/norm1/pre``), so they do not bury the
diagnostic's scalars. ``metrics.jsonl`` is not touched by any of this: it keeps every value.

`layout` is the pure core (a metrics dict in, scalars and table specs out); `metric_definition`
reads the rule tables `AXIS_RULES` and `SUMMARY_RULES` (first matching pattern wins, ``fnmatch``
syntax, ``*`` also crosses ``/``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from normbench.sinks.files import Histogram

RUNNER_SECTIONS = ("train", "val", "test", "perf")
"""Sections the runner writes; any other key with three or more segments is a per-layer diagnostic."""
FIRST_LAYER = "first_layer"
LAYER_MEAN = "layer_mean"
TABLE = "layers"
HIST_SECTION_SUFFIX = "_hist"

EPOCH = "epoch"
STEP = "global_step"
"""The two x-axes: completed epochs (the ``epoch`` metric the runner logs in its epoch rows) and
the global optimizer step (logged by the sink in every row; W&B's own ``_step`` equals it)."""

AXIS_RULES: tuple[tuple[str, str], ...] = (
    ("train/batch_loss", STEP),
    ("lr", STEP),
    ("perf/train_s", STEP),  # the training clock, on every row: it leaves a row's axis to its other keys
    ("train/*", EPOCH),
    ("val/*", EPOCH),
    ("test/*", EPOCH),
    ("perf/*", EPOCH),
)
"""Keys not matched here (the diagnostics) take the axis of the row they first come in: ``epoch``
for epoch-end rows (``bn_stats`` averages over the epoch), the global step otherwise."""

SUMMARY_RULES: tuple[tuple[str, str], ...] = (
    (f"*/{TABLE}", "last"),  # tables and histograms: the latest one
    (f"*{HIST_SECTION_SUFFIX}/*", "last"),
    # Results: the best value and the final one (the final one is what sweep_summary.csv reports).
    ("val/acc", "max,last"),
    ("test/acc", "max,last"),
    ("val/bleu", "max,last"),
    ("test/bleu", "max,last"),
    ("val/loss", "min,last"),
    ("test/loss", "min,last"),
    ("train/*", "last"),
    ("val/*", "last"),
    ("test/*", "last"),
    ("perf/*_per_s", "mean"),  # throughput: the mean over epochs (warm-up steps are excluded at the source)
    ("perf/*", "last"),  # diag_seconds is cumulative
    ("lr", "last"),
    # Santurkar et al. 2018 compare the worst case over training: the largest loss variation,
    # gradient change and beta along the step (Fig. 4).
    ("landscape/loss_range", "max"),
    ("landscape/loss_max", "max"),
    ("landscape/loss_min", "min"),
    ("landscape/*", "last"),
    ("predictiveness/*", "max"),
    ("beta_smoothness/*", "max"),
    # Sharpness: the largest top eigenvalue seen, the most negative bottom one; one unconverged
    # estimate shows as converged = 0; the largest residual / asymmetry says how far to trust them.
    ("hessian/lambda_max", "max"),
    ("hessian/lambda_min", "min"),
    ("hessian/converged", "min"),
    ("hessian/residual_*", "max"),
    ("hessian/asymmetry", "max"),
    ("hessian/*", "last"),
    # ICS (Santurkar et al. Def. 2.1): the lowest cosine and the largest gradient change seen.
    ("ics/*cos", "min"),
    ("ics/*grad_diff", "max"),
    ("ics/*", "last"),
    ("grad_variance/*", "max"),
    ("bn_stats/*", "max"),  # distance of batch statistics from the running ones: the worst epoch
    ("*", "last"),
)
"""``last`` is W&B's default (the summary holds the plain last value); the others make the summary
a dict, e.g. ``val/acc: {max: …, last: …}``."""


@dataclass
class LayerTable:
    """One ``wandb.Table``: ``columns`` = ``["index", "layer", *metrics]``, one row per layer."""

    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Layout:
    """What one metrics row becomes in W&B: flat values (numbers, histograms) and tables by key."""

    scalars: dict[str, Any]
    tables: dict[str, LayerTable]


def strip_diag(key: str) -> str:
    """``diag/ics/conv1/cos`` -> ``ics/conv1/cos``; other keys unchanged."""
    return key.removeprefix("diag/")


def _number(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def layout(metrics: Mapping[str, Any]) -> Layout:
    """Sections, tables and headline summaries for one row of ``metrics`` (see the module doc).

    Keys with one or two segments, and every key of the runner's sections, pass through (with
    ``diag/`` dropped); ``<name>/<layer…>/<metric>`` (the layer may itself hold ``/``) goes into the
    table of ``<name>``."""
    scalars: dict[str, Any] = {}
    per_layer: dict[str, dict[str, dict[str, Any]]] = {}  # diagnostic -> layer -> metric -> value
    for raw_key, value in metrics.items():
        key = strip_diag(raw_key)
        parts = key.split("/")
        if len(parts) < 3 or parts[0] in RUNNER_SECTIONS:
            scalars[key] = _number(value)
            continue
        name, layer, metric = parts[0], "/".join(parts[1:-1]), parts[-1]
        if layer in (FIRST_LAYER, LAYER_MEAN):
            scalars[key] = _number(value)
        elif isinstance(value, Histogram):
            scalars[f"{name}{HIST_SECTION_SUFFIX}/{layer}/{metric.removesuffix('_hist')}"] = value
        else:
            per_layer.setdefault(name, {}).setdefault(layer, {})[metric] = _number(value)

    tables: dict[str, LayerTable] = {}
    for name, layers in per_layer.items():
        names = list(dict.fromkeys(m for row in layers.values() for m in row))
        rows = [[i, layer, *(row.get(m) for m in names)] for i, (layer, row) in enumerate(layers.items())]
        tables[f"{name}/{TABLE}"] = LayerTable(["index", "layer", *names], rows)
        for m in names:
            values = [row[m] for row in layers.values() if m in row]
            scalars.setdefault(f"{name}/{FIRST_LAYER}/{m}", values[0])
            numbers = [float(v) for v in values if _is_number(v)]
            if numbers:
                scalars.setdefault(f"{name}/{LAYER_MEAN}/{m}", math.fsum(numbers) / len(numbers))
    return Layout(scalars, tables)


def _first_match(key: str, rules: tuple[tuple[str, str], ...]) -> str | None:
    return next((value for pattern, value in rules if fnmatchcase(key, pattern)), None)


def is_epoch_row(metrics: Mapping[str, Any]) -> bool:
    """A row the runner writes at an epoch end: it carries ``epoch`` or an epoch-axis key."""
    return EPOCH in metrics or any(_first_match(strip_diag(k), AXIS_RULES) == EPOCH for k in metrics)


def metric_definition(key: str, epoch_row: bool) -> dict[str, Any]:
    """``define_metric`` keyword arguments for ``key`` (already laid out): its ``step_metric`` and,
    unless it is W&B's default ``last``, its ``summary``."""
    axis = _first_match(key, AXIS_RULES) or (EPOCH if epoch_row else STEP)
    out: dict[str, Any] = {"step_metric": axis}
    summary = _first_match(key, SUMMARY_RULES)
    if summary and summary != "last":
        out["summary"] = summary
    return out
