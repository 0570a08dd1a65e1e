"""Figures from runs: read local or W&B runs, aggregate over seeds, draw the papers' figures,
and judge their claims. ``normbench-figures`` (`normbench.analysis.figures.figures_cli`) is the command-line
front end.

What a preset draws is data: the ``figures:`` block of its rules (``normbench/rules/<preset>.yaml``),
drawn by `normbench.analysis.figures.figure_spec.draw_preset` (figures that follow the common pattern as
specs, those with real logic through the functions registered here); a ``<preset>_cpu`` variant
draws its preset's. The claims are judged by `normbench.analysis.judging.claims.judge` on the same rules,
with the measures of `normbench.analysis.judging.measures` and the code figures' modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

from normbench.analysis.figures import groups, lp_batch, santurkar, transformer
from normbench.analysis.figures.figure_spec import FigureFn, draw_preset, register_code
from normbench.analysis.figures.plot import FigureResult, write_outputs
from normbench.analysis.figures.santurkar_landscape import ICS_KEY, figure3, figure4
from normbench.analysis.judging import measures
from normbench.analysis.judging.claims import Claim, judge
from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.loading.runs import Run, load_local_runs, load_wandb_runs
from normbench.base.errors import ConfigError
from normbench.base.output import warn
from normbench.rules import SCALE_SUFFIXES, base_preset, list_rule_presets

assert measures  # registers the shared measures and series


def santurkar_vgg(runs: Sequence[Run]) -> list[FigureResult]:
    """Santurkar et al. 2018, Figs. 1-4 (Fig. 3 when ICS was measured)."""
    out = [santurkar.figure1(runs), santurkar.figure2(runs), figure4(runs)]
    if any(ICS_KEY.match(k) for r in runs for k in r.metric_keys()):
        out.insert(2, figure3(runs))
    return out


for _name, _fn in {
    "santurkar_vgg": santurkar_vgg,
    "bn_lp": lp_batch.bn_lp,
    "gn_groups": groups.gn_groups,
    "powernorm_mt": transformer.powernorm_mt,
    "powernorm_chain": transformer.powernorm_chain,
    "rmsnorm_speed": transformer.rmsnorm_speed,
    "rmsnorm_time": transformer.rmsnorm_time,
    "prms_width": transformer.prms_width,
    "bn_padding": transformer.bn_padding,
    "ln_axes": transformer.ln_axes,
}.items():  # the figures with real logic (a rules' figures.draw names them by ``code``)
    register_code(_name, _fn)

DRAWN_ELSEWHERE = {"leaderboard": "normbench-leaderboard"}
"""Presets with rules whose table and figure another command draws (the leaderboard's rows per cell)."""

FIGURES: dict[str, FigureFn] = {p: partial(draw_preset, p) for p in list_rule_presets() if p not in DRAWN_ELSEWHERE}
"""Each paper preset with rules → its figures (`draw_preset`: its rules' ``figures:`` block, parsed when
drawn, so a bad block is a one-line error of ``normbench-figures``, not of the import; its ``_cpu``
variant draws the same)."""


def figure_keys(preset: str) -> Callable[[Iterable[str]], list[str]]:
    """The keys of a run (its W&B summary's keys) that ``preset``'s figures and claims read: its
    rules' ``figures.fetch`` (what `normbench-figures` fetches from W&B)."""
    figure_fn(preset)
    rules = load_rules(preset)
    if rules is None or rules.figures is None:
        raise ConfigError(f"preset {preset!r} has no figures block in its rules")
    pattern = rules.figures.fetch
    return lambda keys: [k for k in keys if pattern.match(k)]


def figure_fn(preset: str) -> FigureFn:
    """The figure function of ``preset`` (``santurkar_vgg`` or ``santurkar_vgg_cpu``)."""
    base = base_preset(preset)
    if base in DRAWN_ELSEWHERE:
        raise ConfigError(
            f"{preset}'s table, figure and claims are drawn by {DRAWN_ELSEWHERE[base]}, not normbench-figures"
        )
    if base not in FIGURES:
        valid = ", ".join(sorted(FIGURES) + sorted(f + s for f in FIGURES for s in SCALE_SUFFIXES))
        raise ConfigError(f"unknown preset {preset!r}; valid choices: {valid}")
    return FIGURES[base]


def usable_runs(preset: str, runs: Sequence[Run]) -> list[Run]:
    """The runs that figures and claims are made from: those with metrics (a failed run without
    any is left out, named in one warning: how many, which); a `ConfigError` when none has any."""
    usable = [r for r in runs if r.history]
    if not usable:
        raise ConfigError(f"no runs with metrics for preset {preset!r}")
    if empty := [r.source for r in runs if not r.history]:
        more = f" and {len(empty) - 3} more" if len(empty) > 3 else ""
        warn(f"{len(empty)} of {len(runs)} runs hold no metrics (an empty metrics.jsonl) and are left out of "
             f"{preset}'s figures and claims: {', '.join(empty[:3])}{more}")  # fmt: skip
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
    "FigureFn",
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
