"""normbench-plan reads each learning bound against the earlier runs (`normbench.analysis.judging.plan_learning`):
bn_padding's confirmatory attempt set test BLEU above 10 where its earlier runs reached 8.3 at most, and
every claim ended not judged; the plan now says how many earlier runs pass and warns when too few do."""

from __future__ import annotations

import pytest

from normbench.analysis.judging.plan_learning import PASSING, bound_reach, reach_lines
from normbench.analysis.judging.rules_schema import Arm, CheckRule


def _rule(above: float | None = None, below: float | None = None, select: dict | None = None) -> CheckRule:
    return CheckRule("learns_translation", "", "", "final", {"key": "test/bleu"}, select or {}, below, above)


def _rows(bleus: list[float], status: str = "finished", norm: str = "bn") -> list[dict]:
    return [{"source": str(i), "seed": i, "status": status, "norm.name": norm, "final:test/bleu": b}
            for i, b in enumerate(bleus)]  # fmt: skip


def test_a_bound_no_earlier_run_reaches_is_counted_and_warned() -> None:
    bleus = [4.1, 5.7, 8.3, 6.0]
    reach = bound_reach(_rule(above=10.0), _rows(bleus))
    assert (reach.passing, reach.measured, reach.low, reach.high) == (0, 4, min(bleus), max(bleus))
    (line,) = reach_lines([_rule(above=10.0)], _rows(bleus))
    assert line.startswith("[plan] learns_translation: above 10: 0 of 4 earlier runs pass (4.1 to 8.3): warning")


@pytest.mark.parametrize(("bleus", "warned"), [([11.0] * 9 + [9.0], False), ([11.0] * 8 + [9.0, 9.5], True)])
def test_reachable_means_at_least_the_passing_share(bleus: list[float], warned: bool) -> None:
    reach = bound_reach(_rule(above=10.0), _rows(bleus))
    assert reach.passing == sum(b > 10.0 for b in bleus)
    assert reach.reachable == (reach.passing >= PASSING * len(bleus)) == (not warned)
    assert ("warning" in reach.line()) == warned


def test_only_finished_runs_of_the_selected_arm_count_and_below_bounds_read_as_below() -> None:
    rows = _rows([3.0, 300.0]) + _rows([900.0], status="diverged") + _rows([1000.0], norm="ln")
    reach = bound_reach(CheckRule("ppl", "", "", "final", {"key": "test/bleu"}, {"norm.name": "bn"}, 200.0), rows)
    assert (reach.passing, reach.measured) == (1, 2)  # 3 < 200 passes; the diverged run and the LN run left out


def test_a_compared_arm_whose_own_runs_miss_the_bound_is_warned_by_name() -> None:
    # pooled 14 of 15 pass (above the 90 % share), but the misses sit in one arm: bn_padding's 400-step pilot
    rows = _rows([12.0, 13.0, 14.0] * 4) + _rows([9.5, 11.0, 12.0], norm="pbn")
    padded, masked = Arm("BN", {"norm.name": "pbn"}), Arm("BN", {"norm.name": "bn"})
    lines = reach_lines([_rule(above=10.0)], rows, [padded, masked, Arm("again", {"norm.name": "pbn"})])
    assert "warning" not in lines[0] and "14 of 15" in lines[0]
    assert len(lines) == 2  # one line for the weak arm, counted once though two claims name it
    assert "arm BN (norm.name=pbn): 2 of 3 earlier runs pass (9.5 to 12)" in lines[1]
    assert reach_lines([_rule(above=10.0)], rows, [masked]) == lines[:1]  # the arm whose runs all pass: no warning
