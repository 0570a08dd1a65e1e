"""The leaderboard's verdicts from its rules (``normbench/rules/leaderboard.yaml``, issue 43 item 7):
each norm against its cell's reference (bn on images, ln on translation), two-sided (relation
``differs``), Welch's interval for the difference, Holm within each cell (the rules' ``cell``), setup
checks that gate the cell's claims. A row takes the verdict of the claim whose arm ``a`` selects
its runs (``different`` / ``inconclusive`` / ``not judged: …``); the reference's row reads
``reference``; a scored row no claim names keeps ``not judged: no rules``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from normbench.analysis.figures.figures_cli import write_preset_forest
from normbench.analysis.judging.claims import Claim, csv_row, judge_rows, write_claims
from normbench.analysis.judging.per_run import Row as PerRunRow
from normbench.analysis.judging.per_run import judged_here, per_run_rows, write_per_run
from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.judging.stats import NOT_JUDGED
from normbench.analysis.leaderboard.leaderboard import NA, NO_RULES, NOT_RUN, Row, cell_of
from normbench.analysis.leaderboard.leaderboard_labels import norm_of
from normbench.analysis.loading.runs import Run, matching
from normbench.base.errors import ConfigError

REFERENCE_VERDICT = "reference"


def preset_of(runs: Sequence[Run]) -> str | None:
    """The preset the runs were made by (each summary's ``rules.preset``), when they share one."""
    presets = {(r.summary.get("rules") or {}).get("preset") for r in runs}
    if len(presets) > 1:
        named = sorted(str(p) for p in presets)
        raise ConfigError(f"the runs come from several presets ({', '.join(named)}): pass --preset, "
                          "or read one preset's runs")  # fmt: skip
    return presets.pop() if presets else None


def apply_rules(
    rows: Sequence[Row], runs: Sequence[Run], preset: str | None, pilot: bool = False
) -> tuple[list[Claim], list[PerRunRow]]:
    """Set each scored row's verdict from ``preset``'s rules (judged over ``runs``); returns the
    claims and checks (``claims.csv``, the forest plot) and the per-run table they were judged on.
    No rules: the rows keep `NO_RULES`, and nothing is returned. ``pilot``: the runs are the rules'
    pilot seeds, judged for planning only (``normbench-plan`` reads the ``per_run.csv``)."""
    rules = load_rules(preset) if preset else None
    if rules is None or preset is None:
        return [], []
    table = per_run_rows(preset, runs)
    claims = judge_rows(preset, table, pilot)
    by_id = {c.id: c for c in claims}
    verdicts: dict[tuple[tuple[str, str], str], tuple[str, str]] = {}
    for rule in rules.claims:
        if not judged_here(rule.variants, preset):
            continue
        claim = by_id[rule.id]
        for run in matching(runs, rule.b.select):
            verdicts[(cell_of(run), norm_of(run))] = (REFERENCE_VERDICT, "")
        for run in matching(runs, rule.a.select):
            verdicts[(cell_of(run), norm_of(run))] = (claim.verdict, claim.note if claim.verdict == NOT_JUDGED else "")
    for row in rows:
        if row.verdict not in (NA, NOT_RUN) and row.score.n > 0:
            row.verdict, note = verdicts.get(((row.model, row.dataset), row.norm), (NO_RULES, ""))
            row.reason = "; ".join(x for x in (row.reason, note) if x)
    return claims, table


def write_judged(preset: str, claims: Sequence[Claim], table: Sequence[PerRunRow], out: Path) -> list[Path]:
    """The forest plot, ``claims.csv`` / ``claims.md`` and ``per_run.csv`` of the leaderboard's
    rules under ``out`` (as ``normbench-figures`` writes a paper preset's)."""
    forest = write_preset_forest(preset, [csv_row(c) for c in claims], out)
    return [*forest, *write_claims(claims, out), write_per_run(table, out / "per_run.csv")]
