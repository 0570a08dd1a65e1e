"""Figures from runs: read local or W&B runs, aggregate over seeds, draw the papers' figures,
and judge their claims. ``scripts/figures.py`` is the command-line front end.

One figure function per experiment preset (`FIGURES`); a ``<preset>_cpu`` variant uses its
preset's function. The claims are judged by `normbench.analysis.claims.judge` on the rules of the
preset (``normbench/rules/<preset>.yaml``), with the measures the analysis modules register.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from normbench.analysis import (
    batch_size,
    eval_stats,
    groups,
    lp_batch,
    lr_range,
    measures,
    powernorm,
    regularization,
    santurkar,
    saturation,
    transformer,
)
from normbench.analysis.claims import Claim, judge
from normbench.analysis.plot import FigureResult, write_outputs
from normbench.analysis.runs import Run, load_local_runs, load_wandb_runs
from normbench.analysis.santurkar_landscape import ICS_KEY, figure3, figure4
from normbench.base.errors import ConfigError
from normbench.rules import SCALE_SUFFIXES, base_preset

FigureFn = Callable[[Sequence[Run]], list[FigureResult]]
assert measures  # registers the shared measures


def santurkar_vgg(runs: Sequence[Run]) -> list[FigureResult]:
    """Santurkar et al. 2018, Figs. 1-4 (Fig. 3 when ICS was measured)."""
    out = [santurkar.figure1(runs), santurkar.figure2(runs), figure4(runs)]
    if any(ICS_KEY.match(k) for r in runs for k in r.metric_keys()):
        out.insert(2, figure3(runs))
    return out


FIGURES: dict[str, FigureFn] = {
    "santurkar_vgg": santurkar_vgg,
    "powernorm_stats": powernorm.powernorm_stats,
    "powernorm_grads": powernorm.powernorm_grads,
    "powernorm_mt": transformer.powernorm_mt,
    "powernorm_chain": transformer.powernorm_chain,
    "rmsnorm_speed": transformer.rmsnorm_speed,
    "rmsnorm_time": transformer.rmsnorm_time,
    "prms_width": transformer.prms_width,
    "gn_batch_size": batch_size.gn_batch_size,
    "gn_groups": groups.gn_groups,
    "bn_eval_stats": eval_stats.bn_eval_stats,
    "bn_dropout": regularization.bn_dropout,
    "bn_saturation": saturation.bn_saturation,
    "bn_lr_range": lr_range.bn_lr_range,
    "bn_padding": transformer.bn_padding,
    "bn_lp": lp_batch.bn_lp,
    "ln_axes": transformer.ln_axes,
}
"""Each preset's figure function (its ``_cpu`` variant uses the same one)."""
FIGURE_KEYS: dict[str, re.Pattern[str]] = {
    "santurkar_vgg": re.compile(
        r"^(train/batch_(acc|loss)|val/acc|landscape/.*|predictiveness/.*|beta_smoothness/.*|ics/.*"
        r"|activations/.*/post_q\d\d)$"
    ),
    "powernorm_stats": re.compile(r"^bn_stats/first_layer/.*$"),
    "powernorm_grads": re.compile(r"^bn_stats/first_layer/.*$"),
    "powernorm_mt": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s|train/batch_loss)$"),
    "powernorm_chain": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s|train/batch_loss)$"),
    "rmsnorm_speed": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s|perf/train_s|train/batch_loss)$"),
    "rmsnorm_time": re.compile(r"^(val/loss|perf/train_s|train/batch_loss)$"),
    "prms_width": re.compile(r"^(val/loss|val/bleu|test/bleu|train/batch_loss)$"),
    "gn_batch_size": re.compile(r"^(val/acc|train/loss)$"),  # train/loss: its plateau check and loss panel
    "gn_groups": re.compile(r"^(val/acc|train/loss)$"),
    "bn_eval_stats": re.compile(r"^(val/acc|val/acc_population|eval_stats/first_layer/.*)$"),
    "bn_dropout": re.compile(r"^(val/acc|train_eval/acc)$"),
    "bn_saturation": re.compile(r"^saturation/.*$"),
    "bn_lr_range": re.compile(r"^val/acc$"),
    "bn_padding": re.compile(
        r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s|bn_stats/first_layer/.*|token_scale/(first_layer/.*|padding_share))$"
    ),
    "bn_lp": re.compile(r"^(train/batch_(acc|loss)|val/acc|landscape/.*|predictiveness/.*|beta_smoothness/.*)$"),
    "ln_axes": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s|train/batch_loss)$"),
}
"""The history keys each preset's figures plot: what `normbench-figures` fetches from W&B."""


def figure_keys(preset: str) -> Callable[[Iterable[str]], list[str]]:
    """The keys of a run (its W&B summary's keys) that ``preset``'s figures plot."""
    pattern = FIGURE_KEYS[base_preset(preset)]
    return lambda keys: [k for k in keys if pattern.match(k)]


def figure_fn(preset: str) -> FigureFn:
    """The figure function of ``preset`` (``santurkar_vgg`` or ``santurkar_vgg_cpu``)."""
    base = base_preset(preset)
    if base not in FIGURES:
        valid = ", ".join(sorted(FIGURES) + sorted(f + s for f in FIGURES for s in SCALE_SUFFIXES))
        raise ConfigError(f"unknown preset {preset!r}; valid choices: {valid}")
    return FIGURES[base]


def usable_runs(preset: str, runs: Sequence[Run]) -> list[Run]:
    """The runs that figures and claims are made from: those with metrics (a failed run without
    any is left out); a `ConfigError` when none has any."""
    usable = [r for r in runs if r.history]
    if not usable:
        raise ConfigError(f"no runs with metrics for preset {preset!r}")
    return usable


def make_figures(preset: str, runs: Sequence[Run], claims: Sequence[Claim] | None = None) -> list[FigureResult]:
    """The preset's figures from ``runs`` (`usable_runs`), each with the claims of its figure:
    ``claims``, or the preset's claims judged by its rules on the runs. Each claim goes with the
    figure its rule names (the first figure when it names none drawn)."""
    fn = figure_fn(preset)
    usable = usable_runs(preset, runs)
    results = fn(usable)
    by_name = {res.name: res for res in results}
    for claim in judge(preset, usable) if claims is None else claims:
        by_name.get(claim.figure, results[0]).claims.append(claim)
    return results


__all__ = [
    "FIGURES",
    "Claim",
    "FigureResult",
    "Run",
    "figure_fn",
    "figure_keys",
    "load_local_runs",
    "load_wandb_runs",
    "make_figures",
    "usable_runs",
    "write_outputs",
]
