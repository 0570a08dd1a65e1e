"""Plan a preset's seeds per arm from its pilot runs (issue 43, item 1): per claim, the n that
gives 80 % power for the claim's effect of interest (an equivalence claim: the n at which TOST can
pass within its margin), at the preset's α after Holm (planned at Holm's first step, α/k for k
judged claims), and what that n costs in CPU time.

The inputs are plain: per claim a `ClaimPlanInput` (relation, test, effect of interest or margin,
whether the test works on ratios) and the pilot's per-seed values of its two arms. The pilot's
sample standard deviations stand in for the population ones (for ``paired``: the standard
deviation of the per-seed differences; for ratio claims: of the logarithms). The maths is in
`normbench.analysis.power`; this module only assembles rows and prints them. Directional claims
are planned two-sided, as their verdict's p-value is (`stats.compare`); equivalence claims at a
true difference of 0 (ratio 1). ``variant`` (``cpu`` / ``full``) is carried into the rows only.

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

import numpy as np

from normbench.analysis import power as pw

RELATIONS = ("greater", "less", "equivalent", "differs")
CORES = 2
BUDGET_MIN = 45.0


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
    """The claim's Holm family (`normbench.analysis.rules_schema.ClaimRule.cell`)."""


@dataclass(frozen=True)
class PlanInput:
    """A preset's claims of one variant with the judging settings: α, family size from the claims."""

    claims: tuple[ClaimPlanInput, ...]
    alpha: float = 0.05
    min_seeds: int = 5


@dataclass(frozen=True)
class PlanRow:
    """The plan of one claim. ``sd_a``/``sd_b``: the pilot's sds (``paired``: ``sd_a`` is the
    differences' sd, ``sd_b`` NaN; ratio claims: sds of the logs); ``target``: the effect (or the
    margin, ``equivalence``); ``n``: seeds per arm for ``power`` (None: beyond ``n_max`` or not
    plannable, see ``note``); ``detectable``: the difference (ratio) the preset's current
    ``min_seeds`` could detect with 80 % power at ``alpha``; ``tost_room`` (equivalence only, else
    NaN): margin − t_{1−α}·SE at ``min_seeds`` (ratio claims: on the logs), ≤ 0 when TOST could not
    pass there even at an observed difference of 0; ``cpu_min``: wall-clock minutes of
    the n's runs on the 2-core machine; ``fits``: within the budget."""

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


def pilot_sds(a: Sequence[float], b: Sequence[float], test: str, ratio: bool) -> tuple[float, float | None, int, int]:
    """(sd_a, sd_b, n_a, n_b) of the pilot's finite values (logs when ``ratio``; ``paired``:
    (sd of a − b, None, n, n), seeds matched by position)."""
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if ratio:
        if (va[np.isfinite(va)] <= 0).any() or (vb[np.isfinite(vb)] <= 0).any():
            raise ValueError("a ratio claim's pilot values must be positive; valid: values > 0")
        va, vb = np.log(va), np.log(vb)
    if test == "paired":
        if va.size != vb.size:
            raise ValueError(f"paired pilot arms have {va.size} and {vb.size} values; valid: one of each per seed")
        d = va - vb
        d = d[np.isfinite(d)]
        return (float(d.std(ddof=1)) if d.size >= 2 else math.nan), None, int(d.size), int(d.size)
    va, vb = va[np.isfinite(va)], vb[np.isfinite(vb)]
    sd = [float(v.std(ddof=1)) if v.size >= 2 else math.nan for v in (va, vb)]
    return sd[0], sd[1], int(va.size), int(vb.size)


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


def plan_claim(
    claim: ClaimPlanInput,
    a: Sequence[float],
    b: Sequence[float],
    alpha: float,
    min_seeds: int,
    variant: str,
    seconds_per_run: float,
    budget_min: float = BUDGET_MIN,
    n_max: int = pw.N_MAX,
) -> PlanRow:
    """One claim's plan at ``alpha`` (already Holm's α/k): see `PlanRow`."""
    ratio = claim.ratio or claim.test == "welch_log"
    target, equivalence = _target(claim, ratio)
    # the power maths runs on the logs for a ratio claim; rank keeps its name (Welch with the exact floor)
    test = claim.test if claim.test in ("paired", "rank") else "welch"
    location = math.log(target) if ratio else target
    sd_a, sd_b, n_a, n_b = pilot_sds(a, b, claim.test, ratio)
    row = partial(PlanRow, id=claim.id, variant=variant, test=claim.test, relation=claim.relation,
                  pilot_n=(n_a, n_b), sd_a=sd_a, sd_b=math.nan if sd_b is None else sd_b, target=target,
                  equivalence=equivalence, alpha=alpha, min_seeds=min_seeds)  # fmt: skip
    sds = [s for s in (sd_a, sd_b) if s is not None]
    if any(math.isnan(s) for s in sds) or not any(s > 0 for s in sds):  # one constant arm is fine (Welch on the other)
        note = "pilot: fewer than 2 finite values per arm" if any(math.isnan(s) for s in sds) else "pilot: no spread"
        return row(n=None, power=math.nan, detectable=math.nan, runs=None, cpu_min=math.inf, fits=False,
                       note=note)  # fmt: skip
    if equivalence:
        n = pw.n_for_tost(location, sd_a, sd_b, alpha, test=test, n_max=n_max)
        achieved = pw.power_tost(location, sd_a, sd_b, n, alpha, test=test) if n else math.nan
        note = "TOST at true difference 0"
    else:
        n = pw.n_for_power(location, sd_a, sd_b, alpha, test=test, n_max=n_max)
        achieved = pw.power_diff(location, sd_a, sd_b, n, alpha, test=test) if n else math.nan
        note = "rank: Welch approximation" if claim.test == "rank" else ""
    if n is None:
        note = f"n > {n_max}"
    runs = None if n is None else (n if claim.test == "paired" else 2 * n)
    cpu_min = math.inf if runs is None else runs * seconds_per_run / CORES / 60
    detect = pw.detectable(sd_a, sd_b, min_seeds, alpha, test) if min_seeds >= 2 else math.nan
    detect = math.exp(detect) if ratio else detect
    room = pw.tost_room(location, sd_a, sd_b, min_seeds, alpha, test) if equivalence and min_seeds >= 2 else math.nan
    return row(n=n, power=achieved, detectable=detect, runs=runs, cpu_min=cpu_min,
               fits=cpu_min <= budget_min, tost_room=room, note=note)  # fmt: skip


def plan_claims(
    rules_like: PlanInput,
    values_by_claim: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    variant: str,
    seconds_per_run: float | Mapping[str, float],
    budget_min: float = BUDGET_MIN,
    n_max: int = pw.N_MAX,
) -> list[PlanRow]:
    """Plan every claim of ``rules_like`` from its pilot values ``values_by_claim[id] = (a, b)``,
    at α/k (k: the number of claims in its family, the cell Holm controls; all the claims when
    they name no cell). ``seconds_per_run``: one number, or one per claim id."""
    claims = rules_like.claims
    missing = [c.id for c in claims if c.id not in values_by_claim]
    if missing:
        raise ValueError(f"no pilot values for claim(s) {', '.join(missing)}; valid: {', '.join(values_by_claim)}")
    family = {c.cell: sum(1 for d in claims if d.cell == c.cell) for c in claims}
    rows = []
    for claim in claims:
        alpha = pw.alpha_for_family(rules_like.alpha, family[claim.cell])
        seconds = seconds_per_run[claim.id] if isinstance(seconds_per_run, Mapping) else seconds_per_run
        a, b = values_by_claim[claim.id]
        rows.append(plan_claim(claim, a, b, alpha, rules_like.min_seeds, variant, seconds, budget_min, n_max))
    return rows


def _g(v: float, digits: int = 3) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}g}"


def plan_table(rows: Sequence[PlanRow]) -> str:
    """The plan as a markdown table, one line per claim."""
    lines = [
        "| claim | test | pilot sd a; b | effect | α (Holm) | n/arm | power | detectable at min_seeds | runs "
        "| CPU min | fits | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sds = _g(r.sd_a) if r.test == "paired" else f"{_g(r.sd_a)}; {_g(r.sd_b)}"
        target = f"margin ±{_g(r.target)}" if r.equivalence else _g(r.target)
        at_min = f"TOST room {_g(r.tost_room)}" if r.equivalence else _g(r.detectable)
        cells = [r.id, r.test, sds, target, _g(r.alpha, 2), "—" if r.n is None else str(r.n), _g(r.power, 2),
                 f"{at_min} (n={r.min_seeds})", "—" if r.runs is None else str(r.runs),
                 "—" if math.isinf(r.cpu_min) else f"{r.cpu_min:.0f}", "yes" if r.fits else "no", r.note]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
