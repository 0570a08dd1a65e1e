"""The leaderboard's verdicts from its rules (``normbench/rules/leaderboard.yaml``, issue 43 item 7):
each norm against its cell's reference (bn on images, ln on translation), two-sided (relation
``differs``), Welch's interval for the difference, Holm within each cell (the rules' ``cell``), setup
checks that gate the cell's claims. A row takes the verdict of the claim whose arm ``a`` selects
its runs (``different`` / ``inconclusive`` / ``not judged: …``; several such claims that disagree:
each one's, named); a row only ever the reference (arm ``b``) reads ``reference``; a scored row no
claim names keeps ``not judged: no rules``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from normbench.analysis.figures.figures_cli import check_rules, write_preset_forest
from normbench.analysis.judging.claims import Claim, csv_row, judge_rows, write_claims
from normbench.analysis.judging.evidence import vouch_rows
from normbench.analysis.judging.per_run import Row as PerRunRow
from normbench.analysis.judging.per_run import judged_here, per_run_rows, vouch_table, write_per_run
from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.judging.stats import NOT_JUDGED
from normbench.analysis.leaderboard.leaderboard import NA, NO_RULES, NOT_RUN, Row, cell_of
from normbench.analysis.leaderboard.leaderboard_labels import norm_of
from normbench.analysis.loading.runs import Run, matching
from normbench.analysis.loading.table_digest import stamp_digest
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
    No rules: the rows keep `NO_RULES`, and nothing is returned. Runs of another preset, or made
    under other rules, are refused in one line (`check_rules`, as ``normbench-figures`` does).
    ``pilot``: the runs are the rules' pilot seeds, judged for planning only (``normbench-plan``
    reads the ``per_run.csv``)."""
    rules = load_rules(preset) if preset else None
    if rules is None or preset is None:
        return [], []
    check_rules(preset, runs)
    table = per_run_rows(preset, runs)
    if table:  # what normbench-figures refuses of the same runs (a run copied under a new seed, ...)
        where = f"the per-run values of the {preset} runs"
        vouch_rows(table, where)
        vouch_table(table, list(table[0]), rules, preset, where)
    claims = judge_rows(preset, table, pilot)
    by_id = {c.id: c for c in claims}
    named: dict[tuple[tuple[str, str], str], dict[tuple[str, bool], tuple[Claim, bool]]] = {}
    for rule in rules.claims:
        if not judged_here(rule.variants, preset):
            continue
        for arm, compared in ((rule.a, True), (rule.b, False)):
            for run in matching(runs, arm.select):
                named.setdefault((cell_of(run), norm_of(run)), {})[(rule.id, compared)] = (by_id[rule.id], compared)
    for row in rows:
        if row.verdict not in (NA, NOT_RUN) and row.score.n > 0:
            row.verdict, note = row_verdict(list(named.get(((row.model, row.dataset), row.norm), {}).values()))
            row.reason = "; ".join(x for x in (row.reason, note) if x)
    return claims, table


def row_verdict(named: Sequence[tuple[Claim, bool]]) -> tuple[str, str]:
    """A row's verdict and note from the claims that name its norm, each with whether the norm is
    the compared arm (``a``) or the reference (``b``). The compared arm's verdicts win over
    `REFERENCE_VERDICT`, and none overwrites another: one wording when the claims agree, else each
    claim's (``supported (id); inconclusive (id)``). Named by none: `NO_RULES`."""
    compared = [claim for claim, is_a in named if is_a]
    if not compared:
        return (REFERENCE_VERDICT, "") if named else (NO_RULES, "")
    notes = "; ".join(dict.fromkeys(c.note for c in compared if c.verdict == NOT_JUDGED and c.note))
    wordings = list(dict.fromkeys(c.verdict for c in compared))
    if len(wordings) == 1:
        return wordings[0], notes
    return "; ".join(f"{c.verdict} ({c.id})" for c in compared), notes


def write_judged(preset: str, claims: Sequence[Claim], table: Sequence[PerRunRow], out: Path) -> list[Path]:
    """The forest plot, ``claims.csv`` / ``claims.md`` and ``per_run.csv`` of the leaderboard's
    rules under ``out`` (as ``normbench-figures`` writes a paper preset's)."""
    forest = write_preset_forest(preset, [csv_row(c) for c in claims], out)
    paths = [*forest, *write_claims(claims, out), write_per_run(table, out / "per_run.csv")]
    return paths + [p for p in [stamp_digest(out)] if p is not None]  # the table as the runs gave it
