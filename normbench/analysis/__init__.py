"""Figures from runs: read local or W&B runs, aggregate over seeds, draw the papers' figures,
and judge their claims. ``scripts/figures.py`` is the command-line front end.

One figure function per experiment preset (`FIGURES`); a ``<preset>_cpu`` variant uses its
preset's function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from normbench.analysis.batch_size import gn_batch_size
from normbench.analysis.claims import Claim
from normbench.analysis.plot import FigureResult, write_outputs
from normbench.analysis.powernorm import powernorm_stats
from normbench.analysis.runs import Run, load_local_runs, load_wandb_runs
from normbench.analysis.santurkar import santurkar_vgg
from normbench.analysis.transformer import ln_axes, powernorm_mt, rmsnorm_speed
from normbench.errors import ConfigError

FigureFn = Callable[[Sequence[Run]], list[FigureResult]]

FIGURES: dict[str, FigureFn] = {
    "santurkar_vgg": santurkar_vgg,
    "powernorm_stats": powernorm_stats,
    "powernorm_mt": powernorm_mt,
    "rmsnorm_speed": rmsnorm_speed,
    "gn_batch_size": gn_batch_size,
    "ln_axes": ln_axes,
}
SCALE_SUFFIXES = ("_cpu",)


def figure_fn(preset: str) -> FigureFn:
    """The figure function of ``preset`` (``santurkar_vgg`` or ``santurkar_vgg_cpu``)."""
    base = preset
    for suffix in SCALE_SUFFIXES:
        base = base.removesuffix(suffix)
    if base not in FIGURES:
        valid = ", ".join(sorted(FIGURES) + sorted(f + s for f in FIGURES for s in SCALE_SUFFIXES))
        raise ConfigError(f"unknown preset {preset!r}; valid choices: {valid}")
    return FIGURES[base]


def make_figures(preset: str, runs: Sequence[Run]) -> list[FigureResult]:
    """The preset's figures and claims from ``runs`` (failed runs without metrics left out)."""
    fn = figure_fn(preset)
    usable = [r for r in runs if r.history]
    if not usable:
        raise ConfigError(f"no runs with metrics for preset {preset!r}")
    return fn(usable)


__all__ = [
    "FIGURES",
    "Claim",
    "FigureResult",
    "Run",
    "figure_fn",
    "load_local_runs",
    "load_wandb_runs",
    "make_figures",
    "write_outputs",
]
