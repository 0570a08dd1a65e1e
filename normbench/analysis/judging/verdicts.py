"""What a verdict says beyond its word (issue 56): the effect of interest beside the difference the
design could detect at the family's level, a qualifier, the reason a claim is not judged, the
learning check of each compared arm, and whether the runs are confirmatory (fresh seeds).

- ``detectable_adj``: (t_{1−α'/2,ν} + t_{0.8,ν})·SE with α' = α/m, m the claim's Holm family size:
  Holm's first step, the conservative level every claim of the family is planned at
  (`normbench.analysis.judging.power.alpha_for_family`); SE and ν from the arms' own spreads
  (`normbench.analysis.judging.stats.detectable_difference`).
- `qualifier`: a significant result whose interval lies wholly between 0 (ratio: 1) and the effect
  of interest E is "smaller than the effect of interest" (mirrored for *opposite*: between 0 and
  −E); a non-significant one "could not detect the effect of interest" where ``detectable_adj``
  exceeds |E| (ratio: the larger of E and 1/E), else "smaller than the effect of interest" where
  the minimum-effect test (`normbench.analysis.judging.stats.p_min_effect`, one-sided at α) excludes E.
  An inconclusive equivalence claim "could not show equivalence at this n" where TOST at α/m could
  not pass even at an observed difference of 0 (`tost_cannot_pass`: `normbench.analysis.judging.power.tost_room`
  ≤ 0 with the arms' sample SDs and the smaller arm's n).
- Not judged: `REASONS`, each with its words (`REASON_TEXT`).
- Learning (`arm_learning`): every run of a compared arm that a learning bound of the variant
  selects must pass it; a diverged run is exempt (it enters the claim at its measure's worst value,
  the rules' divergence rule); a run whose value is NaN fails ("did not log"); a table without the
  bound's column was measured under other rules (a `ConfigError`).
- Seeds: rows of the rules' confirmatory block are confirmatory; others exploratory
  (`confirmatory`); `check_fresh_seeds` refuses a confirmatory attempt whose seeds an earlier
  attempt used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from normbench.analysis.judging.per_run import check_column, judged_here, select_rows
from normbench.analysis.judging.power import tost_room
from normbench.analysis.judging.rules_schema import CheckRule, ClaimRule, Rules
from normbench.analysis.judging.stats import DIFFERENT, INCONCLUSIVE, OPPOSITE, SUPPORTED
from normbench.base.errors import ConfigError
from normbench.rules import variant

NOT_RUN, DID_NOT_LEARN, CHECK_FAILED, TOO_FEW_SEEDS, SEEDS_REUSED = (
    "not_run", "did_not_learn", "check_failed", "too_few_seeds", "seeds_reused")  # fmt: skip
REASONS = (NOT_RUN, DID_NOT_LEARN, CHECK_FAILED, TOO_FEW_SEEDS, SEEDS_REUSED)
REASON_TEXT = {
    NOT_RUN: "not run at this scale",
    DID_NOT_LEARN: "did not learn",
    CHECK_FAILED: "setup check failed",
    TOO_FEW_SEEDS: "too few seeds",
    SEEDS_REUSED: "seeds reused from an earlier attempt",
}
SMALLER = "smaller than the effect of interest"
UNDETECTABLE = "could not detect the effect of interest"
NO_TOST_ROOM = "could not show equivalence at this n"

Row = dict[str, Any]


def _magnitude(effect: float, ratio: bool) -> float:
    """|E| on the difference scale; for a ratio, the multiple away from 1 (E or 1/E, whichever ≥ 1)."""
    return max(effect, 1 / effect) if ratio else abs(effect)


def qualifier(verdict: str, relation: str, lo: float, hi: float, ratio: bool, effect: float | None,
              detectable_adj: float, p_min: float, alpha: float) -> str:  # fmt: skip
    """The words that refine a judged verdict (module docstring); empty where none applies."""
    if effect is None or relation == "equivalent" or any(map(math.isnan, (lo, hi))):
        return ""
    null = 1.0 if ratio else 0.0
    mirrored = 1 / effect if ratio else -effect
    if verdict in (SUPPORTED, OPPOSITE, DIFFERENT):
        # the interval wholly between 0 and E (opposite: −E; two-sided: E on the estimate's side)
        side = {SUPPORTED: effect, OPPOSITE: mirrored}.get(verdict)
        if side is None:
            up = max(effect, mirrored)
            side = up if lo > null else min(effect, mirrored)
        low, high = sorted((null, side))
        return SMALLER if low <= lo and hi <= high else ""
    if verdict == INCONCLUSIVE:
        if not math.isnan(detectable_adj) and _magnitude(detectable_adj, ratio) > _magnitude(effect, ratio):
            return UNDETECTABLE
        if not math.isnan(p_min) and p_min < alpha:
            return SMALLER
    return ""


def tost_cannot_pass(a_values: Sequence[float], b_values: Sequence[float], test: str, margin: float,
                     alpha: float) -> bool:  # fmt: skip
    """Whether TOST at ``alpha`` could not pass even at an observed difference of 0: m − t_{1−α,ν}·SE ≤ 0
    (`power.tost_room`) with the arms' sample SDs (``paired``: of the differences; ``welch_log``: of
    the logs) and the smaller arm's n; diverged (±inf) values left out."""
    a, b = np.asarray(a_values, dtype=float), np.asarray(b_values, dtype=float)
    if test == "paired":
        d = (a - b)[np.isfinite(a - b)]
        sds, n = (float(d.std(ddof=1)) if d.size > 1 else 0.0, None), int(d.size)
    else:
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if test == "welch_log":
            a, b = np.log(a[a > 0]), np.log(b[b > 0])
        sds, n = tuple(float(v.std(ddof=1)) if v.size > 1 else 0.0 for v in (a, b)), min(a.size, b.size)
    try:
        return tost_room(margin, sds[0], sds[1], n, alpha, "welch" if test == "rank" else test) <= 0
    except ValueError:  # fewer than 2 values, or no spread at all: TOST's room is not what stops it
        return False


def arm_learning(rows: Sequence[Row], bounds: Iterable[CheckRule], preset: str, label: str) -> str:
    """Why the arm (``rows``, labelled ``label``) did not learn, in one phrase; empty when every
    run a bound of ``preset``'s variant selects passes it (diverged runs exempt)."""
    for bound in (b for b in bounds if judged_here(b.variants, preset)):
        for row in select_rows([r for r in rows if r.get("status") != "diverged"], bound.select):
            value = row.get(check_column(bound))
            key = bound.params.get("key", bound.measure)
            if value is None:
                raise ConfigError(f"no value of {check_column(bound)} for {row['source']} (seed {row['seed']}): the "
                                  "per-run table was not measured for these rules")  # fmt: skip
            if math.isnan(float(value)):
                return f"{label} did not learn ({bound.id}: seed {row['seed']} did not log {key})"
            if not bound.passes(float(value)):
                return f"{label} did not learn ({key} {float(value):.3g} at seed {row['seed']}, needs {bound.bound})"
    return ""


def confirmatory(rules: Rules, preset: str, seeds: Iterable[int]) -> bool:
    """Whether runs of these ``seeds`` are a confirmatory attempt: current (not superseded) rules
    that name a block for ``preset``'s variant, and every seed inside it."""
    block = rules.seeds.get(variant(preset))
    seeds = list(seeds)
    return not rules.superseded and block is not None and bool(seeds) and all(s in block for s in seeds)


def check_fresh_seeds(rules: Rules, earlier_seeds: Iterable[int], rows: Sequence[Row]) -> None:
    """A one-line `ConfigError` when the confirmatory runs among ``rows`` (seeds of the rules'
    block of any variant) reuse a seed of an earlier attempt (``earlier_seeds``: every seed the
    preset's earlier ``per_run.csv`` files and pilots hold)."""
    earlier = set(earlier_seeds)
    blocks = list(rules.seeds.values())
    fresh = {r["seed"] for r in rows if any(r["seed"] in b for b in blocks)}
    if reused := sorted(fresh & earlier):
        raise ConfigError(f"{rules.preset}: the confirmatory seeds {reused} were used by an earlier attempt; "
                          f"a confirmatory attempt runs seeds no earlier attempt used (next free in the block: "
                          f"{_next_free(blocks, earlier | fresh)})")  # fmt: skip


def _next_free(blocks: Sequence[Any], used: set[int]) -> str:
    free = [s for b in blocks for s in range(b.start, b.stop) if s not in used]
    return str(free[0]) if free else "none: name a new block in the rules"


def family_sizes(rules: Rules, judged: Sequence[ClaimRule]) -> dict[str, int]:
    """The number of judged claims in each Holm family (``cell``) of ``judged``."""
    sizes: dict[str, int] = {}
    for rule in judged:
        sizes[rule.cell] = sizes.get(rule.cell, 0) + 1
    return sizes
