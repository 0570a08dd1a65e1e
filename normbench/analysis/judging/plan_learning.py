"""The learning bounds (``learns:``, `normbench.analysis.judging.rules_schema.Rules.learning`) read against
the earlier runs before a run is planned: n is sized from the earlier table, and so is whether the
runs can pass the bound at all. bn_padding's confirmatory rerun (issue 56) set "test BLEU above 10"
from the task while its earlier runs topped out at 8.3 BLEU; every claim ended not judged. Here
`normbench-plan` says so before the run: per bound, how many earlier runs pass it, and a warning
when too few do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from normbench.analysis.judging.per_run import Row, registered_measure, select_rows
from normbench.analysis.judging.rules_schema import CheckRule
from normbench.analysis.judging.table_checks import ColumnMeasure, recomputed

PASSING = 0.9
"""The share of earlier runs that must pass a bound for the plan to call it reachable: a bound that
one run in ten misses already fails a confirmatory arm of 10 seeds with probability 1 − 0.9¹⁰ ≈ 0.65."""


@dataclass(frozen=True)
class BoundReach:
    """One learning bound against the earlier runs it applies to."""

    rule: CheckRule
    passing: int
    measured: int
    low: float
    high: float

    @property
    def reachable(self) -> bool:
        return self.measured > 0 and self.passing >= PASSING * self.measured

    def line(self) -> str:
        side = self.rule.bound
        if not self.measured:
            return f"{self.rule.id}: {side}: no earlier run measures it (its measure needs more than the table holds)"
        said = (f"{self.rule.id}: {side}: {self.passing} of {self.measured} earlier runs pass "
                f"({self.low:.3g} to {self.high:.3g})")  # fmt: skip
        if self.reachable:
            return said
        return (f"{said}: warning: too few pass (fewer than {PASSING:.0%}); a confirmatory arm would fail it and "
                "leave its claims not judged: lengthen the runs or declare a bound this scale reaches, before the run")


def bound_reach(rule: CheckRule, rows: Sequence[Row]) -> BoundReach:
    """``rule`` against the finished ``rows`` it selects: its measure computed from each row alone."""
    spec = ColumnMeasure("", rule.select, rule.measure, registered_measure(rule.measure, rule.id), rule.params, None)
    finished = select_rows([r for r in rows if r.get("status") == "finished"], rule.select)
    values = [v for r in finished if (v := recomputed(spec, r)) is not None]
    good = sum(rule.passes(v) for v in values)
    return BoundReach(rule, good, len(values), min(values, default=0.0), max(values, default=0.0))


def reach_lines(rules_learning: Sequence[CheckRule], rows: Sequence[Row]) -> list[str]:
    """``[plan] <bound>: k of n earlier runs pass (lo to hi)`` per learning bound, with a warning
    where fewer than `PASSING` of them do."""
    return [f"[plan] {bound_reach(rule, rows).line()}" for rule in rules_learning]
