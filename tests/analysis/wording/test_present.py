"""Numbers as people read them (`normbench.analysis.wording.present`) and the unit of every measure
(`normbench.analysis.wording.units`): no e-notation, 2–3 significant digits, a difference signed toward
its claim with its arms named, fractions in percentage points."""

from __future__ import annotations

import math
import random
import re

import pytest

from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.wording.present import (
    arm_name,
    effect_text,
    level_text,
    num,
    p_text,
    ratio_num,
    readable,
    signed,
)
from normbench.analysis.wording.units import BLEU, UNITS, Unit, rule_unit, unit_of
from normbench.rules import list_rule_presets

POINTS = Unit("validation accuracy", 100.0, " %", " pts")
E_NOTATION = re.compile(r"\d[eE][+-]?\d")


def back(text: str) -> float:
    """``num``'s text read back as a float (U+2212, thousands separators, × 10ⁿ)."""
    text = text.replace("−", "-").replace(",", "")
    m = re.fullmatch(r"(-?[\d.]+) × 10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)", text)
    if m:
        exponent = m[2].translate(str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789"))
        return float(m[1]) * 10.0 ** int(exponent)
    return float(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (4.274234e-06, "4.3 × 10⁻⁶"),
        (0.000134, "0.000134"),
        (0.0121, "0.0121"),
        (-0.02849, "−0.0285"),
        (1.0, "1"),
        (9.996, "10"),
        (12345.6, "12,300"),
        (9_200_000.0, "9,200,000"),
        (0.0, "0"),
        (math.nan, "n/a"),
        (-math.inf, "−∞"),
    ],
)
def test_num_writes_three_significant_digits_without_e_notation(value: float, text: str) -> None:
    assert num(value) == text


def test_num_reads_back_within_its_rounding_and_never_in_e_notation() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        v = rng.choice((-1, 1)) * 10 ** rng.uniform(-9, 9)
        text = num(v)
        assert not E_NOTATION.search(text), text
        digits = 2 if abs(v) < 1e-4 else 3  # below 10⁻⁴ the mantissa has 2 significant digits
        assert back(text) == pytest.approx(v, rel=0.5 * 10 ** (1 - digits) + 1e-12), (v, text)


def test_a_tiny_ratio_reads_as_its_reciprocal_and_p_values_are_bounded() -> None:
    assert ratio_num(4.274234e-06) == "1/230,000" and ratio_num(0.44) == "0.44" and ratio_num(234_000) == "234,000"
    assert p_text(3e-7) == "<0.0001" and p_text(0.03421) == "0.034" and p_text("") == "—"


def claim(**kw: str) -> dict[str, str]:
    return {"a": "BN", "b": "standard", "relation": "greater", "ratio": "False", **kw}


def test_a_less_claim_reads_b_minus_a_so_that_plus_is_its_direction() -> None:
    row = claim(relation="less", estimate="-0.0121", lo="-0.0209", hi="-0.0033")
    s = signed(row, POINTS)
    assert s is not None and s.arms == "standard − BN"
    assert (s.estimate, s.lo, s.hi) == pytest.approx((1.21, 0.33, 2.09))  # fractions × 100, the sign turned
    assert s.text() == "standard − BN: +1.21 pts [0.33, 2.09]"
    against = signed(claim(relation="less", estimate="0.552", lo="-0.666", hi="1.77"), BLEU)
    assert against is not None and against.text() == "standard − BN: −0.552 BLEU [−1.77, 0.666]"  # against the claim


def test_a_ratio_less_claim_reads_b_over_a_and_a_greater_one_a_over_b() -> None:
    s = signed(claim(relation="less", ratio="True", estimate="0.5", lo="0.4", hi="0.625"), Unit("β"))
    assert s is not None and s.arms == "standard / BN" and (s.estimate, s.lo, s.hi) == pytest.approx((2, 1.6, 2.5))
    g = signed(claim(ratio="True", estimate="0.438", lo="0.381", hi="0.504", a="NLP", b="CV"), Unit("g"))
    assert g is not None and g.text() == "NLP / CV: 0.438× [0.381, 0.504]"
    assert signed(claim(estimate=""), POINTS) is None


def test_arms_read_as_the_papers_name_them_never_as_code_names() -> None:
    row = claim(a="ln_sample", b="bn_linf", estimate="-0.1", lo="-0.2", hi="0")
    s = signed(row, POINTS)
    assert s is not None and s.arms == "LN (per sample) − ℓ∞ BN"
    assert readable("ResNet8: noise_only vs bn") == "ResNet8: noise only vs bn" and arm_name("pn_v") == "PN-V"


def test_effects_and_levels_in_natural_units() -> None:
    assert effect_text(-0.02, claim(relation="less"), POINTS) == "+2 pts"
    assert effect_text(0.5, claim(relation="less", ratio="True"), Unit("β")) == "2×"
    assert effect_text(1.0, claim(relation="equivalent"), BLEU) == "±1 BLEU"
    assert level_text("0.454", POINTS) == "45.4 %" and level_text("-1", Unit("lr", diff=" decades")) == "lr 0.1"


def rule_measures() -> list[tuple[str, str, dict]]:
    out = []
    for preset in list_rule_presets():
        rules = load_rules(preset)
        assert rules is not None
        for c in rules.claims:
            out.append((f"{preset}:{c.id}", c.measure, c.params))
            out += [(f"{preset}:{c.id}:{s}", arm.measure, arm.params) for s, arm in (("a", c.a), ("b", c.b))
                    if arm.measure]  # fmt: skip
        out += [(f"{preset}:{c.id}", c.measure, c.params) for c in rules.checks]
    return out


def test_every_measure_of_every_rules_file_declares_its_unit() -> None:
    """A new measure (or a new key of one) fails here until `normbench.analysis.wording.units.UNITS` gives it a unit."""
    missing = []
    for where, measure, params in rule_measures():
        try:
            rule_unit(measure, params)
        except KeyError as e:
            missing.append(f"{where}: {e}")
    assert not missing, missing
    with pytest.raises(KeyError, match="no unit"):
        unit_of({"name": "something_new", "key": "x/y"})


def test_fractions_are_read_in_points_and_no_axis_title_is_a_metric_key() -> None:
    for key in (("final", "val/acc"), ("train_test_gap", None), ("best_over_lr", None), ("saturated_fraction", None)):
        assert UNITS[key].scale == 100.0 and UNITS[key].diff == " pts"
    assert UNITS[("error", None)].scale == 1.0  # already in percent
    for unit in UNITS.values():
        assert not re.search(r"\w/\w|_", unit.title + unit.panel), unit  # words, not val/acc or best_over_lr


def test_an_arm_has_one_name_on_every_page_and_no_two_norms_share_one() -> None:
    """The claims pages and the figures read one table (`figure_names.ARM_NAMES`), and every registered
    norm is in it under a name of its own."""
    from normbench.analysis.wording import figure_names, present
    from normbench.norms import list_norms

    assert present.NORM_NAMES is figure_names.ARM_NAMES
    assert set(list_norms()) <= set(figure_names.ARM_NAMES)
    assert len(set(figure_names.ARM_NAMES.values())) == len(figure_names.ARM_NAMES)
    assert present.arm_name("ln_sample") == figure_names.arm_name("ln_sample") == "LN (per sample)"
