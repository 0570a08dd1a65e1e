"""Figures from runs: read local or W&B runs, aggregate over seeds, draw the papers' figures,
and judge their claims. ``scripts/figures.py`` is the command-line front end.

One figure function per experiment preset (`FIGURES`); a ``<preset>_cpu`` variant uses its
preset's function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from normbench.analysis import batch_size, powernorm, santurkar, transformer
from normbench.analysis.claims import FULL_SCALE, Claim, Scale
from normbench.analysis.plot import FigureResult, write_outputs
from normbench.analysis.runs import Run, load_local_runs, load_wandb_runs
from normbench.analysis.santurkar_landscape import ICS_KEY, figure3, figure4
from normbench.errors import ConfigError

FigureFn = Callable[[Sequence[Run], Scale], list[FigureResult]]


def santurkar_vgg(runs: Sequence[Run], scale: Scale) -> list[FigureResult]:
    """Santurkar et al. 2018, Figs. 1-4 (Fig. 3 when ICS was measured)."""
    out = [santurkar.figure1(runs, scale), santurkar.figure2(runs, scale), figure4(runs, scale)]
    if any(ICS_KEY.match(k) for r in runs for k in r.metric_keys()):
        out.insert(2, figure3(runs, scale))
    return out


FIGURES: dict[str, tuple[FigureFn, Scale]] = {
    "santurkar_vgg": (santurkar_vgg, santurkar.CPU_SCALE),
    "powernorm_stats": (powernorm.powernorm_stats, powernorm.CPU_SCALE),
    "powernorm_mt": (transformer.powernorm_mt, transformer.CPU_SCALE),
    "rmsnorm_speed": (transformer.rmsnorm_speed, transformer.CPU_SCALE),
    "gn_batch_size": (batch_size.gn_batch_size, batch_size.CPU_SCALE),
    "ln_axes": (transformer.ln_axes, transformer.CPU_SCALE),
}
"""Each preset's figure function and the scale of its ``_cpu`` variant (the full preset: the
paper's; a CPU variant: far shorter or smaller — its failed orderings read "not reproduced at this
scale", never "contradicted")."""
SCALE_SUFFIXES = ("_cpu",)
FIGURE_KEYS: dict[str, re.Pattern[str]] = {
    "santurkar_vgg": re.compile(
        r"^(train/batch_(acc|loss)|val/acc|landscape/.*|predictiveness/.*|beta_smoothness/.*|ics/.*"
        r"|activations/.*/post_q\d\d)$"
    ),
    "powernorm_stats": re.compile(r"^bn_stats/first_layer/.*$"),
    "powernorm_mt": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s)$"),
    "rmsnorm_speed": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s)$"),
    "gn_batch_size": re.compile(r"^val/acc$"),
    "ln_axes": re.compile(r"^(val/loss|val/bleu|test/bleu|perf/tokens_per_s)$"),
}
"""The history keys each preset's figures plot: what `normbench-figures` fetches from W&B."""


def figure_keys(preset: str) -> Callable[[Iterable[str]], list[str]]:
    """The keys of a run (its W&B summary's keys) that ``preset``'s figures plot."""
    pattern = FIGURE_KEYS[_base(preset)]
    return lambda keys: [k for k in keys if pattern.match(k)]


def _base(preset: str) -> str:
    for suffix in SCALE_SUFFIXES:
        preset = preset.removesuffix(suffix)
    return preset


def figure_fn(preset: str) -> tuple[FigureFn, Scale]:
    """The figure function of ``preset`` (``santurkar_vgg`` or ``santurkar_vgg_cpu``) and its scale."""
    base = _base(preset)
    if base not in FIGURES:
        valid = ", ".join(sorted(FIGURES) + sorted(f + s for f in FIGURES for s in SCALE_SUFFIXES))
        raise ConfigError(f"unknown preset {preset!r}; valid choices: {valid}")
    fn, cpu_scale = FIGURES[base]
    return fn, (FULL_SCALE if base == preset else cpu_scale)


def make_figures(preset: str, runs: Sequence[Run]) -> list[FigureResult]:
    """The preset's figures and claims from ``runs`` (failed runs without metrics left out)."""
    fn, scale = figure_fn(preset)
    usable = [r for r in runs if r.history]
    if not usable:
        raise ConfigError(f"no runs with metrics for preset {preset!r}")
    return fn(usable, scale)


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
    "write_outputs",
]
