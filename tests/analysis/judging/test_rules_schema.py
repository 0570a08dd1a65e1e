"""The rules files' schema (issue 43): the plan keys parsed into typed fields, unknown keys refused
in one line, what a plan still lacks listed; and how judging uses them: setup checks gate every
verdict, ``full_scale_only`` claims stay out of the ``_cpu`` variant's Holm family, pilot seeds are
refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from normbench.analysis.judging import claims as claims_module
from normbench.analysis.judging import rules_schema
from normbench.analysis.judging.claims import FAILED, PASSED, judge
from normbench.analysis.judging.rules_schema import Effect, FullScaleOnly, load_rules, missing_plan_keys, parse_rules
from normbench.analysis.judging.stats import NOT_JUDGED, SUPPORTED, holm
from normbench.analysis.loading.runs import Run
from normbench.base.errors import ConfigError
from normbench.rules import list_rule_presets

SEEDS = (0, 1, 2, 3, 4)


def claim(cid: str, better_norm: str = "bn", **extra: Any) -> dict[str, Any]:
    """A directional claim: ``better_norm``'s final val/acc above the plain network's."""
    return {"id": cid, "figure": "f", "claim": f"{cid} claim", "paper": "p",
            "measure": {"name": "final", "key": "val/acc"},
            "a": {"label": better_norm.upper(), "select": {"norm.name": better_norm}},
            "b": {"label": "plain", "select": {"norm.name": "none"}},
            "relation": "greater", "better": "higher", "test": "welch", **extra}  # fmt: skip


def rules_data(**extra: Any) -> dict[str, Any]:
    return {"preset": "demo", "alpha": 0.05, "min_seeds": 5, "paper_title": "Doe et al. 2020",
            "scale": {"full": {"kind": "paper"}, "cpu": {"kind": "reduced", "note": "small"}},
            "claims": [claim("bn_above", effect={"value": 0.05, "source": "Doe et al. 2020, Table 1"})],
            **extra}  # fmt: skip


def use_rules(monkeypatch: pytest.MonkeyPatch, data: dict[str, Any]) -> None:
    monkeypatch.setattr(rules_schema, "load_rules_data", lambda preset: copy.deepcopy(data))
    monkeypatch.setattr(rules_schema, "rules_hash", lambda preset: "h0")


def runs(acc: dict[str, float], train: float = 0.99, seeds: tuple[int, ...] = SEEDS) -> list[Run]:
    """Per norm and seed: final val/acc ``acc[norm] + 0.01 * seed``, train/acc ``train``."""
    return [Run(f"{norm}{s}", {"norm": {"name": norm}, "seed": s},
                [{"step": 10, "val/acc": a + 0.01 * s, "train/acc": train}], {"status": "finished"},
                source=f"runs/{norm}/{s}") for norm, a in acc.items() for s in seeds]  # fmt: skip


def by_id(preset: str, rs: list[Run], **kw: Any) -> dict[str, claims_module.Claim]:
    return {c.id: c for c in judge(preset, rs, **kw)}


# ------------------------------------------------------------------------------- parsing


def test_plan_keys_are_parsed_into_typed_fields() -> None:
    data = rules_data(pilot={"seeds": [100, 101, 102], "note": "before the runs"})
    data["claims"][0].update(short="BN above plain", n={"cpu": 8, "full": 5},
                             full_scale_only={"needs_n": 40, "why": "the clock needs quiet machines"})  # fmt: skip
    data["claims"].append(claim("ln_above", "ln", effect={"value": 1.07, "smallest": "7 %: what a user notices"}))
    data["checks"] = [{"id": "fits", "figure": "f", "claim": "fits", "measure": {"name": "final", "key": "train/acc"},
                       "select": {"norm.name": "bn"}, "above": 0.9, "variants": ["cpu"]}]  # fmt: skip
    rules = parse_rules(data, "demo_cpu", "h0")
    assert rules.paper_title == "Doe et al. 2020" and rules.pilot_seeds == (100, 101, 102)
    bn, ln = rules.claims
    assert bn.short == "BN above plain" and ln.short == "ln_above"  # the id where no short is given
    assert bn.effect == Effect(0.05, source="Doe et al. 2020, Table 1")
    assert ln.effect == Effect(1.07, smallest="7 %: what a user notices")
    assert bn.planned_n == {"cpu": 8, "full": 5} and ln.planned_n == {}
    assert bn.full_scale_only == FullScaleOnly(40, "the clock needs quiet machines") and ln.full_scale_only is None
    (check,) = rules.checks
    assert (check.above, check.below, check.variants) == (0.9, None, ("cpu",))
    assert missing_plan_keys(rules) == []


def test_missing_plan_keys_names_the_title_and_each_directional_claim_without_an_effect() -> None:
    data = rules_data()
    del data["paper_title"]
    data["claims"].append(claim("no_effect"))
    data["claims"].append({**claim("same"), "relation": "equivalent", "margin": 0.02})  # its margin is its effect
    assert missing_plan_keys(parse_rules(data, "demo", "h0")) == [
        "rules of demo: no paper_title", "rules of demo, no_effect: no effect (a directional claim)"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "where, key, valid",
    [
        (lambda d: d, "claimz", "valid keys: preset, min_seeds, scale, claims, alpha"),
        (lambda d: d["claims"][0], "efect", "effect, n, full_scale_only"),
        (lambda d: d["claims"][0]["a"], "selector", "valid keys: label, select, measure"),
        (lambda d: d["claims"][0]["effect"], "paper", "valid keys: value, source, smallest"),
        (lambda d: d["scale"]["cpu"], "notes", "valid keys: kind, note"),
        (lambda d: d.setdefault("pilot", {"seeds": [9]}), "seed", "valid keys: seeds, note"),
    ],
)
def test_an_unknown_key_fails_in_one_line_naming_it_where_and_the_valid_keys(where: Any, key: str, valid: str) -> None:
    data = rules_data()
    where(data)[key] = 1
    with pytest.raises(ConfigError) as e:
        parse_rules(data, "demo", "h0")
    assert f"unknown key {key!r}" in str(e.value) and valid in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("rules of demo")


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d["claims"][0]["effect"].update(smallest="x"), "exactly one of 'source'"),
        (lambda d: d["claims"][0].update(short="x" * 41), "at most 40"),
        (lambda d: d["claims"][0].update(n={"gpu": 4}), "unknown key 'gpu'"),
        (lambda d: d["claims"][0].update(full_scale_only={"needs_n": 40}), "missing key 'why'"),
        (
            lambda d: d.update(
                checks=[
                    {"id": "c", "figure": "f", "claim": "c", "measure": "final", "select": {}, "below": 1, "above": 0}
                ]
            ),
            "exactly one of 'below', 'above' .* and 'tracks'",
        ),  # fmt: skip
        (lambda d: d.update(pilot={"seeds": []}), "non-empty list of integers"),
        (lambda d: d["claims"].append(claim("bn_above")), "claim id 'bn_above' is used twice"),
    ],
)
def test_bad_plan_values_fail_in_one_line(change: Any, match: str) -> None:
    data = rules_data()
    change(data)
    with pytest.raises(ConfigError, match=match) as e:
        parse_rules(data, "demo", "h0")
    assert "\n" not in str(e.value)


def test_every_rules_file_loads() -> None:
    for preset in list_rule_presets():
        rules = load_rules(preset)
        assert rules is not None and rules.claims, preset


# ------------------------------------------------------------------------------- judging


CHECK = {"id": "bn_fits", "figure": "f", "claim": "BN fits its training images",
         "measure": {"name": "final", "key": "train/acc"}, "select": {"norm.name": "bn"}, "above": 0.95}  # fmt: skip


@pytest.mark.parametrize("train, passed", [(0.99, True), (0.9, False)])
def test_a_failed_check_leaves_every_claim_of_the_variant_unjudged(
    monkeypatch: pytest.MonkeyPatch, train: float, passed: bool
) -> None:
    use_rules(monkeypatch, rules_data(checks=[CHECK]))
    got = by_id("demo_cpu", runs({"bn": 0.7, "none": 0.5}, train=train))
    assert got["bn_fits"].verdict == (PASSED if passed else FAILED)  # `above`: every selected run's value above 0.95
    assert got["bn_fits"].note.endswith("(passes when every run's is above 0.95)")
    bn = got["bn_above"]
    assert bn.comparison is not None and bn.comparison.estimate == pytest.approx(0.2)  # the numbers stay
    if passed:
        assert bn.verdict == SUPPORTED and bn.note == ""
    else:
        assert bn.verdict == NOT_JUDGED and bn.note == "not judged: setup check failed (bn_fits)"
        assert "not judged: setup check failed (bn_fits)" in bn.measured


def test_a_diverged_run_fails_an_above_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """It counts with −inf against ``above`` (+inf against ``below``): never a pass."""
    below = {k: v for k, v in {**CHECK, "id": "bn_low", "below": 2.0}.items() if k != "above"}
    use_rules(monkeypatch, rules_data(checks=[CHECK, below]))
    rs = runs({"bn": 0.7, "none": 0.5})
    rs[0].summary["status"] = "diverged"
    got = by_id("demo_cpu", rs)
    assert got["bn_fits"].verdict == FAILED and got["bn_fits"].note.startswith("BN seed=0 -inf, BN seed=1 0.99")
    assert got["bn_low"].verdict == FAILED and got["bn_low"].note.startswith("BN seed=0 inf, BN seed=1 0.99")
    assert got["bn_above"].note.startswith("not judged: setup check failed (bn_fits, bn_low); a run diverged")


def test_a_check_that_selects_no_run_fails_and_a_check_of_another_variant_does_not_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nothing = {**CHECK, "id": "gn_fits", "select": {"norm.name": "gn"}}
    other = {**CHECK, "id": "full_only", "above": 2.0, "variants": ["full"]}  # would fail: not run in _cpu
    use_rules(monkeypatch, rules_data(checks=[nothing, other]))
    got = by_id("demo_cpu", runs({"bn": 0.7, "none": 0.5}))
    assert got["gn_fits"].verdict == FAILED and got["gn_fits"].note.startswith("no runs selected")
    assert got["full_only"].verdict == NOT_JUDGED and "not run in demo_cpu" in got["full_only"].note
    assert got["bn_above"].verdict == NOT_JUDGED and got["bn_above"].note == "not judged: setup check failed (gn_fits)"
    full = by_id("demo", runs({"bn": 0.7, "none": 0.5}))
    assert full["full_only"].verdict == FAILED
    assert full["bn_above"].note == "not judged: setup check failed (gn_fits, full_only)"


def test_a_full_scale_only_claim_whose_arms_ran_is_judged_in_the_cpu_variant_and_its_holm_family(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 56: ``full_scale_only`` documents what the CPU plan does not size; it never withholds
    a verdict from arms that ran (both judged, one Holm family of two, at both scales)."""
    data = rules_data()
    data["claims"].append(claim("ln_above", "ln", full_scale_only={"needs_n": 40, "why": "a 1 % effect"}))
    use_rules(monkeypatch, data)
    rs = runs({"bn": 0.7, "ln": 0.52, "none": 0.5})
    for preset in ("demo_cpu", "demo"):
        got = by_id(preset, rs)
        bn, ln = got["bn_above"].comparison, got["ln_above"].comparison
        assert bn is not None and ln is not None and got["ln_above"].verdict != NOT_JUDGED
        assert got["ln_above"].reason == "" and got["bn_above"].reason == ""
        assert [got["bn_above"].p_holm, got["ln_above"].p_holm] == pytest.approx(holm([bn.p, ln.p]))
        assert got["bn_above"].p_holm > bn.p


def test_a_claim_whose_arm_ran_no_seed_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    data = rules_data()
    data["claims"].append(claim("ln_above", "ln", full_scale_only={"needs_n": 40, "why": "a 1 % effect"}))
    use_rules(monkeypatch, data)
    got = by_id("demo_cpu", runs({"bn": 0.7, "none": 0.5}))  # no ln run at this scale
    assert got["ln_above"].verdict == NOT_JUDGED and got["ln_above"].reason == "not_run"
    assert got["ln_above"].comparison is None and "needs n ≈ 40" in got["ln_above"].note
    assert got["bn_above"].p_holm == got["bn_above"].comparison.p  # a family of one: not_run stays out


def test_runs_with_pilot_seeds_are_refused_unless_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    use_rules(monkeypatch, rules_data(pilot={"seeds": [100, 101]}))
    rs = runs({"bn": 0.7, "none": 0.5}) + runs({"bn": 0.7, "none": 0.5}, seeds=(100,))
    with pytest.raises(ConfigError, match=r"2 runs have the pilot seeds \[100\] .* not confirmatory") as e:
        judge("demo_cpu", rs)
    assert "\n" not in str(e.value)
    pilots = runs({"bn": 0.7, "none": 0.5}, seeds=(100, 101, 102, 103, 104))
    assert by_id("demo_cpu", pilots, pilot=True)["bn_above"].verdict == SUPPORTED


@pytest.mark.parametrize("preset", list_rule_presets())
def test_the_parsed_rules_are_safe_loads_and_an_edit_is_read(preset: str, tmp_path, monkeypatch) -> None:
    """`normbench.rules.load_rules_data` parses once per text (libyaml where present): the data and
    the hash are ``yaml.safe_load``'s, a caller's change does not reach the next caller, and an
    edited file is parsed again."""
    import shutil

    import yaml

    from normbench import rules

    path = rules.rules_path(preset)
    assert rules.load_rules_data(preset) == yaml.safe_load(path.read_text())
    monkeypatch.setattr(rules, "RULES_DIR", tmp_path)
    shutil.copy(path, tmp_path / path.name)
    first = rules.load_rules_data(preset)
    before = rules.rules_hash(preset)
    first["claims"].clear()
    assert rules.load_rules_data(preset)["claims"] and rules.rules_hash(preset) == before
    text = (tmp_path / path.name).read_text()
    (tmp_path / path.name).write_text(text.replace("alpha: 0.05", "alpha: 0.01", 1))
    assert rules.load_rules_data(preset)["alpha"] == 0.01 and rules.rules_hash(preset) != before
