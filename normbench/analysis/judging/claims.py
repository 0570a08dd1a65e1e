"""A preset's claims, judged from its runs by the rules fixed before them (``normbench/rules/``,
parsed by `normbench.analysis.judging.rules_schema`).

A rule names two arms (config selectors), a *measure* (a function of one run, registered by the
preset's analysis module with `measure`), the relation the paper claims between the arms
(``greater`` / ``less``: a directional claim; ``equivalent``: equal within ``margin``) and the
test (`normbench.analysis.judging.stats.TESTS`). Judging reads the per-run table
(`normbench.analysis.judging.per_run`: every measure computed once per run), so that ``claims.csv`` can be
rebuilt from ``per_run.csv`` alone (`judge_rows`); `judge` is `judge_rows` on the runs' rows.

1. each arm's runs give one value per seed; a run that diverged counts with the worst value of
   the measure (−inf when higher is better, +inf when lower is), so it is never dropped;
2. an arm with fewer finite-or-diverged values than the rules' ``min_seeds`` is `NOT_JUDGED`;
3. `normbench.analysis.judging.stats.compare` gives the difference (or ratio) with its interval and the
   p-values; the preset's judged claims form one family, adjusted by Holm's step-down;
4. the verdict: *supported* / *opposite* / *inconclusive* (directional), *equivalent* /
   *different* / *inconclusive* (equivalence). The scale (paper, reduced, other hardware) is a
   column of its own and never changes a verdict.

Checks (``checks`` in a rules file) are conditions on the setup, fixed before the runs (a positive
control, a plateau): *passed* when every selected run's measure is below the declared bound (or
above it). When a check of the variant fails or selects no run, no claim of the variant gets a
verdict: each reads "not judged: setup check failed (…)", its numbers kept. Runs with the rules'
pilot seeds are refused: pilots size an experiment, they do not confirm it.

Issue 56 (`normbench.analysis.judging.verdicts`): every claim whose arms ran with at least ``min_seeds``
values each is judged, ``full_scale_only`` or not (that key only documents what the CPU plan does
not size); a claim is *not judged* with a ``reason`` (`verdicts.REASONS`): its arms selected no
rows (``not_run``), too few (``too_few_seeds``), seeds of an earlier attempt (``seeds_reused``), a
setup check failed (``check_failed``) or an arm failed its learning bound (``did_not_learn``,
qualifier "<arm> did not learn"). Not-judged claims keep their numbers but stay out of the Holm
family. Beside each verdict: the effect of interest, the difference detectable at the family's
Holm level α/m, the plan's, a qualifier, the minimum-effect test's p and whether the runs are
confirmatory. Rows are judged under the rules their ``rules_hash`` names, current or superseded
(`normbench.rules.superseded_rules`); claims judged under superseded rules are never confirmatory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from normbench.analysis.judging.claims_csv import CSV_FIELDS as CSV_FIELDS
from normbench.analysis.judging.claims_csv import claims_markdown as claims_markdown
from normbench.analysis.judging.claims_csv import csv_row as csv_row
from normbench.analysis.judging.claims_csv import write_claims as write_claims
from normbench.analysis.judging.per_run import MEASURES as MEASURES
from normbench.analysis.judging.per_run import Row, check_column, claim_columns, judged_here, per_run_rows, select_rows
from normbench.analysis.judging.per_run import measure as measure
from normbench.analysis.judging.rules_schema import CheckRule, ClaimRule, Rules
from normbench.analysis.judging.rules_schema import load_rules as load_rules
from normbench.analysis.judging.stats import (
    INCONCLUSIVE,
    NOT_JUDGED,
    ArmSummary,
    Comparison,
    compare,
    detectable_difference,
    directional_verdict,
    equivalence_verdict,
    holm,
    p_min_effect,
    summarize_arm,
    two_sided_verdict,
)
from normbench.analysis.judging.verdicts import (
    CHECK_FAILED,
    DID_NOT_LEARN,
    NO_TOST_ROOM,
    NOT_RUN,
    SEEDS_REUSED,
    TOO_FEW_SEEDS,
    arm_learning,
    confirmatory,
    qualifier,
    tost_cannot_pass,
)
from normbench.analysis.loading.runs import Run
from normbench.base.errors import ConfigError
from normbench.rules import variant

PASSED, FAILED = "passed", "failed"


@dataclass
class Claim:
    """One judged claim (or setup check): what the paper says, what we measured, the verdict."""

    id: str
    claim: str
    paper: str
    figure: str
    verdict: str
    scale: str = ""
    test: str = ""
    a_label: str = ""
    b_label: str = ""
    a: ArmSummary | None = None
    b: ArmSummary | None = None
    comparison: Comparison | None = None
    p_holm: float = math.nan
    relation: str = ""
    margin: float | None = None
    note: str = ""
    rules_hash: str = ""
    short: str = ""
    """The claim's short name (forest plots, the findings page); a check's: its id."""
    effect: float | None = None
    """The effect of interest E (the rules' ``effect.value``; an equivalence claim's: its margin)."""
    detectable_adj: float = math.nan
    """The difference detectable with 80 % power at the family's Holm level α/m."""
    detectable_planned: float | None = None
    qualifier: str = ""
    reason: str = ""
    """Why a claim is not judged (`normbench.analysis.judging.verdicts.REASONS`); empty when judged."""
    p_min_effect: float = math.nan
    confirmatory: bool = False

    @property
    def measured(self) -> str:
        """The numbers in one line: arms, difference (or ratio) with its interval, test, p."""
        if self.comparison is None:
            return self.note
        c = self.comparison
        what = "ratio a/b" if c.ratio else ("HL shift a−b" if c.test == "rank" else "a−b")
        parts = [
            f"{self.a_label}: {_fmt_arm(self.a)} (n={self.a.n if self.a else 0})",
            f"{self.b_label}: {_fmt_arm(self.b)} (n={self.b.n if self.b else 0})",
            f"{what} {_g(c.estimate)} [{_g(c.lo)}, {_g(c.hi)}]",
            f"{c.test}{' (log)' if c.ratio and c.test == 'rank' else ''}, p={_g(c.p, 2)}, Holm p={_g(self.p_holm, 2)}",
            f"effect {'P(a>b)' if c.test == 'rank' else 'g'}={_g(c.effect_size, 2)}, detectable {_g(c.detectable, 2)}",
        ]
        if self.margin is not None:
            parts.append(f"margin ±{_g(self.margin)}{' (ratio)' if c.ratio else ''}: TOST p={_g(c.p_eq, 2)}")
        return "; ".join(parts) + (f"; {self.note}" if self.note else "")


def _g(v: float, digits: int = 4) -> str:
    return "n/a" if v is None or math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf
                                                      else f"{v:.{digits}g}")  # fmt: skip


def _fmt_arm(s: ArmSummary | None) -> str:
    return "n/a" if s is None else s.fmt()


def judge(preset: str, runs: Sequence[Run], pilot: bool = False) -> list[Claim]:
    """Every claim and check of ``preset``'s rules, judged on ``runs`` (Holm over the claims);
    ``pilot``: also judge runs with the rules' pilot seeds (the planning command)."""
    return judge_rows(preset, per_run_rows(preset, runs), pilot)


def judge_rows(preset: str, rows: Sequence[Row], pilot: bool = False, earlier_seeds: Iterable[int] = ()) -> list[Claim]:
    """`judge` from the per-run table (`normbench.analysis.judging.per_run.per_run_rows`, or a
    ``per_run.csv`` read back), under the rules the rows' ``rules_hash`` names: the claims in the
    rules' order, then the checks. ``earlier_seeds``: seeds of earlier attempts (a claim resting
    on one is not judged: ``seeds_reused``)."""
    rules = rules_of_rows(preset, rows)
    if rules is None:
        return []
    _check_rows(rules, preset, rows, pilot)
    checks = [_judge_check(c, rows, rules, preset) for c in rules.checks]
    pairs = [(_measure_claim(rule, rows, rules, preset), rule) for rule in rules.claims]
    failed = [check for c, check in zip(checks, rules.checks, strict=True)
              if judged_here(check.variants, preset) and c.verdict != PASSED]  # fmt: skip
    earlier = set(earlier_seeds)
    for claim, rule in pairs:
        gating = [c.id for c in failed if c.cell in ("", rule.cell) and (not c.gates or rule.id in c.gates)]
        if claim.comparison is not None:
            _gate(claim, rule, rows, rules, preset, gating, earlier)
    family = [(claim, rule) for claim, rule in pairs if claim.comparison is not None and not claim.reason]
    _holm_verdicts(family, rules.alpha)
    sizes = {cell: sum(r.cell == cell for _, r in family) for cell in {r.cell for _, r in family}}
    for claim, rule in pairs:
        _describe(claim, rule, rows, rules, preset, sizes.get(rule.cell, 0), pilot)
    return [claim for claim, _ in pairs] + checks


def rules_of_rows(preset: str, rows: Sequence[Row]) -> Rules | None:
    """The rules ``rows`` were measured under (their one ``rules_hash``: current or superseded);
    the current rules for no rows."""
    hashes = sorted({str(r.get("rules_hash") or "") for r in rows})
    if len(hashes) > 1:
        raise ConfigError(f"the rows of {preset} were measured under {len(hashes)} rules ({', '.join(hashes)}); "
                          "judge the rows of one rules hash at a time")  # fmt: skip
    current = load_rules(preset)
    if current is None or not hashes or hashes[0] in ("", current.hash):
        return current
    try:
        return load_rules(preset, rules_hash=hashes[0])
    except ConfigError as e:
        source = next(r["source"] for r in rows)
        raise ConfigError(f"the values of {source} were measured under rules {hashes[0]!r}: {e}; measure the runs "
                          "again (normbench-figures --runs)") from None  # fmt: skip


def _not_judged(claim: Claim, reason: str, note: str, words: str) -> None:
    claim.verdict, claim.reason, claim.qualifier = NOT_JUDGED, reason, words
    claim.note = f"not judged: {note}" + (f"; {claim.note}" if claim.note else "")


def _gate(claim: Claim, rule: ClaimRule, rows: Sequence[Row], rules: Rules, preset: str, gating: list[str],
          earlier: set[int]) -> None:  # fmt: skip
    """A measured claim's reason not to be judged, if any: seeds of an earlier attempt, a failed
    setup check, an arm that did not learn (in this order)."""
    arms = [(arm.label, select_rows(rows, arm.select)) for arm in (rule.a, rule.b)]
    if reused := sorted({r["seed"] for _, members in arms for r in members} & earlier):
        _not_judged(claim, SEEDS_REUSED, f"seeds {reused} were used by an earlier attempt", "seeds reused")
    elif gating:
        _not_judged(claim, CHECK_FAILED, f"setup check failed ({', '.join(gating)})", "setup check failed")
    elif failing := [(label, why) for label, members in arms
                     if (why := arm_learning(members, rules.learning, preset, label))]:  # fmt: skip
        labels = " and ".join(dict.fromkeys(label for label, _ in failing))
        _not_judged(claim, DID_NOT_LEARN, "; ".join(why for _, why in failing), f"{labels} did not learn")


def _describe(claim: Claim, rule: ClaimRule, rows: Sequence[Row], rules: Rules, preset: str, m: int,
              pilot: bool) -> None:  # fmt: skip
    """The effect of interest, the planned and the family-level detectable differences, the
    minimum-effect test, the qualifier and whether the claim's runs are confirmatory."""
    claim.effect = rule.effect.value if rule.effect is not None else rule.margin
    claim.detectable_planned = rule.planned_detectable.get(variant(preset))
    seeds = [r["seed"] for arm in (rule.a, rule.b) for r in select_rows(rows, arm.select)]
    claim.confirmatory = not pilot and not claim.reason and confirmatory(rules, preset, seeds)
    c = claim.comparison
    if c is None:
        return
    va, vb = _arm_values(rule, rows, f"rules of {preset}, {rule.id}")
    claim.detectable_adj = detectable_difference(va, vb, rule.test, rules.alpha / max(m, 1))
    if rule.effect is not None:
        claim.p_min_effect = p_min_effect(va, vb, rule.test, rule.effect.value, rule.relation)
    if not claim.reason:
        claim.qualifier = qualifier(claim.verdict, rule.relation, c.lo, c.hi, c.ratio,
                                    rule.effect.value if rule.effect else None, claim.detectable_adj,
                                    claim.p_min_effect, rules.alpha)  # fmt: skip
        if (
            rule.margin is not None
            and claim.verdict == INCONCLUSIVE
            and tost_cannot_pass(va, vb, rule.test, rule.margin, rules.alpha / max(m, 1))
        ):
            claim.qualifier = NO_TOST_ROOM


def claim_values(preset: str, rows: Sequence[Row]) -> dict[str, tuple[list[float], list[float]]]:
    """Each claim's arms' per-seed values (a, b), as `judge_rows` judges them (diverged runs at the
    worst value), for the claims of ``preset``'s variant; pilot runs included (for planning)."""
    rules = load_rules(preset)
    if rules is None:
        return {}
    return {rule.id: _arm_values(rule, rows, f"rules of {preset}, {rule.id}") for rule in rules.claims
            if judged_here(rule.variants, preset)}  # fmt: skip


def _check_rows(rules: Rules, preset: str, rows: Sequence[Row], pilot: bool) -> None:
    """Rows of pilot seeds are refused (unless ``pilot``)."""
    if not pilot and (piloted := [r for r in rows if r["seed"] in rules.pilot_seeds]):
        seeds = sorted({r["seed"] for r in piloted})
        raise ConfigError(f"{len(piloted)} runs have the pilot seeds {seeds} of {preset}'s rules (e.g. "
                          f"{piloted[0]['source']}): pilot runs are not confirmatory; judge runs of other seeds, "
                          "and read the pilots with the planning command")  # fmt: skip


def judged_at_this_scale(rule: ClaimRule, preset: str) -> bool:
    """Whether the plan sizes ``rule`` in ``preset`` (its variant, and not ``full_scale_only`` on the
    CPU variant): the planning command's question. Judging asks only whether the arms ran."""
    return judged_here(rule.variants, preset) and not (rule.full_scale_only and variant(preset) == "cpu")


def _arm_values(rule: ClaimRule, rows: Sequence[Row], where: str) -> tuple[list[float], list[float]]:
    """The values of the rows of each arm, in the order of their seeds (the same seeds in both
    arms for test ``paired``)."""
    columns = claim_columns(rule)
    members = {side: select_rows(rows, arm.select) for side, arm in (("a", rule.a), ("b", rule.b))}
    seeds_a, seeds_b = ([r["seed"] for r in members[side]] for side in "ab")
    if rule.test == "paired" and seeds_a != seeds_b:
        raise ConfigError(f"{where}: test paired needs the same seeds in both arms; got {seeds_a} and {seeds_b}")
    values: dict[str, list[float]] = {}
    for side, chosen in members.items():
        if missing := [r for r in chosen if r.get(columns[side]) is None]:
            raise ConfigError(f"{where}: no value of {columns[side]} for {missing[0]['source']} (seed "
                              f"{missing[0]['seed']}): the per-run table was not measured for these rules")  # fmt: skip
        values[side] = [float(r[columns[side]]) for r in chosen]
    return values["a"], values["b"]


def _measure_claim(rule: ClaimRule, rows: Sequence[Row], rules: Rules, preset: str) -> Claim:
    """A claim with its arms and comparison (no verdict yet: `_holm_verdicts`), or the reason it
    is not judged here."""
    scale = rule.scale.get(variant(preset)) or rules.scale[variant(preset)]
    claim = Claim(rule.id, rule.claim, rule.paper, rule.figure, NOT_JUDGED, scale.fmt(), rule.test,
                  rule.a.label, rule.b.label, relation=rule.relation, margin=rule.margin,
                  rules_hash=rules.hash, short=rule.short)  # fmt: skip
    if not judged_here(rule.variants, preset):
        claim.reason, claim.qualifier = NOT_RUN, "not run at this scale"
        claim.note = f"not run in {preset} (the rules judge it in: {', '.join(rule.variants)})"
        return claim
    counts = [len(select_rows(rows, arm.select)) for arm in (rule.a, rule.b)]
    if min(counts) == 0:
        fso = f" (full-scale only: needs n ≈ {rule.full_scale_only.needs_n})" if rule.full_scale_only else ""
        _not_judged(claim, NOT_RUN, f"not run at this scale{fso}: {claim.a_label} n = {counts[0]}, "
                    f"{claim.b_label} n = {counts[1]}", "not run at this scale")  # fmt: skip
        return claim
    va, vb = _arm_values(rule, rows, f"rules of {preset}, {rule.id}")
    claim.a, claim.b = summarize_arm(va, rule.test, rules.alpha), summarize_arm(vb, rule.test, rules.alpha)
    if min(claim.a.n, claim.b.n) < rules.min_seeds:
        claim.reason, claim.qualifier = TOO_FEW_SEEDS, "too few seeds"
        claim.note = (f"not judged: n = {claim.a.n} and {claim.b.n}: the rules ask for {rules.min_seeds} seeds per "
                      f"arm; {claim.a_label}: {claim.a.fmt()}, {claim.b_label}: {claim.b.fmt()}")  # fmt: skip
        claim.a = claim.b = None
        return claim
    claim.comparison = compare(va, vb, rule.test, rule.margin, rules.alpha)
    claim.test = claim.comparison.test
    if claim.comparison.test != rule.test:
        claim.note = f"a run diverged: {rule.test} → rank (the rule for diverged runs)"
    return claim


def _holm_verdicts(family: Sequence[tuple[Claim, ClaimRule]], alpha: float) -> None:
    """Holm's step-down over each family's p-values (an equivalence claim: the smaller of TOST's
    and the difference's; a family: the claims of one ``cell``, or all when the rules name none),
    then each claim's verdict from its adjusted p."""
    for cell in dict.fromkeys(rule.cell for _, rule in family):
        members = [(claim, rule) for claim, rule in family if rule.cell == cell]
        ps = []
        for claim, rule in members:
            c = claim.comparison
            assert c is not None
            ps.append(c.p if rule.margin is None else min(c.p_eq, c.p_diff))
        for (claim, rule), p_adj in zip(members, holm(ps), strict=True):
            claim.p_holm = p_adj
            claim.verdict = _verdict(claim, rule, p_adj, alpha)


def _verdict(claim: Claim, rule: ClaimRule, p_adj: float, alpha: float) -> str:
    c = claim.comparison
    assert c is not None
    if rule.relation == "equivalent":
        eq_first = c.p_eq <= c.p_diff
        return equivalence_verdict(p_adj if eq_first else 1.0, 1.0 if eq_first else p_adj, alpha)
    if rule.relation == "differs":
        return two_sided_verdict(p_adj, alpha)
    return directional_verdict(c.estimate, 1.0 if c.ratio else 0.0, rule.relation == "greater", p_adj, alpha)


def row_label(row: Row, rules: Rules, preset: str, key: str | None = None) -> str:
    """A run's name in a check's note: the label of the first arm (in the rules' order) that
    selects it, else its norm's name, then its seed (``BN@32 seed=0``). Where two arms select the
    same runs (a paired claim: the population estimate and the EMA of one run), the first arm
    measured on the check's logged ``key`` names it."""
    arms = [(arm, (arm.params if arm.measure else r.params).get("key"))
            for r in rules.claims if judged_here(r.variants, preset) for arm in (r.a, r.b)]  # fmt: skip
    selecting = [(arm.label, arm_key) for arm, arm_key in arms if select_rows([row], arm.select)]
    label = next((lab for lab, arm_key in selecting if arm_key == key), None) or next(iter(selecting), (None,))[0]
    return f"{label or row.get('norm.name') or 'run'} seed={row['seed']}"


def _judge_check(check: CheckRule, rows: Sequence[Row], rules: Rules, preset: str) -> Claim:
    scale = rules.scale[variant(preset)].fmt()
    what = "a check of the setup, not a paper claim"
    if not judged_here(check.variants, preset):
        note = f"not run in {preset} (the rules check it in: {', '.join(check.variants)})"
        return Claim(check.id, check.claim, what, check.figure, NOT_JUDGED, scale, note=note, rules_hash=rules.hash,
                     short=check.id, reason=NOT_RUN, qualifier="not run at this scale")  # fmt: skip
    key, column = check.params.get("key"), check_column(check)
    if check.tracks is not None:
        return _judge_tracks(check, rows, rules, scale)
    where = f"rules of {preset}, {check.id}"
    values = [(row_label(r, rules, preset, key), _measured(r, column, where)) for r in select_rows(rows, check.select)]
    ok, bound = all(check.passes(v) for _, v in values), check.bound
    note = ", ".join(f"{k} {v:.3g}" for k, v in values) or "no runs selected"
    return Claim(check.id, check.claim, what, check.figure, PASSED if values and ok else FAILED, scale,
                 note=f"{note} (passes when every run's is {bound})", rules_hash=rules.hash,
                 short=check.id)  # fmt: skip


def _measured(row: Row, column: str, where: str) -> float:
    """A check's value of ``row``; a one-line `ConfigError` where the table holds none (no such
    column, an empty cell)."""
    value = row.get(column)
    if value is None:
        why = "an empty cell in" if column in row else "no column"
        raise ConfigError(f"{where}: {row['source']} (seed {row['seed']}) has {why} {column}: the table was not "
                          "measured for these rules: measure the runs again (normbench-figures --runs)")  # fmt: skip
    return float(value)


def _judge_tracks(check: CheckRule, rows: Sequence[Row], rules: Rules, scale: str) -> Claim:
    """An arm-against-arm check: the means of the ``tracks.a`` and ``tracks.b`` runs among the
    selected ones within ``tracks.within`` of each other (`passed`); an arm without runs fails."""
    assert check.tracks is not None
    chosen = select_rows(rows, check.select)
    means = []
    for side in (check.tracks.a, check.tracks.b):
        vals = [_measured(r, check_column(check), f"check {check.id}") for r in select_rows(chosen, side)]
        means.append((float(np.mean(vals)) if vals else math.nan, len(vals)))
    (ma, na), (mb, nb) = means
    apart = abs(ma - mb)
    ok = na > 0 and nb > 0 and apart <= check.tracks.within
    names = [", ".join(f"{k}={v}" for k, v in side.items()) for side in (check.tracks.a, check.tracks.b)]
    note = (f"{names[0]}: mean {ma:.3g} (n={na}); {names[1]}: mean {mb:.3g} (n={nb}); {apart:.3g} apart "
            f"(passes when within {check.tracks.within:g})")  # fmt: skip
    return Claim(check.id, check.claim, "a check of the setup, not a paper claim", check.figure,
                 PASSED if ok else FAILED, scale, note=note, rules_hash=rules.hash, short=check.id)  # fmt: skip
