"""The norm leaderboard: per model and data set, one row per norm, from a sweep's runs.

A row is a norm as it ran: on translation a norm that mixes time steps (the behavioural probe
`normbench.norms.probes.mixes_positions`) runs in the encoder only, with an LN decoder, as
PowerNorm's authors compare BN, LN and PN, and its row reads ``pn (enc) / ln (dec)``; causal norms
run in both stacks and their row is the name. Both kinds are ranked in one table. Each row says
what the norm normalizes over in the cell's layout (the norm class's own declaration).

What each row says, over the seeds of that norm (``n`` = finished runs with a finite value):

- the final metric (``val/acc`` for images; ``test/bleu``, else ``val/bleu``, for translation) as
  the mean and a 95 % Student-t interval, mean ± t_{0.975, n−1}·s/√n with s the sample standard
  deviation (ddof 1); fewer than `MIN_SEEDS_FOR_INTERVAL` seeds give the mean and "too few seeds"
  in place of an interval (its bounds NaN: 2 seeds spread ±12.7 s, an interval that says nothing);
- the final ``train/loss`` (mean);
- training throughput (``perf/samples_per_s`` or ``perf/tokens_per_s``, each run's median over
  epochs, then the mean over runs), also relative to the reference norm of the same model and
  data set: ``bn`` for images, ``ln`` for translation;
- ``diverged``: runs stopped by the divergence monitor (status ``diverged``). They are counted in
  the row, not dropped, but the statistics are over finished runs only;
- the diagnostics' headline numbers at the end of training (`HEADLINES`): each run's mean of the
  values logged in the last ``tail`` fraction of its steps (its last value when none falls there),
  then the mean over runs.

No ranking by overlapping intervals: a row's verdict is its claim's in the leaderboard's rules
(``normbench/rules/leaderboard.yaml``: each norm against its cell's reference, two-sided, Holm
within the cell; `normbench.analysis.leaderboard.leaderboard_verdicts`): ``different`` or ``inconclusive``,
``reference`` for the reference, ``not judged: …`` where the rules judge nothing (a sweep of no
preset with rules, a norm the rules do not name, too few seeds, a failed setup check). Rows are
listed by mean score.

A norm that cannot run in a cell is ``n/a`` with the reason, never dropped. The reason is a
config-level rule (`refusal`: a decoder norm that mixes time steps; batch statistics at one sample
per device, as `normbench.run.loop.validate` refuses), else the error of the runs' summaries (a job refused
by config validation writes ``{"status": "failed", "error": ...}``). Every cell lists every norm
met in the runs, and no other (a sweep of 3 norms is a table of 3): a norm that ran in another cell
but not in this one is ``n/a`` when a rule refuses it there and ``not run`` otherwise (on
translation, a norm that mixes time steps is listed as the encoder-only row it can run as).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import numpy as np

from normbench.analysis.judging.stats import MIN_SEEDS_FOR_INTERVAL
from normbench.analysis.leaderboard.leaderboard_labels import (
    ENCODER_ONLY_DECODER,
    IMAGES,
    TRANSLATION,
    dataset_label,
    label,
    model_label,
    norm_of,
    over_of,
    stack_norms,
    swept_norm,
)
from normbench.analysis.loading.runs import Run, check_seeds_only
from normbench.base.errors import ConfigError

CONFIDENCE = 0.95
TAIL = 0.1
"""The end of training: the last 10 % of a run's steps."""

METRICS = {IMAGES: ("val/acc",), TRANSLATION: ("test/bleu", "val/bleu")}
THROUGHPUT = {IMAGES: "perf/samples_per_s", TRANSLATION: "perf/tokens_per_s"}
REFERENCE = {IMAGES: "bn", TRANSLATION: "ln"}
TRAIN_LOSS = "train/loss"

NA, NOT_RUN, NO_RESULT = "n/a", "not run", "no result"
NO_RULES = "not judged: no rules"
"""A scored row's verdict until the leaderboard's rules judge it
(`normbench.analysis.leaderboard.leaderboard_verdicts`)."""


@dataclass(frozen=True)
class Headline:
    column: str
    diagnostic: str
    metrics: tuple[str, ...]
    """Metric names tried in order (the first the run logged is used)."""
    meaning: str


HEADLINES = (
    Headline("loss_range", "landscape", ("loss_range",), "loss range along the step (Santurkar et al. 2018, Fig. 4a)"),
    Headline("beta", "beta_smoothness", ("beta",), "effective beta-smoothness (Santurkar et al. 2018, Fig. 4c)"),
    Headline("grad_var", "grad_variance", ("total",), "total variance of the mini-batch gradient"),
    Headline("bn_mean_dist", "bn_stats", ("first_layer/mean_dist",),
             "first norm layer: RMS over channels of (mu_B - mu)/sigma"),
    Headline(
        "bn_var_dist",
        "bn_stats",
        ("first_layer/var_dist", "first_layer/psi2_dist"),
        "first norm layer: RMS over channels of (s2_B - sigma2)/sigma2 (PowerNorm: psi2)",
    ),
)
DIAG_PREFIXES = ("", "diag/")
"""Diagnostics log as ``diag/<name>/<metric>`` or, renamed, ``<name>/<metric>``; both are read."""


def diag_key(keys: Collection[str], name: str, metric: str) -> str | None:
    """The key under which diagnostic ``name`` logged ``metric`` among ``keys``, or None."""
    for prefix in DIAG_PREFIXES:
        key = f"{prefix}{name}/{metric}"
        if key in keys:
            return key
    return None


def headline_key(keys: Collection[str], headline: Headline) -> str | None:
    for metric in headline.metrics:
        key = diag_key(keys, headline.diagnostic, metric)
        if key is not None:
            return key
    return None


# ---------------------------------------------------------------------------------------------
# Reading runs


def task_of(run: Run) -> str:
    """``translation`` when the data set gives sentences (`dataset_input_kind`), else ``images``."""
    from normbench.data.registry import dataset_input_kind

    return TRANSLATION if dataset_input_kind(run.record.dataset.name) == "sequence" else IMAGES


def cell_of(run: Run) -> tuple[str, str]:
    """(model, data set) as they ran: `model_label` (``ResNet8`` for resnet20 at depth 8) and
    `dataset_label` (``Multi30k de-en (subset)`` for the iwslt14 loader on ``de-en-subset``)."""
    model, dataset = run.record.model, run.record.dataset
    root = dataclasses.asdict(dataset).get("root")  # the keys of each one's own dataclass
    depth = dataclasses.asdict(model).get("depth")
    folder = PurePath(str(root)).name if root else ""
    return model_label(model.name, depth), dataset_label(dataset.name, folder)


# ---------------------------------------------------------------------------------------------
# Config-level rules


@functools.cache
def _mixes_positions(norm_json: str) -> bool:
    from normbench.norms import norm_factory
    from normbench.norms.probes import mixes_positions

    return bool(mixes_positions(norm_factory(json.loads(norm_json)), training=True))


@functools.cache
def _batch_statistics(norm_json: str) -> bool:
    from normbench.norms import norm_factory
    from normbench.norms.probes import uses_batch_statistics

    return bool(uses_batch_statistics(norm_factory(json.loads(norm_json)), 8, "NCHW"))


def _norm_json(norm: Any) -> str:
    """A typed norm config as a key for the caches above."""
    return json.dumps(dataclasses.asdict(norm), sort_keys=True)


def refusal(run: Run) -> str | None:
    """Why the norm of ``run`` cannot run its cell, or None. Two rules:

    - translation: the decoder's norm (``model.decoder_norm``, else ``norm``) mixes time steps in
      training (the behavioural probe ``mixes_positions``): the decoder would see future target
      tokens, so its numbers are not a causal model's;
    - images: the norm uses batch statistics and the batch holds one sample per device
      (`normbench.run.loop.validate.check_norm_in_model` refuses such a job)."""
    try:
        norm = run.record.norm
        if task_of(run) == TRANSLATION:
            decoder = run.stack_norm("decoder")
            if _mixes_positions(_norm_json(decoder)):
                return (
                    f"decoder norm {decoder.name} mixes time steps in training: the decoder would see "
                    f"future target tokens (it runs in the encoder with model.decoder_norm=ln: the row "
                    f"{label(decoder.name, ENCODER_ONLY_DECODER)})"
                )
            return None
        world = int(run.resolved.get("world_size") or 1)  # what ran: one process unless the record says more
        if run.record.batch_size // world == 1 and _batch_statistics(_norm_json(norm)):
            return f"norm={norm.name} normalizes with batch statistics but the batch holds one sample per device"
    except (KeyError, ValueError, TypeError):  # a norm this checkout does not register (ConfigError): no rule
        return None
    return None


# ---------------------------------------------------------------------------------------------
# Aggregation


@dataclass(frozen=True)
class Interval:
    """Mean and two-sided t-interval of ``n`` values (``lo``/``hi`` infinite when n = 1)."""

    mean: float
    lo: float
    hi: float
    n: int


def t_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """mean ± t_{(1+c)/2, n−1}·s/√n over the finite ``values`` (s: sample standard deviation)."""
    from normbench.analysis.judging.stats import t_interval as mean_interval

    v = np.asarray([float(x) for x in values], dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    return Interval(*mean_interval(v, 1 - confidence), int(v.size))


def end_value(run: Run, key: str, tail: float = TAIL) -> float:
    """Mean of ``key``'s finite values logged at steps ≥ (1 − tail)·(the run's last step); the
    last logged value when none is that late; NaN when never logged."""
    steps, values = run.series(key)
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    if not len(values):
        return math.nan
    late = steps >= (1 - tail) * max(run.final_step, int(steps.max()))
    return float(values[late].mean()) if late.any() else float(values[-1])


def throughput_of(run: Run, key: str) -> float:
    """The run's median over epochs of ``key`` (its summary value when no history has it)."""
    _, values = run.series(key)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else run.final(key)


def metric_key(task: str, runs: Sequence[Run]) -> str:
    for key in METRICS[task]:
        if any(key in r.summary or key in r.metric_keys() for r in runs):
            return key
    return METRICS[task][0]


@dataclass
class Row:
    model: str
    dataset: str
    norm: str
    task: str
    metric: str
    score: Interval = field(default_factory=lambda: Interval(math.nan, math.nan, math.nan, 0))
    seeds: list[int] = field(default_factory=list)
    train_loss: float = math.nan
    throughput: float = math.nan
    relative_throughput: float = math.nan
    diverged: int = 0
    failed: int = 0
    verdict: str = NO_RESULT
    reason: str = ""
    headlines: dict[str, float] = field(default_factory=dict)
    runs: int = 0
    swept: str = ""
    """The norm the row compares (the encoder's in an encoder-only row; `swept_norm`)."""
    over: str = ""
    """What the norm normalizes over in this cell's layout (`over_of`)."""


def _mean(values: Iterable[float]) -> float:
    v = np.asarray(list(values), dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def _row(model: str, dataset: str, norm: str, task: str, metric: str, runs: list[Run], tail: float) -> Row:
    encoder, decoder = stack_norms(runs[0])
    row = Row(model, dataset, norm, task, metric, runs=len(runs), swept=encoder, over=over_of(task, encoder, decoder))
    row.diverged = sum(r.status == "diverged" for r in runs)
    finished = [r for r in runs if r.status == "finished"]
    row.failed = len(runs) - len(finished) - row.diverged
    rule = refusal(runs[0])
    if rule is not None:
        row.verdict, row.reason = NA, rule
        return row
    if not finished:
        errors = [str(r.summary.get("error") or "") for r in runs if r.status not in ("finished", "diverged")]
        if row.diverged:
            row.reason = f"all {row.diverged} runs diverged"
        elif errors:
            row.verdict = NA
            row.reason = next((e for e in errors if e), f"runs {runs[0].status} without an error message")
        return row
    row.seeds = sorted(r.seed for r in finished)
    row.score = t_interval(r.final(metric) for r in finished)
    if row.score.n == 0:
        row.reason = f"no finite {metric} in the {len(finished)} finished runs"
    elif row.score.n < MIN_SEEDS_FOR_INTERVAL:
        row.score = dataclasses.replace(row.score, lo=math.nan, hi=math.nan)
        row.reason = f"too few seeds (n = {row.score.n}; an interval needs {MIN_SEEDS_FOR_INTERVAL})"
    row.train_loss = _mean(r.final(TRAIN_LOSS) for r in finished)
    row.throughput = _mean(throughput_of(r, THROUGHPUT[task]) for r in finished)
    for h in HEADLINES:
        vals = [end_value(r, k, tail) for r in finished if (k := headline_key(r.metric_keys(), h))]
        if vals:
            row.headlines[h.column] = _mean(vals)
    return row


def _missing_row(model: str, dataset: str, norm: str, task: str, metric: str, like: Run) -> Row:
    """A norm met elsewhere in the runs but not run in this cell: n/a when a rule refuses it. On
    translation a norm the decoder rule refuses is the row it can run as: encoder only, LN decoder."""
    config, decoder = {**like.config, "norm": {"name": norm}}, norm
    if task == TRANSLATION:
        config["model"] = {**like.config["model"], "encoder_norm": None, "decoder_norm": None}
        if refusal(Run("rule", config, [])) is not None:
            decoder = config["model"]["decoder_norm"] = ENCODER_ONLY_DECODER
    reason = refusal(Run("rule", config, []))
    row = Row(model, dataset, label(norm, decoder), task, metric, verdict=NA if reason else NOT_RUN, swept=norm)
    row.reason, row.over = reason or "", over_of(task, norm, decoder)
    return row


def leaderboard(runs: Sequence[Run], tail: float = TAIL) -> list[Row]:
    """One `Row` per (model, data set, norm), cells in order of appearance, rows by mean score
    (n/a and not-run rows last); the scored rows' verdict `NO_RULES` until the rules judge them."""
    if not runs:
        raise ConfigError("no runs to build a leaderboard from")
    all_norms = list(dict.fromkeys(swept_norm(r) for r in runs))
    cells: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        cells.setdefault(cell_of(r), []).append(r)
    out: list[Row] = []
    for (model, dataset), members in cells.items():
        task = task_of(members[0])
        metric = metric_key(task, members)
        by_norm: dict[str, list[Run]] = {}
        for r in members:
            by_norm.setdefault(norm_of(r), []).append(r)
        for n, group in by_norm.items():  # a row's runs are seeds of one setting, never pooled settings
            check_seeds_only(group, f"norm {n} on {model} / {dataset}")
        rows = [_row(model, dataset, n, task, metric, group, tail) for n, group in by_norm.items()]
        # a norm whose only runs here are refused (a time-mixing decoder) also gets the row it can run as
        ran = {swept_norm(g[0]) for g in by_norm.values() if task == IMAGES or refusal(g[0]) is None}
        rows += [_missing_row(model, dataset, n, task, metric, members[0]) for n in all_norms if n not in ran]
        for r in rows:
            if r.verdict not in (NA, NOT_RUN) and r.score.n > 0:
                r.verdict = NO_RULES
        ref = next((r for r in rows if r.norm == REFERENCE[task] and math.isfinite(r.throughput)), None)
        for r in rows:
            if ref is not None:
                r.relative_throughput = r.throughput / ref.throughput
        order = {NO_RESULT: 1, NA: 2, NOT_RUN: 3}  # scored rows first, by mean score
        rows.sort(key=lambda r: (order.get(r.verdict, 0), -r.score.mean if math.isfinite(r.score.mean) else 0.0))
        out += rows
    return out
