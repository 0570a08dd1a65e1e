"""The learning bounds (``learns:``, `normbench.analysis.judging.rules_schema.Rules.learning`) read against
the earlier runs before a run is planned: n is sized from the earlier table, and so is whether the
runs can pass the bound at all. bn_padding's confirmatory rerun (issue 56) set "test BLEU above 10"
from the task while its earlier runs topped out at 8.3 BLEU; every claim ended not judged. Here
`normbench-plan` says so before the run: per bound, how many earlier runs pass it, and a warning
when too few do. Every run of a compared arm must pass (`normbench.analysis.judging.verdicts.arm_learning`),
so the share is read per arm too: bn_padding's 400-step pilot passed 14 of 15 runs, above the pooled
90 %, and its one miss (9.56) fell in the arm five of its six claims compare (BN counting padding with
lengths mixed: 2 of 3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from normbench.analysis.judging.per_run import Row, registered_measure, select_rows
from normbench.analysis.judging.rules_schema import Arm, CheckRule
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

    def counted(self) -> str:
        return f"{self.passing} of {self.measured} earlier runs pass ({self.low:.3g} to {self.high:.3g})"

    def line(self) -> str:
        side = self.rule.bound
        if not self.measured:
            return f"{self.rule.id}: {side}: no earlier run measures it (its measure needs more than the table holds)"
        said = f"{self.rule.id}: {side}: {self.counted()}"
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


def arm_name(arm: Arm) -> str:
    """An arm as a reader tells it from the others: its label and what selects its runs (two claims'
    arms may share a label, e.g. "BN counting padding" with lengths mixed and bucketed)."""
    return f"{arm.label} ({', '.join(f'{k}={v}' for k, v in sorted(arm.select.items()))})"


def weak_arms(rule: CheckRule, arms: Sequence[Arm], rows: Sequence[Row]) -> list[tuple[str, BoundReach]]:
    """The distinct ``arms`` (by their selectors) whose earlier runs pass ``rule`` in fewer than
    `PASSING` of cases: each such arm would likely hold a failing run among its confirmatory seeds."""
    seen: dict[str, Arm] = {}
    for arm in arms:
        seen.setdefault(repr(sorted(arm.select.items())), arm)
    reaches = [(arm_name(a), bound_reach(rule, select_rows(rows, a.select))) for a in seen.values()]
    return [(name, r) for name, r in reaches if r.measured and not r.reachable]


def reach_lines(rules_learning: Sequence[CheckRule], rows: Sequence[Row], arms: Sequence[Arm] = ()) -> list[str]:
    """``[plan] <bound>: k of n earlier runs pass (lo to hi)`` per learning bound, with a warning
    where fewer than `PASSING` of them do; then one warning line per compared arm (``arms``: the
    judged claims' a and b) whose own runs pass it in fewer than `PASSING` of cases."""
    lines = []
    for rule in rules_learning:
        lines.append(f"[plan] {bound_reach(rule, rows).line()}")
        for name, reach in weak_arms(rule, arms, rows):
            lines.append(f"[plan] {rule.id}: warning: arm {name}: {reach.counted()}; every run of a compared arm "
                         "must pass, so at this share its claims would likely go not judged: lengthen the runs first")
    return lines
