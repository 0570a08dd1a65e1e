"""Issue 56, judging: every claim whose arms ran is judged; beside its verdict the effect of
interest, the difference detectable at the family's Holm level, a qualifier and the reason a claim
is not judged; the learning check of each compared arm; fresh seeds; Benjamini–Hochberg. Every
number is checked against scipy (Welch's t test, t quantiles, false_discovery_control)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from normbench.analysis.judging.claims import CSV_FIELDS, csv_row
from normbench.analysis.judging.rules_schema import parse_rules
from normbench.analysis.judging.stats import (
    INCONCLUSIVE,
    NOT_JUDGED,
    OPPOSITE,
    SUPPORTED,
    benjamini_hochberg,
    compare,
    detectable_difference,
    p_min_effect,
)
from normbench.analysis.judging.verdicts import SMALLER, UNDETECTABLE, check_fresh_seeds, qualifier
from normbench.analysis.loading.runs import Run
from normbench.base.errors import ConfigError
from tests.analysis.judging.test_rules_schema import by_id, claim, rules_data, use_rules

NEW_COLUMNS = ("effect", "detectable_adj", "detectable_planned", "qualifier", "reason", "p_min_effect", "confirmatory")


def arm_runs(values: dict[str, list[float]], seeds: tuple[int, ...] | None = None, **status: str) -> list[Run]:
    """Per norm, one run per value: final val/acc = the value (seeds 0.. or ``seeds``)."""
    out = []
    for norm, vals in values.items():
        for i, v in enumerate(vals):
            s = seeds[i] if seeds else i
            out.append(Run(f"{norm}{s}", {"norm": {"name": norm}, "seed": s}, [{"step": 10, "val/acc": v}],
                           {"status": status.get(f"{norm}{s}", "finished")}, source=f"runs/{norm}/{s}"))  # fmt: skip
    return out


def welch_detectable(a: np.ndarray, b: np.ndarray, alpha: float) -> float:
    """(t_{1−α/2,ν} + t_{0.8,ν})·SE by hand (Welch–Satterthwaite ν)."""
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    return (sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(0.8, df)) * math.sqrt(va + vb)


# ----------------------------------------------------------------------------- pure functions


def test_benjamini_hochberg_matches_a_hand_computation_and_scipy() -> None:
    ps = [0.01, 0.04, 0.03, 0.005, 0.2]
    # sorted 0.005, 0.01, 0.03, 0.04, 0.2: m·p/rank = 0.025, 0.025, 0.05, 0.05, 0.2 (already monotone)
    assert benjamini_hochberg(ps) == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.2])
    rng = np.random.default_rng(3)
    many = list(rng.uniform(0, 0.2, 30))
    assert benjamini_hochberg(many) == pytest.approx(list(sps.false_discovery_control(many)), rel=1e-12)
    with_nan = benjamini_hochberg([0.5, math.nan, 0.01])  # NaN: out of the family (m = 2), stays NaN
    assert math.isnan(with_nan[1]) and with_nan[::2] == pytest.approx([0.5, 0.02])


@pytest.mark.parametrize("m", [1, 3, 7])
def test_detectable_at_the_family_level_is_the_welch_formula_at_alpha_over_m(m: int) -> None:
    a, b = np.array([1.0, 1.4, 0.8, 1.1, 1.3]), np.array([0.2, 0.9, 0.4, 0.6, 0.1, 0.5])
    assert detectable_difference(a, b, "welch", 0.05 / m) == pytest.approx(welch_detectable(a, b, 0.05 / m), rel=1e-12)
    assert detectable_difference(a, b, "welch", 0.05) == pytest.approx(compare(a, b, "welch").detectable, rel=1e-12)
    ratio = detectable_difference(a + 1, b + 1, "welch_log", 0.05 / m)  # a ratio: exp of the logs' detectable
    assert ratio == pytest.approx(math.exp(welch_detectable(np.log(a + 1), np.log(b + 1), 0.05 / m)), rel=1e-12)


def test_the_minimum_effect_test_is_welchs_one_sided_test_against_the_effect() -> None:
    a, b = np.array([0.51, 0.49, 0.50, 0.52, 0.48]), np.array([0.50, 0.47, 0.51, 0.49, 0.50])
    e = 0.05  # a claimed "a greater by 0.05": H0 d ≥ 0.05 against d < 0.05
    want = sps.ttest_ind(a, b + e, equal_var=False, alternative="less").pvalue
    assert p_min_effect(a, b, "welch", e, "greater") == pytest.approx(want, rel=1e-10)
    want = sps.ttest_ind(a, b - e, equal_var=False, alternative="greater").pvalue  # "less" by 0.05: H0 d ≤ −0.05
    assert p_min_effect(a, b, "welch", -e, "less") == pytest.approx(want, rel=1e-10)
    two = max(sps.ttest_ind(a, b + e, equal_var=False, alternative="less").pvalue,
              sps.ttest_ind(a, b - e, equal_var=False, alternative="greater").pvalue)  # fmt: skip
    assert p_min_effect(a, b, "welch", e, "differs") == pytest.approx(two, rel=1e-10)
    la, lb = np.log(a), np.log(b)  # a ratio of 1.1: Welch on the logs against ln 1.1
    want = sps.ttest_ind(la, lb + math.log(1.1), equal_var=False, alternative="less").pvalue
    assert p_min_effect(a, b, "welch_log", 1.1, "greater") == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize(
    "verdict, lo, hi, detectable, p_min, want",
    [
        (SUPPORTED, 0.01, 0.04, 0.03, 0.5, SMALLER),  # wholly between 0 and E = 0.05
        (SUPPORTED, 0.01, 0.06, 0.03, 0.5, ""),  # reaches past E
        (OPPOSITE, -0.04, -0.01, 0.03, 0.5, SMALLER),  # mirrored: between −E and 0
        (OPPOSITE, -0.07, -0.01, 0.03, 0.5, ""),
        (INCONCLUSIVE, -0.02, 0.09, 0.08, 0.5, UNDETECTABLE),  # the design detects only 0.08 > 0.05
        (INCONCLUSIVE, -0.01, 0.02, 0.03, 0.01, SMALLER),  # detectable 0.03 ≤ E and the min-effect test excludes E
        (INCONCLUSIVE, -0.01, 0.02, 0.03, 0.2, ""),
    ],
)
def test_the_qualifier_vocabulary(verdict: str, lo: float, hi: float, detectable: float, p_min: float,
                                  want: str) -> None:  # fmt: skip
    assert qualifier(verdict, "greater", lo, hi, False, 0.05, detectable, p_min, 0.05) == want


def test_a_ratio_qualifier_reads_multiples() -> None:
    assert qualifier(SUPPORTED, "greater", 1.1, 1.4, True, 1.5, 1.3, 0.5, 0.05) == SMALLER
    assert qualifier(OPPOSITE, "greater", 0.8, 0.95, True, 1.5, 1.3, 0.5, 0.05) == SMALLER  # within [1/1.5, 1]
    assert qualifier(INCONCLUSIVE, "less", 0.7, 1.2, True, 0.5, 2.5, 0.5, 0.05) == UNDETECTABLE  # 2.5× > 2×


# ----------------------------------------------------------------------------- judging


def test_a_judged_claim_carries_effect_detectable_at_holm_level_and_min_effect_p(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two claims, one Holm family (m = 2): the numbers in claims.csv against scipy."""
    data = rules_data()
    data["claims"][0]["effect"] = {"value": 0.3, "smallest": "what matters"}
    data["claims"][0]["detectable"] = {"cpu": 0.12}
    data["claims"].append(claim("ln_above", "ln", effect={"value": 0.3, "smallest": "what matters"}))
    use_rules(monkeypatch, data)
    bn, ln, none = [0.62, 0.60, 0.65, 0.61, 0.63], [0.50, 0.58, 0.44, 0.55, 0.49], [0.50, 0.52, 0.49, 0.51, 0.47]
    got = by_id("demo_cpu", arm_runs({"bn": bn, "ln": ln, "none": none}))
    c = got["bn_above"]
    a, b = np.array(bn), np.array(none)
    res = sps.ttest_ind(a, b, equal_var=False)
    lo, hi = res.confidence_interval(0.95)
    assert (c.comparison.lo, c.comparison.hi) == pytest.approx((lo, hi), rel=1e-10)
    assert c.verdict == SUPPORTED and c.qualifier == SMALLER  # [0.07, 0.17]: wholly between 0 and 0.3
    assert c.detectable_adj == pytest.approx(welch_detectable(a, b, 0.05 / 2), rel=1e-10)
    want = sps.ttest_ind(a, b + 0.3, equal_var=False, alternative="less").pvalue
    assert c.p_min_effect == pytest.approx(want, rel=1e-10)
    row = csv_row(c)
    assert (row["effect"], row["detectable_planned"], row["reason"]) == (0.3, 0.12, "")
    assert got["ln_above"].detectable_planned is None and csv_row(got["ln_above"])["detectable_planned"] == ""
    assert CSV_FIELDS[-len(NEW_COLUMNS) :] == NEW_COLUMNS


def test_an_underpowered_claim_says_it_could_not_detect_the_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    data = rules_data()
    data["claims"][0]["effect"] = {"value": 0.05, "smallest": "five points"}
    use_rules(monkeypatch, data)
    bn, none = [0.6, 0.4, 0.7, 0.45, 0.55], [0.5, 0.62, 0.38, 0.58, 0.45]
    c = by_id("demo_cpu", arm_runs({"bn": bn, "none": none}))["bn_above"]
    assert sps.ttest_ind(bn, none, equal_var=False).pvalue > 0.05 and c.verdict == INCONCLUSIVE
    assert c.detectable_adj == pytest.approx(welch_detectable(np.array(bn), np.array(none), 0.05), rel=1e-10)
    assert c.detectable_adj > 0.05 and c.qualifier == UNDETECTABLE


def test_an_arm_that_did_not_learn_leaves_its_claims_not_judged_and_out_of_the_family(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = rules_data(learns=[{"id": "learns", "measure": {"name": "final", "key": "val/acc"}, "above": 0.2,
                               "why": "2x chance (10 classes)"}])  # fmt: skip
    data["claims"][0]["relation"] = "less"
    data["claims"][0]["effect"] = {"value": -0.05, "smallest": "five points"}
    data["claims"].append(claim("ln_above", "ln", effect={"value": 0.05, "smallest": "five points"}))
    data["claims"][1]["b"] = {"label": "BN", "select": {"norm.name": "bn"}}
    use_rules(monkeypatch, data)
    chance = [0.10, 0.11, 0.10, 0.09, 0.10]
    got = by_id("demo_cpu", arm_runs({"bn": [0.5, 0.52, 0.51, 0.49, 0.5], "none": chance,
                                      "ln": [0.6, 0.62, 0.61, 0.59, 0.6]}))  # fmt: skip
    stuck = got["bn_above"]
    assert stuck.verdict == NOT_JUDGED and stuck.reason == "did_not_learn"
    assert stuck.qualifier == "plain did not learn" and "needs above 0.2" in stuck.note
    assert stuck.comparison is not None and math.isnan(stuck.p_holm)  # numbers kept, out of the family
    ln = got["ln_above"]
    assert ln.verdict == SUPPORTED and ln.p_holm == pytest.approx(ln.comparison.p)  # a family of one


def test_a_diverged_run_is_exempt_from_the_learning_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    data = rules_data(learns=[{"id": "learns", "measure": {"name": "final", "key": "val/acc"}, "above": 0.2,
                               "why": "2x chance"}])  # fmt: skip
    use_rules(monkeypatch, data)
    rs = arm_runs({"bn": [0.5, 0.52, 0.51, 0.49, 0.5], "none": [0.3, 0.31, 0.05, 0.29, 0.3]}, none2="diverged")
    c = by_id("demo_cpu", rs)["bn_above"]
    assert c.reason == "" and c.verdict == SUPPORTED and c.test == "rank"


def test_too_few_seeds_and_reused_seeds_are_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    use_rules(monkeypatch, rules_data())
    few = by_id("demo_cpu", arm_runs({"bn": [0.5, 0.6, 0.55], "none": [0.4, 0.45, 0.42]}))["bn_above"]
    assert few.verdict == NOT_JUDGED and few.reason == "too_few_seeds"
    from normbench.analysis.judging.claims import judge

    rs = arm_runs({"bn": [0.5, 0.52, 0.51, 0.49, 0.5], "none": [0.3, 0.31, 0.3, 0.29, 0.3]})
    reused = {c.id: c for c in judge("demo_cpu", rs)}["bn_above"]
    assert reused.verdict == SUPPORTED
    from normbench.analysis.judging.claims import judge_rows, per_run_rows

    again = {c.id: c for c in judge_rows("demo_cpu", per_run_rows("demo_cpu", rs), earlier_seeds=[3])}["bn_above"]
    assert again.verdict == NOT_JUDGED and again.reason == "seeds_reused"


def test_confirmatory_only_inside_the_rules_seed_block(monkeypatch: pytest.MonkeyPatch) -> None:
    use_rules(monkeypatch, rules_data(seeds={"cpu": {"start": 1000, "stop": 1100}}))
    values = {"bn": [0.5, 0.52, 0.51, 0.49, 0.5], "none": [0.3, 0.31, 0.3, 0.29, 0.3]}
    inside = by_id("demo_cpu", arm_runs(values, seeds=(1000, 1001, 1002, 1003, 1004)))["bn_above"]
    outside = by_id("demo_cpu", arm_runs(values))["bn_above"]
    full = by_id("demo", arm_runs(values, seeds=(1000, 1001, 1002, 1003, 1004)))["bn_above"]  # no full block
    assert (inside.confirmatory, outside.confirmatory, full.confirmatory) == (True, False, False)
    assert csv_row(inside)["confirmatory"] is True


def rules_with_block(**extra: Any):
    return parse_rules(rules_data(seeds={"cpu": {"start": 1000, "stop": 1010}}, **extra), "demo_cpu", "h0")


def test_check_fresh_seeds_refuses_a_confirmatory_attempt_reusing_an_earlier_seed() -> None:
    rules = rules_with_block()
    rows = [{"seed": s} for s in (1000, 1001, 1002)]
    check_fresh_seeds(rules, earlier_seeds=[0, 1, 2, 100, 101], rows=rows)  # fresh: no error
    with pytest.raises(ConfigError, match=r"confirmatory seeds \[1001\] were used by an earlier attempt") as e:
        check_fresh_seeds(rules, earlier_seeds=[0, 1001], rows=rows)
    assert "\n" not in str(e.value) and "1003" in str(e.value)  # the next free seed of the block
    check_fresh_seeds(rules, earlier_seeds=[3], rows=[{"seed": 3}])  # an exploratory attempt: not refused


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"seeds": {"cpu": {"start": 10, "stop": 5}}}, "stop > start"),
        ({"seeds": {"gpu": {"start": 1, "stop": 5}}}, "unknown key 'gpu'"),
        ({"benchmark_family": {"method": "holm", "q": 0.05}}, "valid choices: bh"),
        ({"benchmark_family": {"method": "bh", "q": 1.5}}, "0 < q < 1"),
        ({"learns": [{"id": "x", "measure": "final", "why": "w"}]}, "exactly one of 'below' and 'above'"),
        ({"learns": [{"id": "x", "measure": "final", "above": 1, "why": " "}]}, "why must say"),
    ],
)
def test_bad_judging_keys_are_one_line_errors(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        parse_rules(rules_data(**extra), "demo_cpu", "h0")
    assert "\n" not in str(e.value)


def test_judging_keys_parse() -> None:
    bound = {"id": "lx", "measure": {"name": "final", "key": "val/acc"}, "above": 0.2,
             "select": {"norm.name": "bn"}, "variants": ["cpu"], "why": "2x chance"}  # fmt: skip
    rules = rules_with_block(benchmark_family={"method": "bh", "q": 0.05}, learns=[bound])
    assert rules.benchmark_family.method == "bh" and rules.benchmark_family.q == 0.05
    (bound,) = rules.learning
    assert (bound.id, bound.measure, bound.params, bound.above, bound.select, bound.variants) == (
        "lx", "final", {"key": "val/acc"}, 0.2, {"norm.name": "bn"}, ("cpu",))  # fmt: skip
    assert rules.measured_checks == rules.checks + rules.learning and 1005 in rules.seeds["cpu"]
    assert 1010 not in rules.seeds["cpu"]


@pytest.mark.parametrize("brn, verdict", [(0.49, "passed"), (0.45, "failed")])
def test_an_arm_against_arm_check_gates_only_the_claims_it_names(
    monkeypatch: pytest.MonkeyPatch, brn: float, verdict: str
) -> None:
    """Batch Renorm within 0.03 of BN (issue 56 item 7): BN's mean 0.5; BRN 0.49 passes, 0.45 fails
    and leaves only the claim it gates not judged (check_failed)."""
    data = rules_data()
    data["claims"].append(claim("brn_above", "brn", effect={"value": 0.05, "smallest": "five points"}))
    data["checks"] = [{"id": "brn_tracks_bn", "figure": "f", "claim": "BRN tracks BN",
                       "measure": {"name": "final", "key": "val/acc"}, "select": {},
                       "tracks": {"a": {"norm.name": "brn"}, "b": {"norm.name": "bn"}, "within": 0.03},
                       "gates": ["brn_above"]}]  # fmt: skip
    use_rules(monkeypatch, data)
    spread = [-0.02, -0.01, 0.0, 0.01, 0.02]
    got = by_id("demo_cpu", arm_runs({"bn": [0.5 + d for d in spread], "brn": [brn + d for d in spread],
                                      "none": [0.3 + d for d in spread]}))  # fmt: skip
    check = got["brn_tracks_bn"]
    assert check.verdict == verdict and f"{abs(0.5 - brn):.3g} apart" in check.note
    assert got["bn_above"].verdict == SUPPORTED  # not gated
    gated = got["brn_above"]
    assert (gated.verdict, gated.reason) == ((SUPPORTED, "") if verdict == "passed" else (NOT_JUDGED, "check_failed"))


def test_a_check_gating_an_unknown_claim_is_refused() -> None:
    data = rules_data(checks=[{"id": "c", "figure": "f", "claim": "c", "measure": "final", "select": {},
                               "above": 0.1, "gates": ["nope"]}])  # fmt: skip
    with pytest.raises(ConfigError, match="gates 'nope', which is no claim id"):
        parse_rules(data, "demo_cpu", "h0")


@pytest.mark.parametrize("spread, blocked", [(0.05, True), (0.004, False)])
def test_an_equivalence_tost_cannot_pass_at_this_n_is_said(
    monkeypatch: pytest.MonkeyPatch, spread: float, blocked: bool
) -> None:
    """TOST at Holm's α/m (m = 2) cannot pass even at an observed difference of 0 when
    t_{1−α/2,ν}·SE ≥ the margin (scipy's t quantile, Welch's SE and ν by hand)."""
    data = rules_data()
    data["claims"].append(claim("ln_same", "ln", relation="equivalent", margin=0.01))
    use_rules(monkeypatch, data)
    offsets = np.array([-2, -1, 0, 1, 2]) * spread
    ln, none = 0.5 + offsets + 0.006, 0.5 + offsets[::-1] * 0.9
    got = by_id("demo_cpu", arm_runs({"bn": list(0.7 + offsets), "ln": list(ln), "none": list(none)}))
    va, vb = ln.var(ddof=1) / 5, none.var(ddof=1) / 5
    df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 4)
    room = 0.01 - sps.t.ppf(1 - 0.05 / 2, df) * math.sqrt(va + vb)
    c = got["ln_same"]
    assert (room <= 0) == blocked and c.verdict == INCONCLUSIVE and c.effect == 0.01
    assert c.qualifier == ("could not show equivalence at this n" if blocked else "")
