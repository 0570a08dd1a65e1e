"""Plan a preset's seeds per arm from its pilot runs (issues 43 and 56): per claim, the n that gives
80 % power for the claim's effect of interest (an equivalence claim: the n at which TOST can
pass within its margin), at the preset's α after Holm (planned at Holm's first step, α/k for k
judged claims), and what that n costs in CPU time.

The inputs are plain: per claim a `ClaimPlanInput` (relation, test, effect of interest or margin,
whether the test works on ratios) and the pilot's per-seed values of its two arms, one list per
table when several attempts of the same recipe are pooled. n is sized from honest spreads: each
arm's sample standard deviation pooled over the tables (`power.pooled_sd`: each table around its
own mean, the degrees of freedom added), then its upper 80 % one-sided confidence limit
s·sqrt(ν/χ²_{0.2,ν}) (`power.sd_upper`), not the point value, which three seeds give on 2 degrees
of freedom (for ``paired``: of the per-seed differences; for ratio claims: of the logarithms). A
pilot with fewer than `MIN_PILOT` seeds in an arm is refused. The maths is in
`normbench.analysis.judging.power`; this module only assembles rows and prints them. Directional claims
are planned two-sided, as their verdict's p-value is (`stats.compare`); equivalence claims at a
true difference of 0 (ratio 1), and only where TOST reaches 80 % power within the budget (else
the row says so, with the n it would need). Beside each n: the seeds the plan runs (n, or the most
that fit the budget) and the difference they detect at the family's Holm level α/m.
``variant`` (``cpu`` / ``full``) is carried into the rows only.

Cost: a claim needs 2·n runs (``paired``: n, both arms are the same runs), each taking
``seconds_per_run`` of one process; two processes run at a time on the 2-core machine, so
wall-clock minutes = runs × seconds_per_run / 2 / 60. Arms shared between claims are counted per
claim here, so the preset's total is at most the sum over its claims.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from normbench.analysis.judging import power as pw

RELATIONS = ("greater", "less", "equivalent", "differs")
CORES = 2
BUDGET_MIN = 45.0
MIN_PILOT = 3
"""The fewest pilot seeds per arm a plan is made from (2 degrees of freedom of the spread)."""


@dataclass(frozen=True)
class ClaimPlanInput:
    """One claim as the plan needs it. ``effect``: the effect of interest of a directional claim
    (a difference in the measure's units, or a ratio when ``ratio``; its sign or side does not
    matter); ``margin``: an equivalence claim's margin (a ratio > 1 when ``ratio``)."""

    id: str
    relation: str
    test: str
    effect: float | None = None
    margin: float | None = None
    ratio: bool = False
    cell: str = ""
    """The claim's Holm family (`normbench.analysis.judging.rules_schema.ClaimRule.cell`)."""


@dataclass(frozen=True)
class PlanInput:
    """A preset's claims of one variant with the judging settings: α, family size from the claims
    and ``also_judged``: the Holm cells of claims judged but not sized here (one entry per claim;
    a full-scale-only claim whose arms run), which enlarge their families."""

    claims: tuple[ClaimPlanInput, ...]
    alpha: float = 0.05
    min_seeds: int = 5
    also_judged: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanRow:
    """The plan of one claim. ``sd_a``/``sd_b``: the pilot's sds, pooled over its tables
    (``paired``: ``sd_a`` is the differences' sd, ``sd_b`` NaN; ratio claims: sds of the logs), on
    ``df`` degrees of freedom; ``sd_upper_a``/``sd_upper_b``: their upper ``sd_level`` confidence
    limits, which n is sized from (`power.sd_upper`); ``target``: the effect (or the margin,
    ``equivalence``); ``n``: seeds per arm for ``power`` (None: beyond ``n_max`` or not plannable,
    see ``note``); ``n_run``: the seeds per arm the plan runs, n where it fits the budget, else the
    most that fit (None: fewer than 2); ``detectable_run``: the difference (ratio) ``n_run`` seeds
    detect with 80 % power at ``alpha`` (Holm's α/m); ``power_run``: the power at ``n_run`` (TOST's
    at a true difference of 0 for an equivalence); ``planned``: False for an equivalence whose TOST
    cannot reach 80 % power at ``n_run``; ``detectable`` and ``tost_room`` (equivalence only, else
    NaN: margin − t_{1−α}·SE, ≤ 0 when TOST could not pass even at an observed difference of 0) at
    the rules' ``min_seeds``; ``runs``: the claim's own runs at n; ``cpu_min``: wall-clock minutes
    of n seeds on the 2-core machine (the claim's own runs, or the whole sweep's where the plan
    knows it); ``fits``: within the budget."""

    id: str
    variant: str
    test: str
    relation: str
    pilot_n: tuple[int, int]
    sd_a: float
    sd_b: float
    target: float
    equivalence: bool
    alpha: float
    n: int | None
    power: float
    detectable: float
    min_seeds: int
    runs: int | None
    cpu_min: float
    fits: bool
    tost_room: float = math.nan
    note: str = ""
    df: tuple[int, int] = (0, 0)
    sd_upper_a: float = math.nan
    sd_upper_b: float = math.nan
    sd_level: float | None = pw.SD_LEVEL
    n_run: int | None = None
    detectable_run: float = math.nan
    power_run: float = math.nan
    planned: bool = True


@dataclass(frozen=True)
class Spread:
    """A claim's pilot spread: the pooled sds, their degrees of freedom and the finite values per arm."""

    sd_a: float
    sd_b: float | None
    df_a: int
    df_b: int
    n_a: int
    n_b: int


def _groups(values: Sequence[Any]) -> list[np.ndarray]:
    """An arm's pilot values: one sequence (one table), or one sequence per table (pooled)."""
    items = list(values)
    if items and all(isinstance(v, (Sequence, np.ndarray)) and not isinstance(v, str) for v in items):
        return [np.asarray(v, dtype=np.float64) for v in items]
    return [np.asarray(items, dtype=np.float64)]


def pilot_spread(a: Sequence[Any], b: Sequence[Any], test: str, ratio: bool) -> Spread:
    """The pooled spread (`power.pooled_sd`) of the pilot's finite values, per table (logs when
    ``ratio``; ``paired``: of a − b, seeds matched by position within each table)."""
    ga, gb = _groups(a), _groups(b)
    if len(ga) != len(gb):
        raise ValueError(f"the arms have values from {len(ga)} and {len(gb)} tables; valid: one list per table each")
    if ratio:
        if any((g[np.isfinite(g)] <= 0).any() for g in ga + gb):
            raise ValueError("a ratio claim's pilot values must be positive; valid: values > 0")
        ga, gb = [np.log(g) for g in ga], [np.log(g) for g in gb]
    if test == "paired":
        diffs = []
        for x, y in zip(ga, gb, strict=True):
            if x.size != y.size:
                raise ValueError(f"paired pilot arms have {x.size} and {y.size} values; valid: one of each per seed")
            diffs.append((x - y)[np.isfinite(x - y)])
        sd, df = pw.pooled_sd(diffs)
        n = sum(d.size for d in diffs)
        return Spread(sd, None, df, df, n, n)
    fa, fb = [g[np.isfinite(g)] for g in ga], [g[np.isfinite(g)] for g in gb]
    (sa, dfa), (sb, dfb) = pw.pooled_sd(fa), pw.pooled_sd(fb)
    return Spread(sa, sb, dfa, dfb, sum(g.size for g in fa), sum(g.size for g in fb))


def _target(claim: ClaimPlanInput, ratio: bool) -> tuple[float, bool]:
    """(the effect of interest as a magnitude (a ratio ≥ 1), or the margin; whether an equivalence)."""
    if claim.relation not in RELATIONS:
        raise ValueError(f"claim {claim.id}: relation={claim.relation!r}; valid: {', '.join(RELATIONS)}")
    equivalence = claim.relation == "equivalent"
    name, value = ("margin", claim.margin) if equivalence else ("effect", claim.effect)
    if value is None or not math.isfinite(value) or (ratio and value <= 0) or (equivalence and value <= ratio):
        valid = "a ratio > 1 (0 < effect for a directional claim)" if ratio else "a finite difference (margin > 0)"
        raise ValueError(f"claim {claim.id}: {name}={value!r}; valid: {valid}")
    value = float(value)
    return (max(value, 1 / value) if ratio else abs(value)), equivalence


def _too_few(claim: ClaimPlanInput, spread: Spread) -> None:
    """A pilot that ran an arm of the claim with fewer than `MIN_PILOT` finite values is refused
    (one that ran neither arm did not cover the claim: `plan_claim` says so in its row)."""
    if min(spread.df_a, spread.df_b) < MIN_PILOT - 1 and spread.n_a + spread.n_b > 0:
        arms = f"{spread.n_a} pairs" if claim.test == "paired" else f"{spread.n_a} and {spread.n_b} finite values"
        raise ValueError(f"too few pilot seeds: claim {claim.id} has {arms} in its arms' pilot "
                         f"({min(spread.df_a, spread.df_b)} degree(s) of freedom of the spread); valid: at least "
                         f"{MIN_PILOT} seeds per arm in one table")  # fmt: skip


def _n_within(budget_min: float, seconds_per_run: float, runs_per_n: float, n_max: int) -> int:
    """The most seeds per arm whose runs fit ``budget_min`` on `CORES` cores."""
    return min(n_max, math.floor(budget_min * 60 * CORES / (seconds_per_run * runs_per_n) + 1e-9))


def _cost(n: int | None, runs_per_seed: float, seconds: float, budget_min: float,
          n_max: int) -> tuple[float, bool, int | None]:  # fmt: skip
    """(wall-clock minutes of n seeds, whether they fit the budget, the seeds run: n where it fits,
    else the most that fit, None below 2)."""
    cpu_min = math.inf if n is None else n * runs_per_seed * seconds / CORES / 60
    fits = cpu_min <= budget_min
    n_run = n if n is not None and fits else _n_within(budget_min, seconds, runs_per_seed, n_max)
    return cpu_min, fits, (n_run if n_run >= 2 else None)


def plan_claim(
    claim: ClaimPlanInput,
    a: Sequence[Any],
    b: Sequence[Any],
    alpha: float,
    min_seeds: int,
    variant: str,
    seconds_per_run: float,
    budget_min: float = BUDGET_MIN,
    n_max: int = pw.N_MAX,
    sd_level: float | None = pw.SD_LEVEL,
    runs_per_seed: float | None = None,
) -> PlanRow:
    """One claim's plan at ``alpha`` (already Holm's α/m) from its arms' pilot values ``a``, ``b``
    (one list, or one list per table: pooled): see `PlanRow`. n is sized from the upper
    ``sd_level`` confidence limits of the sds (None: the point sds). ``runs_per_seed``: the runs
    one more seed costs, for the budget (default: the claim's own, 2 or 1 for ``paired``; the
    planner passes the whole sweep's settings)."""
    ratio = claim.ratio or claim.test == "welch_log"
    target, equivalence = _target(claim, ratio)
    # the power maths runs on the logs for a ratio claim; rank keeps its name (Welch with the exact floor)
    test = claim.test if claim.test in ("paired", "rank") else "welch"
    location = math.log(target) if ratio else target
    spread = pilot_spread(a, b, claim.test, ratio)
    _too_few(claim, spread)
    upper = [None if s is None else math.nan if df < 1 else pw.sd_upper(s, df, sd_level) if sd_level else s
             for s, df in ((spread.sd_a, spread.df_a), (spread.sd_b, spread.df_b))]  # fmt: skip
    row = partial(PlanRow, id=claim.id, variant=variant, test=claim.test, relation=claim.relation,
                  pilot_n=(spread.n_a, spread.n_b), sd_a=spread.sd_a,
                  sd_b=math.nan if spread.sd_b is None else spread.sd_b, target=target, equivalence=equivalence,
                  alpha=alpha, min_seeds=min_seeds, df=(spread.df_a, spread.df_b), sd_upper_a=upper[0],
                  sd_upper_b=math.nan if upper[1] is None else upper[1], sd_level=sd_level)  # fmt: skip
    ua, ub = upper
    if spread.n_a + spread.n_b == 0:
        return row(n=None, power=math.nan, detectable=math.nan, runs=None, cpu_min=math.inf, fits=False,
                   planned=False, note="not planned: the pilot ran no seed of its arms")  # fmt: skip
    if not any(s > 0 for s in (ua, ub) if s is not None):  # one constant arm is fine (Welch on the other)
        return row(n=None, power=math.nan, detectable=math.nan, runs=None, cpu_min=math.inf, fits=False,
                   planned=not equivalence, note="pilot: no spread")  # fmt: skip
    n, achieved, note = _size(claim, location, ua, ub, alpha, test, equivalence, n_max)
    own = 1 if claim.test == "paired" else 2
    runs = None if n is None else n * own
    cpu_min, fits, n_run = _cost(n, runs_per_seed or own, seconds_per_run, budget_min, n_max)
    at_run = _at_n(location, ua, ub, n_run, alpha, test, ratio, equivalence)
    planned = not equivalence or (n is not None and fits)
    if not planned:
        note = (f"equivalence not planned: TOST at n = {n_run} has power {_power(at_run[1])} at a true difference "
                f"of 0; it needs n = {n if n else f'> {n_max}'} per arm")  # fmt: skip
    detect = pw.detectable(ua, ub, min_seeds, alpha, test) if min_seeds >= 2 else math.nan
    detect = math.exp(detect) if ratio else detect
    room = pw.tost_room(location, ua, ub, min_seeds, alpha, test) if equivalence and min_seeds >= 2 else math.nan
    return row(n=n, power=achieved, detectable=detect, runs=runs, cpu_min=cpu_min, fits=fits, tost_room=room,
               note=note, n_run=n_run, detectable_run=at_run[0], power_run=at_run[1], planned=planned)  # fmt: skip


def _size(claim: ClaimPlanInput, location: float, ua: float, ub: float | None, alpha: float, test: str,
          equivalence: bool, n_max: int) -> tuple[int | None, float, str]:  # fmt: skip
    """(n for 80 % power, the power it reaches, the row's note): TOST's at a true difference of 0
    for an equivalence, else the two-sided test's at the effect."""
    if equivalence:
        n = pw.n_for_tost(location, ua, ub, alpha, test=test, n_max=n_max)
        achieved = pw.power_tost(location, ua, ub, n, alpha, test=test) if n else math.nan
        note = "TOST at true difference 0"
    else:
        n = pw.n_for_power(location, ua, ub, alpha, test=test, n_max=n_max)
        achieved = pw.power_diff(location, ua, ub, n, alpha, test=test) if n else math.nan
        note = "rank: Welch approximation" if claim.test == "rank" else ""
    return n, achieved, (f"n > {n_max}" if n is None else note)


def _at_n(location: float, ua: float, ub: float | None, n: int | None, alpha: float, test: str, ratio: bool,
          equivalence: bool) -> tuple[float, float]:  # fmt: skip
    """(detectable difference (ratio), power) with ``n`` seeds per arm at ``alpha``: the power to
    detect the effect, or TOST's at a true difference of 0; NaN without an n."""
    if n is None:
        return math.nan, math.nan
    d = pw.detectable(ua, ub, n, alpha, test)
    power = pw.power_tost(location, ua, ub, n, alpha, test=test) if equivalence else \
        pw.power_diff(location, ua, ub, n, alpha, test=test)  # fmt: skip
    return (math.exp(d) if ratio else d), power


def plan_claims(
    rules_like: PlanInput,
    values_by_claim: Mapping[str, tuple[Sequence[Any], Sequence[Any]]],
    variant: str,
    seconds_per_run: float | Mapping[str, float],
    budget_min: float = BUDGET_MIN,
    n_max: int = pw.N_MAX,
    sd_level: float | None = pw.SD_LEVEL,
    runs_per_seed: float | None = None,
) -> list[PlanRow]:
    """Plan every claim of ``rules_like`` from its pilot values ``values_by_claim[id] = (a, b)``
    (each arm one list, or one list per table to pool), at α/m (m: the number of claims in its
    family, the cell Holm controls; all the claims when they name no cell). ``seconds_per_run``:
    one number, or one per claim id; it and ``budget_min`` must be > 0. ``runs_per_seed``: the
    whole sweep's runs per seed, which the budget is spent on (default: each claim's own)."""
    claims = rules_like.claims
    missing = [c.id for c in claims if c.id not in values_by_claim]
    if missing:
        raise ValueError(f"no pilot values for claim(s) {', '.join(missing)}; valid: {', '.join(values_by_claim)}")
    times = dict(seconds_per_run) if isinstance(seconds_per_run, Mapping) else {"seconds_per_run": seconds_per_run}
    for name, value in [*times.items(), ("budget_min", budget_min)]:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name}={value!r} is invalid; valid: a number of seconds (minutes) > 0")
    cells = [c.cell for c in claims] + list(rules_like.also_judged)
    family = {c.cell: cells.count(c.cell) for c in claims}
    rows = []
    for claim in claims:
        alpha = pw.alpha_for_family(rules_like.alpha, family[claim.cell])
        seconds = seconds_per_run[claim.id] if isinstance(seconds_per_run, Mapping) else seconds_per_run
        a, b = values_by_claim[claim.id]
        rows.append(plan_claim(claim, a, b, alpha, rules_like.min_seeds, variant, seconds, budget_min, n_max,
                               sd_level, runs_per_seed))  # fmt: skip
    return rows


def _g(v: float | None, digits: int = 3) -> str:
    """``v`` to ``digits`` significant digits, never in e-notation."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return np.format_float_positional(v, precision=digits, unique=False, fractional=False, trim="-")


def _power(v: float) -> str:
    """A power to 2 significant digits; below 0.001 as "< 0.001"."""
    return "< 0.001" if v < 0.001 else _g(v, 2)


def _sds(r: PlanRow) -> str:
    point = _g(r.sd_a) if r.test == "paired" else f"{_g(r.sd_a)}; {_g(r.sd_b)}"
    if r.sd_level is None:
        return point
    upper = _g(r.sd_upper_a) if r.test == "paired" else f"{_g(r.sd_upper_a)}; {_g(r.sd_upper_b)}"
    return f"{point} → {upper} (df {r.df[0]}{'' if r.test == 'paired' else f'; {r.df[1]}'})"


def plan_table(rows: Sequence[PlanRow]) -> str:
    """The plan as a markdown table, one line per claim: the pilot's sds and the upper confidence
    limits n is sized from, n for 80 % power, and the seeds run (``n run``: n, or the most that
    fit the budget) with what they detect at the family's Holm α (an equivalence: TOST's power at
    a true difference of 0)."""
    level = next((f"{r.sd_level:.0%}" for r in rows if r.sd_level), "")
    lines = [
        f"| claim | test | pilot sd a; b → upper {level} limit (df) | effect | α (Holm) | n/arm | power | runs "
        "| CPU min | fits | n run | detectable at n run (Holm α) | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = f"margin ±{_g(r.target)}" if r.equivalence else _g(r.target)
        at_run = f"TOST power {_power(r.power_run)}" if r.equivalence else _g(r.detectable_run)
        cells = [r.id, r.test, _sds(r), target, _g(r.alpha, 2), "—" if r.n is None else str(r.n), _g(r.power, 2),
                 "—" if r.runs is None else str(r.runs), "—" if math.isinf(r.cpu_min) else f"{r.cpu_min:.0f}",
                 "yes" if r.fits else "no", "—" if r.n_run is None else str(r.n_run), at_run, r.note]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
